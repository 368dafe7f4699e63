"""Play and record one lifelong episode job: a task through the episode graph (or the game graph), checked.

The graphs are handed in by the layer above (`nodes.lifelong.episode_player`, a worker), so this
module never imports the wiring. The inner graphs have no checkpointer of their own: an episode
interrupted by a kill is played again from its first turn, under the same id (the stale turn
rows of the unfinished attempt removed, their calls counted), and written once.
"""

from __future__ import annotations

import warnings
from typing import Any

from langgraph.runtime import RunControl

from swm import drain
from swm.context import LifelongContext
from swm.errors import ModelCallFailed
from swm.games.store import load_record
from swm.lifelong import store as ls
from swm.lifelong.bridge import episode_inputs, to_record, to_scenario
from swm.lifelong.decision_play import play_decision
from swm.lifelong.game_bridge import game_inputs, game_to_record
from swm.lifelong.jobs import job_plan, task_from_id
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.records import EpisodeRecord
from swm.lifelong.serve import policy_spec
from swm.lifelong.state import EpisodeJob, LifelongState
from swm.lifelong.two_turn_play import play_two_turn
from swm.lifelong.update import PolicyVersion, memory_text
from swm.social.store import load_turns
from swm.tasks.families import Task, is_game, turn_limit
from swm.tasks.levels import play_of
from swm.usage import CallStats, add_stats, merge_usage

# The inner episode graph has no checkpointer; without a durability of its own it inherits an
# outer durability="sync" and LangGraph fails (AttributeError: _put_checkpoint_fut). Passing one
# makes LangGraph warn that it has no effect, which is exactly what we want here.
warnings.filterwarnings("ignore", message="`durability` has no effect when no checkpointer is present")


def run_episode(episode_graph: Any, task: Task, ctx: LifelongContext, *, episode_id: str, memory: dict[str, str],
                policy: str, max_turns: int, judge: bool, tested_agent: str | None = None,
                **provenance: Any) -> tuple[EpisodeRecord, dict[str, CallStats]]:
    """Play one episode of a task through ``episode_graph``; return its record and the graph's usage.

    The episode graph has no checkpointer of its own: an episode interrupted by a kill is played
    again from its first turn, under the same id, after the stale turn rows of the unfinished
    attempt are removed (`_play`, which counts their calls).
    """
    store = ctx.experience_store()
    scenario = to_scenario(task, memory)
    inputs = episode_inputs(scenario, episode_id=episode_id, policy=policy, max_turns=max_turns, judge=judge,
                            tested_agent=tested_agent)
    drain.stop_if_drained()  # SIGTERM/SIGHUP: an episode not yet begun stays for the rerun
    # an episode already playing finishes (it has no checkpoint to stop at), so its calls are not paid twice
    out = dict(episode_graph.invoke(inputs, context=ctx, durability="async", control=RunControl()))
    turns = load_turns(store, episode_id)
    record = to_record(task, scenario, turns, out.get("judgements"), tested_agent, episode_id=episode_id,
                       source_episode=episode_id, models=dict(out.get("models") or {}),
                       prompts=dict(out.get("prompts") or {}), **provenance)
    return record, dict(out.get("usage") or {})


def run_game(game_graph: Any, task: Task, ctx: LifelongContext, *, episode_id: str, tested_agent: str | None,
             **provenance: Any) -> tuple[EpisodeRecord, dict[str, CallStats]]:
    """Play one game task through ``game_graph`` (no checkpointer: a killed game is replayed whole) and check it."""
    store = ctx.experience_store()
    if store.has_table("game_moves"):
        store.execute("delete from game_moves where game_id = ?", [episode_id])
    drain.stop_if_drained()
    out = dict(game_graph.invoke(game_inputs(task, game_id=episode_id, tested_agent=tested_agent), context=ctx,
                                 durability="async", control=RunControl()))
    record = game_to_record(task, load_record(store, episode_id), episode_id=episode_id, source_episode=episode_id,
                            models=dict(out.get("models") or {}), prompts=dict(out.get("prompts") or {}),
                            **provenance)
    return record, dict(out.get("usage") or {})


