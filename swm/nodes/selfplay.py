"""Self-play nodes: start an iteration, roll out (one Send per rollout), score, advantages, update, evaluate.

Each node calls one step of `swm.selfplay.loop` with the run's plan and the context's
experience store; the steps are idempotent, so a resumed run re-runs the interrupted node
without repeating finished work.
"""

from __future__ import annotations

from langgraph.config import get_config
from langgraph.runtime import Runtime
from langgraph.types import Send

from swm.context import SelfPlayContext
from swm.errors import SWMError
from swm.graph_state import thread_run_id
from swm.selfplay import loop
from swm.selfplay.checkpoint import checkpoint_dir, has_checkpoint, latest
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.scalars import iteration_scalars
from swm.selfplay.state import IterationSteps, RolloutJob, ScoreStats, SelfPlayState
from swm.selfplay.store import drop_failed, put_iteration, put_run, rollout_done


class NoRollouts(SWMError):
    """Every rollout of an iteration failed: the update would train on nothing."""

    exit_code = 3


def plan_of(state: SelfPlayState | RolloutJob) -> SelfPlayPlan:
    """Return the run's plan: the model the state holds, validated once by ``start`` (an older checkpoint's dump
    is validated here)."""
    return SelfPlayPlan.model_validate(state.get("plan") or {})


def start(state: SelfPlayState, runtime: Runtime[SelfPlayContext]) -> SelfPlayState:
    """Set the run up (iteration 0's adapter, the recorded plan) and begin the iteration."""
    plan = plan_of(state)
    iteration = state.get("iteration", 0)
    if iteration == 0:
        plan = plan.model_copy(update={"run_id": thread_run_id(plan.run_id, SelfPlayPlan().run_id)})
        put_run(runtime.context.experience_store(), plan.run_id, plan)
        loop.ensure_initial_checkpoint(plan)
    return {"plan": plan, "iteration": iteration, "current": {"iteration": iteration},
            "stopped": None}


def fan_out(state: SelfPlayState, runtime: Runtime[SelfPlayContext]) -> list[Send] | str:
    """Send each rollout not yet in the store; with none left, go on to scoring."""
    jobs = loop.rollout_jobs(plan_of(state), runtime.context.experience_store(), state["iteration"])
    # progress for `stream_mode="custom"` (Studio, the SDK)
    runtime.stream_writer({"event": "fan_out", "node": "rollout", "iteration": state["iteration"],
                           "rollouts": len(jobs)})
    return [Send("rollout", job) for job in jobs] or "score"


def rollout(job: RolloutJob, runtime: Runtime[SelfPlayContext]) -> SelfPlayState:
    """Play one rollout under the iteration's adapter and store it (a failed one too, with its reason).

    A rollout already stored is not played again: a run killed after the store kept it but before
    the checkpointer kept the node's write re-runs the node on resume (a served sampler would pay twice).
    """
    plan = plan_of(job)
    store = runtime.context.experience_store()
    if rollout_done(store, job["rollout_id"]):
        return {"rolled": 1}
    loop.run_rollout(plan, store, job, job["iteration"])
    runtime.stream_writer({"event": "rollout", "iteration": job["iteration"], "rollout_id": job["rollout_id"]})
    return {"rolled": 1}


def score(state: SelfPlayState, runtime: Runtime[SelfPlayContext]) -> SelfPlayState:
    """Per-role rewards of the iteration's rollouts; failed rollouts are counted and dropped.

    An iteration whose every rollout failed stops the run (`NoRollouts`, one line) instead of updating on
    nothing; its failed rollouts are let go, and the resumed node plays them again first.

    With ``judge_weight > 0`` the context's ``judge`` model scores each turn of a task rollout.
    """
    return {"current": {"score": _score(plan_of(state), state["iteration"], runtime)}}


