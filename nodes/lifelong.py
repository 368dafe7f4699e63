"""Lifelong-loop nodes that play and score episodes: synthesize, collect, evaluate, deploy, report.

``synthesize`` makes a cycle's training tasks (cycle 0 sets the run up: the held-out tasks and
the initial policy ``p0``); the routes fan out one ``Send`` per episode not yet in the store to
``collect`` (training episodes under the deployed policy) or ``evaluate`` (held-out episodes of
every level under the candidate). Each branch plays its episode through the episode graph
that the graph module hands to `episode_player`, and writes it once under a deterministic id,
so a resumed run re-plays only episodes that never finished. ``deploy`` applies the deploy gate
and writes R[cycle, ·]; ``report`` computes the metrics and writes the Markdown report and plots.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Send

from swm.context import SWMContext
from swm.lifelong import store as ls
from swm.lifelong.bridge import episode_inputs, to_record, to_scenario
from swm.lifelong.deploy import decide
from swm.lifelong.heldout import heldout
from swm.lifelong.metrics import curriculum_for
from swm.lifelong.records import EpisodeRecord
from swm.lifelong.state import DEFAULT_PLAN, EpisodeJob, LifelongState
from swm.lifelong.tasks import Task, synthesize
from swm.lifelong.update import Policy, memory_text
from swm.social.store import load_turns
from swm.usage import merge_usage


def plan_of(state: LifelongState) -> dict[str, Any]:
    return {**DEFAULT_PLAN, **(state.get("plan") or {})}


def level_of(plan: dict[str, Any], cycle: int) -> str:
    """Return the level cycle ``cycle`` (from 1) trains on."""
    return curriculum_for(plan["levels"], plan["cycles"])[cycle - 1]


def task_from_id(task_id: str) -> Task:
    split, family, level, seed = task_id.split(":")
    return synthesize(family, level, int(seed), split=split)


def training_tasks(plan: dict[str, Any], cycle: int) -> list[Task]:
    """Return the cycle's tasks: families in turn, enough for ``episodes_per_level`` episodes."""
    level = level_of(plan, cycle)
    n_tasks = math.ceil(plan["episodes_per_level"] / plan["samples_per_task"])
    families = plan["families"]
    return [synthesize(families[i % len(families)], level, cycle * 1000 + i) for i in range(n_tasks)]


def _job(plan: dict[str, Any], task: Task, cycle: int, phase: str, sample: int, policy: str) -> EpisodeJob:
    if plan["self_play"]:
        seat, tested = "all", task.names[0]
    else:
        tested = task.names[sample % len(task.names)]
        seat = tested
    episode_id = f"{plan['run_id']}/c{cycle}/{phase}/{policy}/{task.task_id}/s{sample}/{seat}"
    return EpisodeJob(episode_id=episode_id, task_id=task.task_id, cycle=cycle, phase=phase, sample=sample,
                      seat=seat, tested_agent=tested, policy_version=policy, plan=plan)


def collect_jobs(state: LifelongState) -> list[EpisodeJob]:
    plan, cycle = plan_of(state), state["cycle"]
    jobs = []
    for i, task in enumerate(training_tasks(plan, cycle)):
        for s in range(plan["samples_per_task"]):
            if i * plan["samples_per_task"] + s < plan["episodes_per_level"]:
                jobs.append(_job(plan, task, cycle, "collect", s, state["incumbent"]))
    return jobs


def eval_jobs(state: LifelongState, policy: str) -> list[EpisodeJob]:
    plan = plan_of(state)
    tasks = heldout(plan["levels"], plan["families"], plan["heldout_per_cell"])
    return [_job(plan, t, state["cycle"], "eval", 0, policy) for t in tasks]


def synthesize_node(state: LifelongState, runtime: Runtime[SWMContext]) -> dict[str, Any]:
    """Make the cycle's tasks (cycle 0: the held-out tasks and the initial policy)."""
    store = runtime.context.experience_store()
    plan = plan_of(state)
    cycle = state.get("cycle", 0)
    if cycle == 0:
        for task in heldout(plan["levels"], plan["families"], plan["heldout_per_cell"]):
            ls.put_task(store, task)
        ls.put_policy(store, plan["run_id"], Policy(version="p0", kind="base"))
        return {"plan": plan, "cycle": 0, "phase": "evaluate", "incumbent": "p0", "candidate_policy": "p0"}
    for task in training_tasks(plan, cycle):
        ls.put_task(store, task)
    return {"phase": "collect"}


# The inner episode graph has no checkpointer; without a durability of its own it inherits an
# outer durability="sync" and LangGraph fails (AttributeError: _put_checkpoint_fut). Passing one
# makes LangGraph warn that it has no effect, which is exactly what we want here.
warnings.filterwarnings("ignore", message="`durability` has no effect when no checkpointer is present")


def run_episode(episode_graph: Any, task: Task, ctx: SWMContext, *, episode_id: str, memory: dict[str, str],
                policy: str, max_turns: int, judge: bool, tested_agent: str | None = None,
                **provenance: Any) -> tuple[EpisodeRecord, dict[str, Any]]:
    """Play one episode of a task through ``episode_graph``; return its record and the graph's usage.

    The episode graph has no checkpointer of its own: an episode interrupted by a kill is played
    again from its first turn, under the same id, after the stale turn rows of the unfinished
    attempt are removed.
    """
    store = ctx.experience_store()
    with store.lock:
        if store.has_table("turns"):
            store.db.execute("delete from turns where episode_id = ?", [episode_id])
            store.db.conn.commit()
    scenario = to_scenario(task, memory)
    inputs = episode_inputs(scenario, episode_id=episode_id, policy=policy, max_turns=max_turns, judge=judge,
                            tested_agent=tested_agent)
    out = dict(episode_graph.invoke(inputs, context=ctx, durability="async"))
    turns = load_turns(store, episode_id)
    record = to_record(task, scenario, turns, out.get("judgements"), tested_agent, episode_id=episode_id,
                       source_episode=episode_id, models=dict(out.get("models") or {}),
                       prompts=dict(out.get("prompts") or {}), **provenance)
    return record, dict(out.get("usage") or {})


