"""Lifelong-loop nodes that play and score episodes: synthesize, collect, evaluate, deploy, report.

``synthesize`` makes a cycle's training tasks (cycle 0 sets the run up: the dev and test splits
and the initial policy ``p0``); the routes fan out one ``Send`` per episode not yet in the store to
``collect`` (training episodes under the deployed policy) or ``evaluate`` (held-out episodes of
every level, on the dev and the test split, under the incumbent and the candidate). Each branch
plays its episode through the episode graph that the graph module hands to `episode_player`, and
writes it once under a deterministic id, so a resumed run re-plays only episodes that never
finished. An evaluation's id has no cycle in it: a
policy plays each split task once, and a later cycle reuses the result (the incumbent was
evaluated when it was a candidate), so each cycle plays only the candidate's dev and test
episodes. ``deploy`` applies the deploy gate on the dev split and writes both curves' R[cycle, ·]
from the test split; ``report`` computes the metrics and writes the Markdown report and plots.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Send

from swm.context import SWMContext
from swm.errors import ModelCallFailed
from swm.games.store import load_record
from swm.lifelong import store as ls
from swm.lifelong.bridge import episode_inputs, to_record, to_scenario
from swm.lifelong.deploy import decide
from swm.lifelong.game_bridge import game_inputs, game_to_record
from swm.lifelong.metrics import curriculum_for
from swm.lifelong.records import EpisodeRecord
from swm.lifelong.serve import policy_spec
from swm.lifelong.state import DEFAULT_PLAN, EpisodeJob, LifelongState
from swm.lifelong.update import PolicyVersion, memory_text
from swm.social.store import load_turns
from swm.tasks.families import GAME_FAMILIES, Task, synthesize
from swm.tasks.splits import HELDOUT_VERSION, SPLITS, split_tasks
from swm.usage import add_stats, merge_usage


def plan_of(state: LifelongState, ctx: SWMContext | None = None) -> dict[str, Any]:
    """Return the run's plan, defaults filled; with ``ctx``, its ``out_dir`` is this invocation's."""
    plan = {**DEFAULT_PLAN, **(state.get("plan") or {})}
    if ctx is not None and ctx.out_dir:
        plan["out_dir"] = ctx.out_dir
    return plan


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
    # An evaluation's result depends on the policy and the task, not on the cycle that asks for it.
    when = "" if phase in SPLITS else f"c{cycle}/"
    episode_id = f"{plan['run_id']}/{when}{phase}/{policy}/{task.task_id}/s{sample}/{seat}"
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


def eval_split(plan: dict[str, Any], split: str) -> list[Task]:
    """Return the run's tasks of one evaluation split (``dev`` chooses, ``test`` reports)."""
    per_cell = plan["dev_per_cell"] if split == "dev" else plan["heldout_per_cell"]
    return split_tasks(split, plan["levels"], plan["families"], per_cell)


def eval_jobs(state: LifelongState, policy: str, split: str) -> list[EpisodeJob]:
    plan = plan_of(state)
    return [_job(plan, t, state["cycle"], split, 0, policy) for t in eval_split(plan, split)]


def pending_evaluations(state: LifelongState, store: Any) -> list[EpisodeJob]:
    """Return the dev and test episodes of the incumbent and the candidate not yet in the store.

    The incumbent's were played when it was evaluated as a candidate (or at cycle 0), so in a
    run that was not interrupted only the candidate's are left.
    """
    policies = dict.fromkeys([state.get("incumbent", "p0"), state.get("candidate_policy", "p0")])
    jobs = [j for p in policies for split in SPLITS for j in eval_jobs(state, p, split)]
    return [j for j in jobs if not ls.episode_done(store, j["episode_id"])]


