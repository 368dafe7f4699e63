"""The self-play graph end to end on a tiny random Llama: iterations, checkpoints, both estimators, kill and resume."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
from test_lifelong_train import tiny_llama  # noqa: E402

from swm.checkpoints import ExperienceStore, sqlite_saver  # noqa: E402
from swm.context import SWMContext  # noqa: E402
from swm.graphs import selfplay  # noqa: E402
from swm.selfplay.checkpoint import checkpoint_dir, latest, meta  # noqa: E402
from swm.selfplay.plan import training_seed  # noqa: E402
from swm.selfplay.store import load_rollouts  # noqa: E402


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


def plan(base: Path, out: Path, estimator: str = "hierarchical", **extra: Any) -> dict[str, Any]:
    return {"run_id": f"sp-{estimator}", "iterations": 2, "tasks_per_iteration": 1, "group_size": 2, "max_turns": 3,
            "eval_tasks": 1, "out_dir": str(out),
            "policy": {"base": str(base), "lora_r": 4, "lora_alpha": 8, "max_new_tokens": 4},
            "ppo": {"lr": 1e-3, "minibatch": 4}, "advantage": {"estimator": estimator}, **extra}


def run(db: Path, inputs: dict[str, Any] | None, thread: str = "t1", events: list[dict[str, Any]] | None = None,
        **models: Any) -> dict[str, Any]:
    """Run (or resume) a thread; the progress events it streams (``stream_mode="custom"``) go to ``events``."""
    store = ExperienceStore(db)
    out: dict[str, Any] = {}
    with sqlite_saver(db) as saver:
        graph = selfplay.build().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": thread}}
        for mode, chunk in graph.stream(inputs, config, stream_mode=["custom", "values"],
                                        context=SWMContext(store=store, chat_models=models), durability="sync"):
            if mode == "values":
                out = dict(chunk)
            elif events is not None:
                events.append(chunk)
    return out


@pytest.mark.parametrize("estimator", ["hierarchical", "group"])
def test_two_iterations_train_checkpoint_and_report(base_dir: Path, tmp_path: Path, estimator: str) -> None:
    p = plan(base_dir, tmp_path / "out", estimator)
    events: list[dict[str, Any]] = []
    out = run(tmp_path / "run.db", {"plan": p}, events=events)
    assert [(e["event"], e["iteration"]) for e in events if e["event"] != "rollout"] == [
        ("fan_out", 0), ("iteration", 0), ("fan_out", 1), ("iteration", 1)]
    assert [e["rollouts"] for e in events if e["event"] == "fan_out"] == [2, 2]
    assert sum(e["event"] == "rollout" for e in events) == 4
    run_dir = tmp_path / "out" / p["run_id"]
    assert out["iteration"] == 2 and out["stopped"] is None and out["rolled"] == 4
    assert latest(run_dir) == 2 and all(checkpoint_dir(run_dir, i).is_dir() for i in range(3))
    steps = [meta(run_dir, i)["update"]["steps"] for i in (1, 2)]
    state = torch.load(checkpoint_dir(run_dir, 2) / "optimizer.pt", weights_only=True)["state"]
    assert float(next(iter(state.values()))["step"]) == sum(steps), "the optimiser state carries across iterations"
    for i in ("0", "1"):
        summary = out["summaries"][i]
        assert summary["estimator"] == estimator and set(summary["reward"]) == {"buyer", "seller"}
        assert summary["kl"] is not None and summary["tokens"] > 0 and summary["seconds"] > 0
        assert set(summary["eval_reward"]) <= {"buyer", "seller"}
    store = ExperienceStore(tmp_path / "run.db")
    train = load_rollouts(store, p["run_id"], 0, "train")
    assert len(train) == 2 and len(load_rollouts(store, p["run_id"], 0, "eval")) == 1
    turns = [t for r in train for s in r.seats for t in s.turns]
    assert all(len(t.advantages) == len(t.token_ids) == len(t.logprobs) for t in turns)
    if estimator == "group":  # one advantage per seat, broadcast to its tokens
        assert all(len(set(t.advantages)) == 1 for t in turns)
    else:
        assert all(len(t.values) == len(t.token_ids) for t in turns)
    assert store.count("selfplay_iterations") == 2 and store.count("selfplay_runs") == 1
    assert json.loads(next(store.rows("select plan from selfplay_runs"))["plan"])["advantage"]["estimator"] == estimator


def killed_run(template: str, base_dir: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """Run the plan in a child that ``template`` makes SIGKILL itself; return (db, out dir, plan)."""
    db, out = tmp_path / "run.db", tmp_path / "out"
    p = plan(base_dir, out)
    script = template.format(tests=str(Path(__file__).parent), db=str(db), plan=p)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert proc.returncode == -9, proc.stderr[-3000:]
    return db, out, p


def count_generations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the seed of every torch generation from now on (each names its rollout and turn)."""
    from swm.training.policy import LoraValueModel

    calls: list[str] = []
    real_generate = LoraValueModel.generate

    def counting(self: LoraValueModel, prompt: str, seed: str | int = 0, **turn: Any) -> Any:
        calls.append(str(seed))
        return real_generate(self, prompt, seed, **turn)

    monkeypatch.setattr(LoraValueModel, "generate", counting)
    return calls