def _play(job: EpisodeJob, ctx: SWMContext, episode_graph: Any) -> dict[str, Any]:
    store = ctx.experience_store()
    if ls.episode_done(store, job["episode_id"]):
        return {}
    plan = job["plan"]
    task = task_from_id(job["task_id"])
    policy = ls.get_policy(store, plan["run_id"], job["policy_version"])
    notes = memory_text(policy, task.family, task.level)
    learners = task.names if plan["self_play"] else [job["tested_agent"]]
    memory = {name: notes for name in learners} if notes else {}
    provenance = {"run_id": plan["run_id"], "cycle": job["cycle"], "phase": job["phase"], "seed": job["sample"],
                  "seat": job["seat"], "policy_version": job["policy_version"]}
    policy_kind = plan["policy"] if job["phase"] == "collect" else plan["eval_policy"]
    record, usage = run_episode(episode_graph, task, ctx, episode_id=job["episode_id"], memory=memory,
                                policy=policy_kind, max_turns=plan["max_turns"], judge=plan["judge"],
                                tested_agent=job["tested_agent"], **provenance)
    ls.put_episode(store, record, passed_of(record, plan))
    phase_key = "collected" if job["phase"] == "collect" else "evaluated"
    return {phase_key: 1, "usage": merge_usage({}, {f"{job['phase']}/{k}": v for k, v in usage.items()}),
            "prompts": record.prompts, "models": record.models}


def passed_of(record: EpisodeRecord, plan: dict[str, Any]) -> bool:
    """Completion with no violation (and, when the judge ran, judge goal at least the threshold)."""
    ok = record.verdict.passed and record.error is None
    if plan.get("judge"):
        ok = ok and record.judge_goal is not None and record.judge_goal >= plan["judge_threshold"]
    return ok


EpisodeNode = Callable[[EpisodeJob, Runtime[SWMContext]], dict[str, Any]]


def episode_player(episode_graph: Any) -> EpisodeNode:
    """Return the Send-branch node that plays one episode job through ``episode_graph`` and records it once.

    The graph module passes the compiled episode graph in, so this layer never imports the wiring.
    """

    def play(job: EpisodeJob, runtime: Runtime[SWMContext]) -> dict[str, Any]:
        """Play one episode (training, or held-out under the candidate) and record it once."""
        return _play(job, runtime.context, episode_graph)

    return play


def after_synthesize(state: LifelongState, runtime: Runtime[SWMContext]) -> list[Send] | str:
    """Fan out the episodes still to play: baseline evaluation at cycle 0, collection after."""
    store = runtime.context.experience_store()
    if state.get("cycle", 0) == 0:
        jobs = [j for j in eval_jobs(state, "p0") if not ls.episode_done(store, j["episode_id"])]
        return [Send("evaluate", j) for j in jobs] or "deploy"
    jobs = [j for j in collect_jobs(state) if not ls.episode_done(store, j["episode_id"])]
    return [Send("collect", j) for j in jobs] or "convert"


def after_update(state: LifelongState, runtime: Runtime[SWMContext]) -> list[Send] | str:
    """Fan out the candidate's held-out episodes on every level."""
    store = runtime.context.experience_store()
    jobs = [j for j in eval_jobs(state, state["candidate_policy"]) if not ls.episode_done(store, j["episode_id"])]
    return [Send("evaluate", j) for j in jobs] or "deploy"


def deploy_node(state: LifelongState, runtime: Runtime[SWMContext]) -> dict[str, Any]:
    """Apply the deploy gate, write R[cycle, ·] for the policy in service, and advance the cycle."""
    store = runtime.context.experience_store()
    plan = plan_of(state)
    run, cycle = plan["run_id"], state.get("cycle", 0)
    incumbent, candidate = state.get("incumbent", "p0"), state.get("candidate_policy", "p0")
    if cycle == 0:
        serving, explain = "p0", "baseline: the initial policy p0"
        ls.put_deploy(store, run, 0, "p0", "p0", True, [], {})
    else:
        metric = "completion" if plan["deploy_metric"] == "completion" else "pass"
        curriculum = curriculum_for(plan["levels"], plan["cycles"])
        decision = decide(ls.eval_cells(store, run, incumbent, metric), ls.eval_cells(store, run, candidate, metric),
                          earlier=curriculum[: cycle - 1], current=curriculum[cycle - 1], epsilon=plan["epsilon"])
        serving = candidate if decision.deploy else incumbent
        explain = decision.explain()
        ls.put_deploy(store, run, cycle, candidate, incumbent, decision.deploy, decision.reasons, decision.deltas)
    for metric in ("completion", "pass"):
        ls.put_matrix_row(store, run, cycle, serving, metric, ls.eval_cells(store, run, serving, metric))
    return {"incumbent": serving, "cycle": cycle + 1, "phase": "synthesize", "decisions": {str(cycle): explain}}


def after_deploy(state: LifelongState) -> str:
    return "synthesize" if state["cycle"] <= plan_of(state)["cycles"] else "report"


def report_node(state: LifelongState, runtime: Runtime[SWMContext]) -> dict[str, Any]:
    """Compute ACC/BWT/FWT/F_k, store them, and write the report and plots."""
    from swm.lifelong.report import write_report

    path = write_report(runtime.context.experience_store(), plan_of(state), usage=state.get("usage"))
    return {"report_path": str(path), "phase": "done"}