def synthesize_node(state: LifelongState, runtime: Runtime[SWMContext]) -> dict[str, Any]:
    """Make the cycle's tasks (cycle 0: the held-out tasks and the initial policy)."""
    store = runtime.context.experience_store()
    plan = plan_of(state)
    cycle = state.get("cycle", 0)
    if cycle == 0:
        splits = {split: eval_split(plan, split) for split in SPLITS}
        for task in (t for tasks in splits.values() for t in tasks):
            ls.put_task(store, task)
        ls.put_splits(store, plan["run_id"], splits, HELDOUT_VERSION)
        ls.put_policy(store, plan["run_id"], PolicyVersion(version="p0", kind="base"))
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
    attempt are removed (`_play`, which counts their calls).
    """
    store = ctx.experience_store()
    scenario = to_scenario(task, memory)
    inputs = episode_inputs(scenario, episode_id=episode_id, policy=policy, max_turns=max_turns, judge=judge,
                            tested_agent=tested_agent)
    out = dict(episode_graph.invoke(inputs, context=ctx, durability="async"))
    turns = load_turns(store, episode_id)
    record = to_record(task, scenario, turns, out.get("judgements"), tested_agent, episode_id=episode_id,
                       source_episode=episode_id, models=dict(out.get("models") or {}),
                       prompts=dict(out.get("prompts") or {}), **provenance)
    return record, dict(out.get("usage") or {})


def run_game(game_graph: Any, task: Task, ctx: SWMContext, *, episode_id: str, tested_agent: str | None,
             **provenance: Any) -> tuple[EpisodeRecord, dict[str, Any]]:
    """Play one game task through ``game_graph`` (no checkpointer: a killed game is replayed whole) and check it."""
    store = ctx.experience_store()
    if store.has_table("game_moves"):
        store.execute("delete from game_moves where game_id = ?", [episode_id])
    out = dict(game_graph.invoke(game_inputs(task, game_id=episode_id, tested_agent=tested_agent), context=ctx,
                                 durability="async"))
    record = game_to_record(task, load_record(store, episode_id), episode_id=episode_id, source_episode=episode_id,
                            models=dict(out.get("models") or {}), prompts=dict(out.get("prompts") or {}),
                            **provenance)
    return record, dict(out.get("usage") or {})


def _play(job: EpisodeJob, ctx: SWMContext, episode_graph: Any, game_graph: Any = None) -> dict[str, Any]:
    """Play and record one episode; an episode that fails after its retries is recorded as failed.

    Usage is stored with the episode, so a branch re-run after a kill (its first result lost
    with the process) returns the same usage, and the report's totals match the calls made.
    """
    store = ctx.experience_store()
    phase_key = "collected" if job["phase"] == "collect" else "evaluated"
    if ls.episode_done(store, job["episode_id"]):
        return {phase_key: 1, "usage": ls.episode_usage(store, job["episode_id"])}
    cut_short = ls.take_attempt_usage(store, job["episode_id"])  # an attempt a kill interrupted
    plan = job["plan"]
    task = task_from_id(job["task_id"])
    policy = ls.get_policy(store, plan["run_id"], job["policy_version"])
    notes = memory_text(policy, task.family, task.level)
    learners = task.names if plan["self_play"] else [job["tested_agent"]]
    memory = {name: notes for name in learners} if notes else {}
    provenance = {"run_id": plan["run_id"], "cycle": job["cycle"], "phase": job["phase"], "seed": job["sample"],
                  "seat": job["seat"], "policy_version": job["policy_version"]}
    policy_kind = plan["policy"] if job["phase"] == "collect" else plan["eval_policy"]
    played = learner_context(ctx, policy, plan["self_play"])  # the learner seats play the policy's model
    try:
        if task.family in GAME_FAMILIES:
            if game_graph is None:
                raise ValueError(f"task family {task.family!r} needs the game graph; none was given to episode_player")
            record, usage = run_game(game_graph, task, played, episode_id=job["episode_id"],
                                     tested_agent=None if plan["self_play"] else job["tested_agent"], **provenance)
        else:
            record, usage = run_episode(episode_graph, task, played, episode_id=job["episode_id"], memory=memory,
                                        policy=policy_kind, max_turns=plan["max_turns"], judge=plan["judge"],
                                        tested_agent=job["tested_agent"], **provenance)
    except ModelCallFailed as exc:  # recorded and counted; the other episodes go on
        spent = {f"{job['phase']}/failed": add_stats(cut_short, ls.take_attempt_usage(store, job["episode_id"]))}
        ls.put_failure(store, job["episode_id"], plan["run_id"], job["cycle"], job["phase"], exc.one_line(), spent)
        ctx.failures.failure(exc.one_line())
        return {"usage": spent}
    ctx.failures.success()
    usage = {f"{job['phase']}/{k}": v for k, v in usage.items()}
    if cut_short["calls"]:
        usage[f"{job['phase']}/interrupted"] = cut_short
    ls.put_episode(store, record, passed_of(record, plan), usage=usage)
    return {phase_key: 1, "usage": merge_usage({}, usage), "prompts": record.prompts, "models": record.models}


def learner_context(ctx: SWMContext, policy: PolicyVersion | None, self_play: bool) -> SWMContext:
    """Return the context an episode under ``policy`` runs with: the learner seats play its served model.

    The tested seat is the ``agent`` role, the other seats ``partner``; in self-play every seat
    is the learner. A policy with no served model (p0, memory) keeps the run's models.
    """
    spec = policy_spec(policy)
    if spec is None:
        return ctx
    return ctx.with_models({"agent": spec, "partner": spec} if self_play else {"agent": spec})


def passed_of(record: EpisodeRecord, plan: dict[str, Any]) -> bool:
    """Completion with no violation (and, when the judge ran, judge goal at least the threshold)."""
    ok = record.verdict.passed and record.error is None
    if plan.get("judge") and record.family not in GAME_FAMILIES:  # games are not judged: the code decides
        ok = ok and record.judge_goal is not None and record.judge_goal >= plan["judge_threshold"]
    return ok


EpisodeNode = Callable[[EpisodeJob, Runtime[SWMContext]], dict[str, Any]]


def play_job(job: EpisodeJob, ctx: SWMContext, episode_graph: Any, game_graph: Any = None) -> dict[str, Any]:
    """Play and record one episode job (what a Send branch does), in this process or on a worker."""
    return _play(job, ctx, episode_graph, game_graph)


Runner = Callable[[EpisodeJob, SWMContext], dict[str, Any]]


def episode_player(episode_graph: Any, game_graph: Any = None, runner: Runner | None = None) -> EpisodeNode:
    """Return the Send-branch node that plays one episode job through ``episode_graph`` and records it once.

    The graph module passes the compiled episode graph in (and the game graph, for game families such
    as werewolf), so this layer never imports the wiring. ``runner(job, ctx)`` plays it elsewhere
    instead (a Ray worker, `swm.commands.workers`), returning what `play_job` returns.
    """

    def play(job: EpisodeJob, runtime: Runtime[SWMContext]) -> dict[str, Any]:
        """Play one episode (training, or dev/test under a policy) and record it once."""
        if runner is not None:
            out = runner(job, runtime.context)
        else:
            out = _play(job, runtime.context, episode_graph, game_graph)
        # per-episode progress for `stream_mode="custom"` (Studio, the SDK), as the CLI's bar counts them
        runtime.stream_writer({"event": "episode", "run_id": job["plan"]["run_id"], "cycle": job["cycle"],
                               "phase": job["phase"], "episode_id": job["episode_id"],
                               "failed": not (out.get("collected") or out.get("evaluated")),
                               "episodes_done": ls.count_episodes(runtime.context.experience_store(),
                                                                  job["plan"]["run_id"])})
        return out

    return play


def after_synthesize(state: LifelongState, runtime: Runtime[SWMContext]) -> list[Send] | str:
    """Fan out the episodes still to play: baseline evaluation at cycle 0, collection after."""
    store = runtime.context.experience_store()
    if state.get("cycle", 0) == 0:
        return _fan_out(runtime, state, "evaluate", pending_evaluations(state, store)) or "deploy"
    jobs = [j for j in collect_jobs(state) if not ls.episode_done(store, j["episode_id"])]
    return _fan_out(runtime, state, "collect", jobs) or "convert"


def after_update(state: LifelongState, runtime: Runtime[SWMContext]) -> list[Send] | str:
    """Fan out the dev and test episodes still to play (the candidate's; the incumbent's are reused)."""
    store = runtime.context.experience_store()
    return _fan_out(runtime, state, "evaluate", pending_evaluations(state, store)) or "deploy"


def _fan_out(runtime: Runtime[SWMContext], state: LifelongState, node: str, jobs: list[EpisodeJob]) -> list[Send]:
    """Send one branch per job, announcing how many to `stream_mode="custom"` readers."""
    runtime.stream_writer({"event": "fan_out", "cycle": state.get("cycle", 0), "node": node, "episodes": len(jobs)})
    return [Send(node, j) for j in jobs]


def refuse_failed(store: Any, plan: dict[str, Any], cycle: int, phases: tuple[str, ...]) -> None:
    """Stop before a fan-out's episodes are used while some of them failed after their retries.

    The other episodes of the fan-out finished and are kept; `resend_failed` tells the CLI how
    to send only the failed ones again on the rerun.
    """
    failed = [r for r in ls.failures(store, plan["run_id"]) if r["cycle"] == cycle and r["phase"] in phases]
    if failed:
        raise ModelCallFailed(f"{len(failed)} episode(s) of cycle {cycle} ({'/'.join(phases)}) failed after their "
                              f"retries (first: {failed[0]['error']})",
                              "rerun with the same --db and --thread-id to play only those again")


def resend_failed(state: LifelongState, store: Any) -> str | None:
    """Return the node to replay (``graph.update_state(..., as_node=...)``) so its fan-out sends again
    the episodes of the current phase that failed, or None when none did."""
    plan, cycle = plan_of(state), state.get("cycle", 0)
    evaluating = cycle == 0 or state.get("phase") in ("evaluate", "deploy")
    phases = SPLITS if evaluating else ("collect",)
    if not any(r["cycle"] == cycle and r["phase"] in phases for r in ls.failures(store, plan["run_id"])):
        return None
    return "update" if evaluating and cycle > 0 else "synthesize"


def deploy_node(state: LifelongState, runtime: Runtime[SWMContext]) -> dict[str, Any]:
    """Choose on the dev split, write both curves' R[cycle, ·] from the test split, and advance the cycle.

    The deployed curve's row is the test result of the policy in service after this cycle; the
    candidate curve's row is the test result of the policy trained this cycle, deployed or not.
    Both are that policy's own episodes (the store names them), never another policy's row.
    """
    store = runtime.context.experience_store()
    plan = plan_of(state)
    refuse_failed(store, plan, state.get("cycle", 0), SPLITS)
    run, cycle = plan["run_id"], state.get("cycle", 0)
    incumbent, candidate = state.get("incumbent", "p0"), state.get("candidate_policy", "p0")
    if cycle == 0:
        serving, explain = "p0", "baseline: the initial policy p0"
        ls.put_deploy(store, run, 0, "p0", "p0", True, [], {})
    else:
        metric = "completion" if plan["deploy_metric"] == "completion" else "pass"
        curriculum = curriculum_for(plan["levels"], plan["cycles"])
        decision = decide(ls.eval_cells(store, run, incumbent, metric, "dev"),
                          ls.eval_cells(store, run, candidate, metric, "dev"),
                          earlier=curriculum[: cycle - 1], current=curriculum[cycle - 1], epsilon=plan["epsilon"])
        serving = candidate if decision.deploy else incumbent
        explain = decision.explain()
        ls.put_deploy(store, run, cycle, candidate, incumbent, decision.deploy, decision.reasons, decision.deltas)
    for curve, policy in (("deployed", serving), ("candidate", candidate)):
        played = ls.played_cycle(store, run, policy, "test")
        for metric in ("completion", "pass"):
            cells = ls.eval_cells(store, run, policy, metric, "test")
            ls.put_matrix_row(store, run, curve, cycle, policy, metric, cells, played)
    runtime.stream_writer({"event": "deploy", "cycle": cycle, "serving": serving, "candidate": candidate,
                           "decision": explain})
    return {"incumbent": serving, "cycle": cycle + 1, "phase": "synthesize", "decisions": {str(cycle): explain}}


def after_deploy(state: LifelongState) -> str:
    return "synthesize" if state["cycle"] <= plan_of(state)["cycles"] else "report"


def report_node(state: LifelongState, runtime: Runtime[SWMContext]) -> dict[str, Any]:
    """Compute ACC/BWT/FWT/F_k, store them, and write the report and plots."""
    from swm.lifelong.report import write_report

    ctx = runtime.context
    path = write_report(ctx.experience_store(), plan_of(state, ctx), usage=state.get("usage"),
                        agent_spec=ctx.spec_for("agent"))
    return {"report_path": str(path), "phase": "done"}