KILLED = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from swm.training.policy import LoraValueModel
    from test_selfplay_graph import run

    real_save = LoraValueModel.save

    def save(self, directory, optimizer=None, meta=None):
        if (meta or {{}}).get("iteration") == 2:
            self.model.save_pretrained(str(directory / "adapter"))  # half a checkpoint, then the kill
            os.kill(os.getpid(), signal.SIGKILL)
        return real_save(self, directory, optimizer, meta)

    LoraValueModel.save = save
    run({db!r}, {{"plan": {plan!r}}})
""")


def test_a_run_killed_mid_iteration_resumes_without_replaying(base_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    db, out, p = killed_run(KILLED, base_dir, tmp_path)
    run_dir = out / p["run_id"]
    assert latest(run_dir) == 1, "the half-written checkpoint is not the latest"
    assert (run_dir / "checkpoints" / "iter-0002.tmp").is_dir() and not checkpoint_dir(run_dir, 2).exists()
    with sqlite_saver(db) as saver:
        snapshot = selfplay.build().compile(checkpointer=saver).get_state({"configurable": {"thread_id": "t1"}})
    assert snapshot.next == ("update",) and snapshot.values["iteration"] == 1

    calls = count_generations(monkeypatch)
    resumed = run(db, None)
    assert resumed["iteration"] == 2 and resumed["stopped"] is None and resumed["rolled"] == 4
    assert calls and all("/i1/eval/" in c for c in calls), "only the held-out evaluation after the update was played"
    assert latest(run_dir) == 2 and not (run_dir / "checkpoints" / "iter-0002.tmp").exists()
    steps = [meta(run_dir, i)["update"]["steps"] for i in (1, 2)]
    state = torch.load(checkpoint_dir(run_dir, 2) / "optimizer.pt", weights_only=True)["state"]
    assert float(next(iter(state.values()))["step"]) == sum(steps), "the optimiser state came from checkpoint 1"


def test_a_diverging_loss_stops_the_run_and_keeps_the_last_good_adapter(base_dir: Path, tmp_path: Path) -> None:
    p = plan(base_dir, tmp_path / "out", reward={"completion": float("nan")})  # every seat return is NaN
    out = run(tmp_path / "run.db", {"plan": p})
    run_dir = tmp_path / "out" / p["run_id"]
    assert out["stopped"].startswith("diverged: loss is nan")
    assert latest(run_dir) == 0 and out["current"]["adapter"] == str(checkpoint_dir(run_dir, 0))
    assert not out.get("summaries") and out["iteration"] == 0


def test_cli_runs_and_replays_a_finished_thread(base_dir: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from swm.cli import main

    args = ["selfplay", "--base", str(base_dir), "--iterations", "1", "--tasks", "1", "--group", "2", "--max-turns",
            "2", "--eval-tasks", "1", "--max-new-tokens", "3", "--lora-r", "4", "--estimator", "group", "--out",
            str(tmp_path / "out"), "--db", str(tmp_path / "cli.db"), "--thread-id", "cli1", "--json"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    data = json.loads(first.stdout)
    assert data["iteration"] == 1 and data["summaries"]["0"]["estimator"] == "group"
    # live progress on stderr: the rollouts and the iteration's summary as they landed
    assert "] iteration 0 [group, torch]: reward " in first.stderr and "] rollout played" in first.stderr
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and json.loads(again.stdout)["summaries"] == data["summaries"]
    bad = CliRunner().invoke(main, [*args[:-3], "--thread-id", "cli2", "--group", "0"])
    assert bad.exit_code == 2 and "group_size" in bad.output


def test_cli_runs_two_seat_scheduling(base_dir: Path, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from swm.cli import main

    args = ["selfplay", "--base", str(base_dir), "--level", "two-seat", "--family", "scheduling", "--iterations", "1",
            "--tasks", "1", "--group", "2", "--eval-tasks", "1", "--max-new-tokens", "3", "--lora-r", "4",
            "--estimator", "role", "--sampler", "torch", "--out", str(tmp_path / "out"), "--db",
            str(tmp_path / "cli.db"), "--thread-id", "sched", "--json"]
    done = CliRunner().invoke(main, args)
    assert done.exit_code == 0, done.output
    summary = json.loads(done.stdout)["summaries"]["0"]
    assert summary["rollouts"] == 2 and summary["failed"] == 0 and set(summary["reward"]) == {"speaker", "finder"}
    assert summary["pass_rate"] is not None and summary["eval_pass_rate"] is not None
    rollouts = load_rollouts(ExperienceStore(tmp_path / "cli.db"), "sched", 0, "train")
    assert {r.task_id for r in rollouts} == {f"train:scheduling:two-seat:{training_seed(0, 0, 0, 0)}:names=train"}
    assert all(r.seats[1].turns[0].text.startswith("SLOT:") for r in rollouts), "the finder's reply starts SLOT:"


def test_werewolf_self_play_iteration(base_dir: Path, tmp_path: Path) -> None:
    p = plan(base_dir, tmp_path / "out", "group", run_id="sp-ww", iterations=1, game="werewolf", players=5,
             game_options={"max_rounds": 1}, illegal="filter")
    out = run(tmp_path / "run.db", {"plan": p})
    summary = out["summaries"]["0"]
    assert out["stopped"] is None and summary["rollouts"] == 2 and summary["failed"] == 0
    assert "werewolf" in summary["reward"] and summary["pass_rate"] is None
    signals, held_out = summary["signals"], summary["eval_signals"]  # the moderator's per-role signals
    assert signals["games"] == 2 and held_out["games"] == 1 and signals["legal"]["all"]["n"] > 0
    assert {"village_votes", "seer_checks", "seer_reveals", "wolf_survived", "wolf_rounds"} <= set(signals)
    store = ExperienceStore(tmp_path / "run.db")
    rollouts = load_rollouts(store, "sp-ww", 0, "train")
    assert {r.task_id for r in rollouts} == {f"werewolf:train:{training_seed(0, 0, 0, 0)}"}, "one deal, G = 2 rollouts"
    assert len(load_rollouts(store, "sp-ww", 0, "eval")) == 1


def test_judge_scores_reach_the_rewards_and_the_update(base_dir: Path, tmp_path: Path) -> None:
    from swm.selfplay.judge import TurnScore
    from swm.testing import ScriptedChatModel

    rated_ben = '<data name="rated participant">\nBen Garcia\n'
    judge = ScriptedChatModel(respond=lambda prompt, tool: TurnScore(score=10 if rated_ben in prompt else 2))
    p = plan(base_dir, tmp_path / "out", "group", iterations=1, reward={"judge_weight": 0.5})
    out = run(tmp_path / "run.db", {"plan": p}, judge=judge)
    summary = out["summaries"]["0"]
    turns = 2 * 3  # G = 2 rollouts of 3 turns (no task is settled by a random model)
    assert out["current"]["score"]["judge"] == {"calls": turns, "unjudged": 0} and judge.calls == turns
    assert summary["reward"]["seller"]["mean"] > summary["reward"]["buyer"]["mean"] >= 0  # seller 10, buyer 2
    assert summary["kl"] is not None and out["current"]["update"]["steps"] >= 1


KILLED_IN_ROLLOUT = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from swm.training.policy import LoraValueModel
    from test_selfplay_graph import run

    real_generate = LoraValueModel.generate

    def generate(self, prompt, seed=0, **turn):
        if "/i1/train/" in str(seed) and str(seed).endswith("/g1/1"):  # the second turn of iteration 1's g1
            os.kill(os.getpid(), signal.SIGKILL)
        return real_generate(self, prompt, seed, **turn)

    LoraValueModel.generate = generate
    run({db!r}, {{"plan": {plan!r}}})
""")