def _score(plan: SelfPlayPlan, iteration: int, runtime: Runtime[SelfPlayContext]) -> ScoreStats:
    """Play the iteration's training rollouts not in the store, then score them all (`score`)."""
    store = runtime.context.experience_store()
    for job in loop.rollout_jobs(plan, store, iteration):  # dropped when the iteration had none (below): again
        loop.run_rollout(plan, store, job, iteration)
    judge = runtime.context.model_for("judge") if plan.reward.judge_weight > 0 and not plan.game else None
    stats = loop.score_rollouts(plan, store, iteration, "train", judge)
    if stats["rollouts"] == stats["failed"]:  # PPO would step on nothing and the run end as if it had learned
        first = (stats["failures"] or ["none was played"])[0]
        drop_failed(store, plan.run_id, iteration, "train")
        raise NoRollouts(f"iteration {iteration} has no rollout to train on: {stats['failed']} of "
                         f"{stats['rollouts']} failed (first: {first})",
                         "fix what failed them, then rerun with the same --db and --thread-id: they are played "
                         "again")
    return stats


def _replayed(plan: SelfPlayPlan, iteration: int, runtime: Runtime[SelfPlayContext]) -> ScoreStats | None:
    """Play and score again the training rollouts a served-token mismatch let go (`loop.check_served_tokens`)
    when a resumed run comes back to the step that stopped; None when none is missing."""
    if not loop.rollout_jobs(plan, runtime.context.experience_store(), iteration):
        return None
    return _score(plan, iteration, runtime)


def advantages(state: SelfPlayState, runtime: Runtime[SelfPlayContext]) -> SelfPlayState:
    """Token advantages (hierarchical or group-normalised), normalised per role."""
    plan, iteration = plan_of(state), state["iteration"]
    scored = _replayed(plan, iteration, runtime)
    stats = loop.estimate_advantages(plan, runtime.context.experience_store(), iteration)
    return {"current": {"advantages": stats, **({"score": scored} if scored is not None else {})}}


def update(state: SelfPlayState, runtime: Runtime[SelfPlayContext]) -> SelfPlayState:
    """PPO on the LoRA adapter and value head; the new adapter is saved atomically (or the run stops)."""
    plan, iteration = plan_of(state), state["iteration"]
    store = runtime.context.experience_store()
    again: IterationSteps = {}
    scored = None if has_checkpoint(plan.run_dir, iteration + 1) else _replayed(plan, iteration, runtime)
    if scored is not None:
        again = {"score": scored, "advantages": loop.estimate_advantages(plan, store, iteration)}
    stats = loop.update_policy(plan, store, iteration)
    return {"current": {**again, "update": stats},
            "stopped": f"diverged: {stats['diverged']}" if "diverged" in stats else None}


def after_update(state: SelfPlayState) -> str:
    return "finish" if state.get("stopped") else "evaluate"


def evaluate(state: SelfPlayState, runtime: Runtime[SelfPlayContext]) -> SelfPlayState:
    """Play the held-out tasks under the new adapter (as many at once as the run's max_concurrency), then record
    the iteration's summary and log its numbers to the run's tracker (`swm.selfplay.scalars`)."""
    plan, iteration = plan_of(state), state["iteration"]
    store = runtime.context.experience_store()
    stats = loop.evaluate_policy(plan, store, iteration, int(get_config().get("max_concurrency") or 1))
    current: IterationSteps = {**(state.get("current") or {}), "evaluate": stats}
    summary = loop.summarise(plan, current)
    put_iteration(store, plan.run_id, iteration, summary)
    runtime.context.tracker.log(iteration_scalars(summary, current.get("update")), step=iteration, axis="iteration")
    runtime.stream_writer({"event": "iteration", "iteration": iteration, "summary": summary})
    return {"current": {"evaluate": stats}, "summaries": {str(iteration): summary}, "iteration": iteration + 1}


def after_evaluate(state: SelfPlayState) -> str:
    return "start" if state["iteration"] < plan_of(state).iterations else "finish"


def finish(state: SelfPlayState, runtime: Runtime[SelfPlayContext]) -> SelfPlayState:
    """End the run: the latest good checkpoint is the result."""

    plan = plan_of(state)
    last = latest(plan.run_dir)
    return {"current": {"adapter": str(checkpoint_dir(plan.run_dir, last)) if last is not None else None}}