def play_job(job: EpisodeJob, ctx: LifelongContext, episode_graph: object, game_graph: object = None,
             in_flight: int = 1) -> LifelongState:
    """Play and record one episode job (a Send branch, here or on a worker); a failure after retries is recorded.

    ``in_flight``: how many branches this process plays at once; up to that many samples of a
    collected decision (or two-turn opener) then share one request (`swm.lifelong.decision_play`).

    Usage is stored with the episode, so a branch re-run after a kill (its first result lost
    with the process) returns the same usage, and the report's totals match the calls made.
    """
    store = ctx.experience_store()
    counted: LifelongState = {"collected": 1} if job["phase"] == "collect" else {"evaluated": 1}
    if ls.episode_done(store, job["episode_id"]):
        return {**counted, "usage": ls.episode_usage(store, job["episode_id"])}
    cut_short = ls.take_attempt_usage(store, job["episode_id"])  # an attempt a kill interrupted
    plan = job_plan(job)
    task = task_from_id(job["task_id"])
    policy = ls.get_policy(store, plan.run_id, job["policy_version"])
    notes = memory_text(policy, task.family, task.level)
    learners = task.names if plan.self_play else [job["tested_agent"]]
    memory = {name: notes for name in learners} if notes else {}
    provenance = {"run_id": plan.run_id, "cycle": job["cycle"], "phase": job["phase"], "seed": job["sample"],
                  "seat": job["seat"], "policy_version": job["policy_version"]}
    strategy = plan.act_strategy if job["phase"] == "collect" else plan.eval_act_strategy
    played = learner_context(ctx, policy, plan.self_play, plan)  # the learner seats play the policy's model
    # a collected task's samples are fanned out side by side: on llama-server they share one request
    siblings = min(plan.samples_per_task, in_flight) if job["phase"] == "collect" else 1
    try:
        if play_of(task.level) == "decision":  # the level's row says how it is played
            record, usage = play_decision(task, played, episode_id=job["episode_id"], sample=job["sample"],
                                          siblings=siblings, **provenance)
        elif play_of(task.level) == "two-turn":
            record, usage = play_two_turn(task, played, episode_id=job["episode_id"], sample=job["sample"],
                                          siblings=siblings, **provenance)
        elif is_game(task.family):
            if game_graph is None:
                raise ValueError(f"task family {task.family!r} needs the game graph; none was given to episode_player")
            record, usage = run_game(game_graph, task, played, episode_id=job["episode_id"],
                                     tested_agent=None if plan.self_play else job["tested_agent"], **provenance)
        else:
            record, usage = run_episode(episode_graph, task, played, episode_id=job["episode_id"], memory=memory,
                                        policy=strategy, max_turns=turn_limit(task.level, plan.max_turns),
                                        judge=plan.judge,
                                        tested_agent=job["tested_agent"], **provenance)
    except ModelCallFailed as exc:  # recorded and counted; the other episodes go on
        spent = {f"{job['phase']}/failed": add_stats(cut_short, ls.take_attempt_usage(store, job["episode_id"]))}
        ls.put_failure(store, job["episode_id"], plan.run_id, job["cycle"], job["phase"], exc.one_line(), spent)
        ctx.failures.failure(exc.one_line())
        return {"usage": spent}
    ctx.failures.success()
    usage = {f"{job['phase']}/{k}": v for k, v in usage.items()}
    if cut_short["calls"]:
        usage[f"{job['phase']}/interrupted"] = cut_short
    ls.put_episode(store, record, passed_of(record, plan), usage=usage)
    return {**counted, "usage": merge_usage({}, usage), "prompts": record.prompts, "models": record.models}


def learner_context(ctx: LifelongContext, policy: PolicyVersion | None, self_play: bool,
                    plan: LifelongPlan | None = None) -> LifelongContext:
    """Return the context an episode under ``policy`` runs with: the learner seats play its served model.

    The tested seat is the ``agent`` role, the other seats ``partner``; in self-play every seat
    is the learner. The acting prompt's order is the plan's (`ActContext.act_order`). A policy with no
    served model (p0, memory) keeps the run's models. A trained
    policy's adapter is found (or restored from the run's store) and checked first (`policy_spec`).
    """
    ctx = ctx.with_act_order(plan.act_order if plan is not None else "sotopia")
    spec = policy_spec(policy, ctx, plan)
    if spec is None:
        return ctx
    return ctx.with_models({"agent": spec, "partner": spec} if self_play else {"agent": spec})


def passed_of(record: EpisodeRecord, plan: LifelongPlan) -> bool:
    """Completion with no violation (and, when the judge ran, judge goal at least the threshold)."""
    ok = record.verdict.passed and record.error is None
    if plan.judge and not is_game(record.family):  # games are not judged: the code decides
        ok = ok and record.judge_goal is not None and record.judge_goal >= plan.judge_threshold
    return ok