def test_a_run_killed_during_rollouts_replays_only_the_unfinished_ones(base_dir: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    db, _, p = killed_run(KILLED_IN_ROLLOUT, base_dir, tmp_path)
    stored = {r.rollout_id for r in load_rollouts(ExperienceStore(db), p["run_id"], 1, "train")}
    assert not any(r.endswith("/g1") for r in stored), "the killed rollout was not stored"

    calls = count_generations(monkeypatch)
    resumed = run(db, None)
    assert resumed["iteration"] == 2 and resumed["stopped"] is None
    replayed = {c.rsplit("/", 1)[0] for c in calls if "/train/" in c}
    assert replayed and all("/i1/train/" in c for c in replayed), "iteration 0 is never played again"
    assert not {r.split("/", 1)[1] for r in stored} & {c.split("/", 1)[1] for c in replayed}, \
        "a stored rollout is never played again"
    assert len(load_rollouts(ExperienceStore(db), p["run_id"], 1, "train")) == 2


def test_rollouts_fan_out_and_do_not_depend_on_completion_order(base_dir: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from swm.selfplay import loop
    from swm.testing import scaled

    real, changed = loop.run_rollout, threading.Condition()
    inside, peak, wanted = [0], [0], [1]

    def tracked(*args: Any, **kwargs: Any) -> Any:
        with changed:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
            changed.notify_all()
            # each rollout waits until max_concurrency of them are in at once (the event the test looks for), so
            # the peak does not depend on how soon the pool starts the other branches; the bound only keeps a
            # scheduler that never fans out that far from hanging (the peak assertion then fails)
            changed.wait_for(lambda: peak[0] >= wanted[0], timeout=scaled(120))
        try:
            return real(*args, **kwargs)
        finally:
            with changed:
                inside[0] -= 1

    monkeypatch.setattr(loop, "run_rollout", tracked)
    tokens = {}
    for concurrency in (1, 3):
        p = plan(base_dir, tmp_path / f"out{concurrency}", "group", iterations=1, group_size=3, max_turns=2,
                 eval_tasks=2)
        peak[0], wanted[0] = 0, concurrency
        out = selfplay.train(p, db=tmp_path / f"run{concurrency}.db", thread_id="t", max_concurrency=concurrency)
        assert out["stopped"] is None and out["summaries"]["0"]["rollouts"] == 3
        assert peak[0] == concurrency, f"{peak[0]} rollouts in flight at max_concurrency {concurrency}"
        store = ExperienceStore(tmp_path / f"run{concurrency}.db")
        tokens[concurrency] = {(r.rollout_id, s.seat): [t.token_ids for t in s.turns]
                               for phase in ("train", "eval") for r in load_rollouts(store, p["run_id"], 0, phase)
                               for s in r.seats}
    assert tokens[1] == tokens[3], "each rollout samples the same tokens whatever runs beside it"
