"""The lifelong graph end to end with scripted models: tracks, gate, memory, deploy refusal, kill-and-resume."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Send

from swm.checkpoints import ExperienceStore, open_saver, open_store
from swm.checkpoints.savers import SERDE
from swm.context import SWMContext
from swm.graphs import lifelong
from swm.lifelong import store as ls
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.update import StrategyNotes
from swm.social.models import AgentActionForModel
from swm.social.schemas import Foresight, PredictedMind, PredictedReaction
from swm.testing import ScriptedChatModel

PLAN: dict[str, Any] = {"cycles": 2, "levels": ["easy", "medium"], "families": ["negotiation", "secret"],
                        "episodes_per_level": 2, "samples_per_task": 2, "max_turns": 2, "heldout_per_cell": 1,
                        "gate_alpha": 1.0}  # two dev tasks a cell: the gate reads point estimates
EVAL_EPISODES = 2 * 2  # per split: levels x families x 1
TOTAL = 3 * 2 * EVAL_EPISODES + 2 * 2  # p0, p1, p2 each on dev and test once; 2 cycles x 2 collected


class Agents:
    """Scripted self-play: the first seller at a state offers inside the zone, the second below it.

    Same prompt = same state, so two samples of a task split on their first turn; the world model
    likewise predicts well the first time it sees a state and vaguely the second time. With
    ``sabotage`` the policy that carries memory offers below the zone everywhere; with
    ``forget_at="p2"`` only policy p2 does (it forgets what p1 learned).

    As a `FakeOpenAIServer` script it is called on the server's request threads, two samples of a task at once:
    the first-time check and its count hold a lock, or both samples could see the state unseen and offer alike.
    """

    def __init__(self, sabotage: bool = False, fail_after: int | None = None, judge_goal: int = 8,
                 forget_at: str | None = None) -> None:
        self.judge_goal = judge_goal
        self.seen: Counter[str] = Counter()
        self.sabotage = sabotage
        self.forget_at = forget_at
        self.fail_after = fail_after
        self.acts = 0
        self._lock = threading.Lock()

    def __call__(self, prompt: str, tool: str | None) -> Any:
        with self._lock:
            return self._reply(prompt, tool)

    def _reply(self, prompt: str, tool: str | None) -> Any:
        if tool == "SotopiaEvaluation":
            from test_episode_scripts import evaluation

            return evaluation(goal=self.judge_goal)
        if tool == "StrategyNotes":
            return StrategyNotes(notes=["Open with a price just above what you can accept."])
        if tool == "Foresight":
            key = "F" + prompt.split("intended action")[0]
            first = self.seen[key] == 0
            self.seen[key] += 1
            other = re.search(r'<data name="others">\n([^\n]+)\n', prompt).group(1).split(",")[0]  # type: ignore[union-attr]
            mind = "They want to buy it and sell it; find out more." if first else "unclear"
            return Foresight(mental_states=[PredictedMind(agent=other, mental_state=mind)],
                             reactions=[PredictedReaction(agent=other, action_type="speak", argument="Hm.")],
                             next_state="They talk.")
        assert tool == "AgentActionForModel", tool
        if "Here is your intended action" in prompt:
            said = re.search(r'intended action:\n(?:<data name="[^"]*">\n)?.*? said: "(.*)"', prompt)
            return AgentActionForModel(action_type="speak", argument=said.group(1) if said else "Let us talk.")
        self.acts += 1
        if self.fail_after is not None and self.acts > self.fail_after:
            raise RuntimeError("scripted crash mid-collect")
        first = self.seen[prompt] == 0
        self.seen[prompt] += 1
        low = re.search(r"Your minimum price is \$(\d+)", prompt)
        if low:
            bad = (not first or (self.sabotage and "Lessons from earlier episodes" in prompt)
                   or (self.forget_at is not None and f"(policy {self.forget_at})" in prompt))
            price = int(low.group(1)) + (-100 if bad else 1)
            return AgentActionForModel(action_type="speak", argument=f"I can sell it for ${price}. ACCEPT")
        if "Your limit is $" in prompt:
            return AgentActionForModel(action_type="speak", argument="ACCEPT")
        return AgentActionForModel(action_type="speak", argument="Let us talk it over.")


def run(tmp_path: Path, agents: Agents, plan: dict[str, Any], thread: str = "t1",
        resume: bool = False, db: str | Path | None = None) -> tuple[dict[str, Any], Any, ScriptedChatModel]:
    db = db or tmp_path / "run.db"
    store = open_store(db)
    llm = ScriptedChatModel(respond=agents)
    config = {"configurable": {"thread_id": thread}, "max_concurrency": 3, "recursion_limit": 1000}
    with open_saver(db) as saver:
        graph = lifelong.build().compile(checkpointer=saver)
        inputs = None if resume else {"plan": {**plan, "run_id": thread, "out_dir": str(tmp_path / "out")}}
        out = graph.invoke(inputs, config, context=SWMContext(llm=llm, store=store))
    return out, store, llm


def test_a_run_builds_gated_pairs_on_both_tracks_and_injects_memory(tmp_path: Path) -> None:
    out, store, llm = run(tmp_path, Agents(), {**PLAN, "act_strategy": "foresee"})
    assert ls.count_episodes(store, "t1") == TOTAL
    assert store.count("lifelong_episodes", "phase = 'collect'") == 4
    kept = {r["track"]: r["n"] for r in store.rows(
        "select track, count(*) as n from lifelong_pairs where kept = 1 group by track")}
    assert kept.get("action", 0) >= 1 and kept.get("perception", 0) >= 1
    counts = ls.gate_counts(store, "t1")
    assert counts["_kept"] == sum(kept.values()) and out["kept"] == counts["_kept"]
    # provenance on every episode row
    row = next(store.rows("select * from lifelong_episodes where phase = 'collect' limit 1"))
    assert row["policy_version"] == "p0" and row["seat"] == "all" and row["level"] == "easy"
    assert "episode_act@v3" in row["prompts"] and row["models"]
    # memory: p1 was deployed and its lessons reached cycle 2's agents
    assert out["decisions"]["1"].startswith("deployed") and out["incumbent"] == "p2"
    assert any("Lessons from earlier episodes" in p for _, p in llm.prompts)
    policy = ls.get_policy(store, "t1", "p1")
    assert policy is not None
    assert policy.notes["negotiation/easy"] == ["Open with a price just above what you can accept."]
    # R rows for the baseline and both cycles on both curves, metrics and the report with plots
    assert {c for c, _ in ls.matrix(store, "t1", "pass")} == {0, 1, 2}
    assert {c for c, _ in ls.matrix(store, "t1", "pass", "candidate")} == {0, 1, 2}
    report = Path(out["report_path"]).read_text()
    assert "ACC" in report and "BWT" in report and "F_2" in report and "`margin`" in report
    assert "candidate curve" in report and "**dev** split" in report and "<injected ScriptedChatModel>" in report
    assert store.count("lifelong_metrics", "name = 'ACC'") == 4  # 2 metrics x 2 curves
    if (tmp_path / "out" / "r_pass.png").exists():
        assert (tmp_path / "out" / "forgetting.png").stat().st_size > 0


def test_the_deploy_gate_refuses_a_policy_that_regresses(tmp_path: Path) -> None:
    out, store, llm = run(tmp_path, Agents(sabotage=True), PLAN)
    deploy = next(store.rows("select * from lifelong_deploys where cycle = 1"))
    assert deploy["deployed"] == 0 and "current_fell:easy" in deploy["reasons"]
    assert out["decisions"]["1"].startswith("kept the previous policy")
    # cycle 2 collected under p0 again: no lessons in its collection prompts
    rows = list(store.rows("select policy_version from lifelong_episodes where cycle = 2 and phase = 'collect'"))
    assert rows and {r["policy_version"] for r in rows} == {"p0"}
    # R[1] of the deployed curve is the incumbent's (p0) rates; the candidate curve's is p1's own
    rows = {r["curve"]: r for r in store.rows("select * from lifelong_matrix where cycle = 1 and metric = 'pass' "
                                              "and level = 'easy'")}
    assert rows["deployed"]["policy_version"] == "p0" and rows["candidate"]["policy_version"] == "p1"
    assert rows["candidate"]["successes"] < rows["deployed"]["successes"]


def test_a_refused_candidate_that_forgets_shows_negative_bwt_on_its_own_curve(tmp_path: Path) -> None:
    """p1 learns easy and is deployed; p2 loses easy, is refused on dev, and its test row shows the loss."""
    out, store, _ = run(tmp_path, Agents(forget_at="p2"), PLAN)
    assert out["decisions"]["1"].startswith("deployed")
    deploy = next(store.rows("select * from lifelong_deploys where cycle = 2"))
    assert deploy["deployed"] == 0 and "regressed:easy" in deploy["reasons"]
    # the gate's deltas are dev-split differences, computed from dev episodes only
    dev = {p: ls.eval_cells(store, "t1", p, "pass", "dev") for p in ("p1", "p2")}
    assert json.loads(deploy["deltas"])["easy"] == round(dev["p2"]["easy"].rate - dev["p1"]["easy"].rate, 6) < 0
    # each curve's rows are the test episodes of the policy they name: p2 was evaluated although refused
    test = {p: ls.eval_cells(store, "t1", p, "pass", "test") for p in ("p1", "p2")}
    candidate, deployed = ls.matrix(store, "t1", "pass", "candidate"), ls.matrix(store, "t1", "pass")
    assert candidate[(2, "easy")] == test["p2"]["easy"] and deployed[(2, "easy")] == test["p1"]["easy"]
    assert test["p2"]["easy"].rate < test["p1"]["easy"].rate
    bwt = {r["curve"]: r for r in store.rows("select * from lifelong_metrics where metric = 'pass' and name = 'BWT'")}
    drop = test["p2"]["easy"].rate - test["p1"]["easy"].rate
    assert drop < 0 and bwt["candidate"]["value"] == pytest.approx(drop)  # (two episodes: a wide interval)
    # the deployed policy did not change after cycle 1, so its BWT is exactly zero, with no noise added
    assert (bwt["deployed"]["value"], bwt["deployed"]["low"], bwt["deployed"]["high"]) == (0.0, 0.0, 0.0)
    assert [p["deployed"] for p in ls.policies(store, "t1")] == [True, True, False]
    f2 = next(store.rows("select value from lifelong_metrics where curve = 'candidate' and metric = 'pass' and "
                         "name = 'F_2'"))
    assert f2["value"] == pytest.approx(-drop)


def test_evaluation_splits_are_recorded_disjoint_and_each_policy_plays_them_once(tmp_path: Path) -> None:
    out, store, llm = run(tmp_path, Agents(), PLAN)
    splits = ls.split_ids(store, "t1")
    assert len(splits["dev"]) == len(splits["test"]) == EVAL_EPISODES and not set(splits["dev"]) & set(splits["test"])
    for split in ("dev", "test"):
        tasks = {r["task_id"] for r in store.rows("select task_id from lifelong_episodes where phase = ?", [split])}
        assert tasks == set(splits[split])
    # per cycle only the candidate's dev and test episodes are played; the incumbent's are reused
    played = ls.episodes_played(store, "t1")
    assert all(played[(c, s)][0] == EVAL_EPISODES for c in (0, 1, 2) for s in ("dev", "test"))
    # the calls counted per cycle and phase are every call the model got, but the memory distillation's
    assert sum(calls for _, calls in played.values()) == llm.calls - out["usage"]["update"]["calls"] > 0
    assert store.count("lifelong_episodes", "policy_version = 'p1' and phase != 'collect' and cycle != 1") == 0


def test_gating_off_keeps_every_pair_and_still_records_why(tmp_path: Path) -> None:
    strict = {**PLAN, "min_margin": 5.0}  # no pair can pass this margin
    _, store, _ = run(tmp_path, Agents(), {**strict, "gating": False})
    total = store.count("lifelong_pairs")
    assert total > 0 and store.count("lifelong_pairs", "kept = 1") == total
    assert store.count("lifelong_pairs", "gating = 'off'") == total
    assert store.count("lifelong_pairs", "reasons like '%margin%'") == total
    assert ls.get_policy(store, "t1", "p1").pairs_used > 0  # type: ignore[union-attr]
    gated, on_store, _ = run(tmp_path / "on", Agents(), strict)
    assert gated["kept"] == 0 and gated["rejected"] == on_store.count("lifelong_pairs") > 0
    assert ls.gate_counts(on_store, "t1")["margin"] == gated["rejected"]


@pytest.mark.parametrize(("goal", "passes"), [(8, True), (3, False)])
def test_with_the_judge_pass_also_needs_the_goal_score(tmp_path: Path, goal: int, passes: bool) -> None:
    plan = {**PLAN, "cycles": 1, "judge": True, "judge_threshold": 7.0}
    run(tmp_path, Agents(judge_goal=goal), plan)
    store = ExperienceStore(tmp_path / "run.db")
    rows = list(store.rows("select completion, passed, judge_goal from lifelong_episodes where phase = 'test'"))
    assert rows and all(r["judge_goal"] == goal for r in rows)
    completed = [r for r in rows if r["completion"]]
    assert completed  # the scripted seller closes the held-out negotiations
    assert all(bool(r["passed"]) == passes for r in completed)


def test_killed_mid_collect_then_resumed_loses_and_repeats_no_episode(tmp_path: Path, db_target: str | Path) -> None:
    baseline_acts = 2 * EVAL_EPISODES * PLAN["max_turns"]  # p0 on dev and test
    crashing = Agents(fail_after=baseline_acts + 3)  # dies inside cycle 1's collection
    with pytest.raises(RuntimeError, match="scripted crash"):
        run(tmp_path, crashing, PLAN, db=db_target)
    store = open_store(db_target)
    done = ls.count_episodes(store, "t1")
    assert 2 * EVAL_EPISODES <= done < TOTAL
    assert store.count("lifelong_episodes", "phase = 'collect'") < 4
    healthy = Agents()
    out, store, llm = run(tmp_path, healthy, PLAN, resume=True, db=db_target)
    assert ls.count_episodes(store, "t1") == TOTAL
    ids = [r["episode_id"] for r in store.rows("select episode_id from lifelong_episodes")]
    assert len(ids) == len(set(ids)) == TOTAL
    # only the episodes that had not finished were played again (each episode = max_turns act calls)
    assert healthy.acts == (TOTAL - done) * PLAN["max_turns"]
    assert out["collected"] + out["evaluated"] == TOTAL


def test_the_plans_acting_order_reaches_the_episodes_and_the_rows_they_train_on(tmp_path: Path) -> None:
    """``act_order: prefix``: every seat acts on the prefix-ordered prompt, and each recorded turn's prompt (what
    the exports and updates train on) is the one that seat was shown."""
    plan = {**PLAN, "cycles": 1, "levels": ["easy"], "act_order": "prefix"}
    out, store, llm = run(tmp_path, Agents(), plan)
    shown = {p for tool, p in llm.prompts if tool == "AgentActionForModel"}
    assert shown and all(p.rstrip().endswith("Act now.") for p in shown)
    rows = list(store.rows("select prompts, record from lifelong_episodes where phase = 'collect'"))
    assert rows and all("episode_act_prefix@v1" in r["prompts"] for r in rows)
    recorded = [t["prompt"] for r in rows for t in json.loads(r["record"])["turns"]]
    assert recorded and set(recorded) <= shown


def _as_before_the_typed_plan(db: Path) -> int:
    """Rewrite a thread's stored checkpoints and writes as code before the typed plan stored them: the plan
    as its JSON dump, under the earlier key names (``policy``, ``eval_policy``). Return the plans rewritten."""
    rewritten = 0

    def old(value: Any) -> Any:
        nonlocal rewritten
        if isinstance(value, LifelongPlan):
            rewritten += 1
            dump = value.model_dump(mode="json")
            return {RENAMED.get(k, k): v for k, v in dump.items()}
        if isinstance(value, Send):
            return Send(value.node, old(value.arg))
        if isinstance(value, dict):
            return {k: old(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(old(v) for v in value)
        return value

    with closing(sqlite3.connect(db)) as con, con:
        for table, column in (("checkpoints", "checkpoint"), ("writes", "value")):
            for rowid, kind, blob in con.execute(f"select rowid, type, {column} from {table}").fetchall():
                before = rewritten
                value = old(SERDE.loads_typed((kind, blob)))
                if rewritten > before:
                    con.execute(f"update {table} set type = ?, {column} = ? where rowid = ?",
                                (*SERDE.dumps_typed(value), rowid))
    return rewritten


RENAMED = {"act_strategy": "policy", "eval_act_strategy": "eval_policy"}


def test_a_thread_checkpointed_before_the_typed_plan_resumes_and_plays_nothing_twice(tmp_path: Path) -> None:
    """A checkpoint written before the state held a `LifelongPlan` holds its JSON dump (in the state and in the
    pending episode jobs) under the earlier key names: the thread resumes from it, loses and repeats nothing,
    and from the next cycle on its state holds the model."""
    baseline_acts = 2 * EVAL_EPISODES * PLAN["max_turns"]
    with pytest.raises(RuntimeError, match="scripted crash"):
        run(tmp_path, Agents(fail_after=baseline_acts + 3), PLAN)
    db = tmp_path / "run.db"
    assert _as_before_the_typed_plan(db) > 0
    with open_saver(db) as saver:
        stored = lifelong.build().compile(checkpointer=saver).get_state({"configurable": {"thread_id": "t1"}})
    assert isinstance(stored.values["plan"], dict) and "policy" in stored.values["plan"]  # the old form
    done = ls.count_episodes(open_store(db), "t1")
    healthy = Agents()
    out, store, _ = run(tmp_path, healthy, PLAN, resume=True)
    ids = [r["episode_id"] for r in store.rows("select episode_id from lifelong_episodes")]
    assert len(ids) == len(set(ids)) == TOTAL
    assert healthy.acts == (TOTAL - done) * PLAN["max_turns"]  # only the episodes not yet played
    assert isinstance(out["plan"], LifelongPlan) and out["plan"].act_strategy == "plain"
