"""Self-play tables in the experience store.

* ``selfplay_rollouts`` — one row per rollout (pk ``rollout_id``: run, iteration, phase, task,
  sample), the whole `Rollout` as JSON (turns, tokens, log-probs, rewards, advantages), whether
  it failed and why; rewritten as the score and advantage steps fill it in;
* ``selfplay_iterations`` — one row per finished iteration: the numbers the benchmark reports;
* ``selfplay_runs`` — the plan of each run;
* ``selfplay_turn_journal`` — each sampled turn of a rollout not yet stored (`swm.selfplay.journal`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from swm.checkpoints.store import StoreRecords
from swm.selfplay.journal import forget, forget_prefix
from swm.selfplay.plan import SelfPlayPlan
from swm.training.trajectory import Rollout

ROLLOUTS = "selfplay_rollouts"


def rollout_done(store: StoreRecords, rollout_id: str) -> bool:
    return bool(store.has_table(ROLLOUTS) and store.count(ROLLOUTS, "rollout_id = ?", [rollout_id]) > 0)


def put_rollout(store: StoreRecords, run_id: str, phase: str, rollout: Rollout) -> None:
    """Write (or rewrite) a rollout's row; its turn journal goes (`swm.selfplay.journal`)."""
    store.insert(ROLLOUTS, {"rollout_id": rollout.rollout_id, "run_id": run_id, "iteration": rollout.iteration,
                            "phase": phase, "task_id": rollout.task_id, "sample": rollout.sample,
                            "failed": rollout.failed, "tokens": rollout.tokens, "seconds": rollout.seconds,
                            "rollout": rollout.model_dump(mode="json"), "created": time.time()},
                 pk="rollout_id", replace=True)
    forget(store, rollout.rollout_id)


def drop_failed(store: StoreRecords, run_id: str, iteration: int, phase: str) -> int:
    """Delete the failed rollouts of one iteration and phase (to be played again); return how many there were."""
    return drop_rollouts(store, run_id, iteration, phase, failed_only=True)


def drop_rollouts(store: StoreRecords, run_id: str, iteration: int, phase: str, failed_only: bool = False) -> int:
    """Delete every rollout (``failed_only``: every failed one) of one iteration and phase, to be played again;
    return how many there were."""
    where = "run_id = ? and iteration = ? and phase = ?" + (" and failed is not null" if failed_only else "")
    found = store.count(ROLLOUTS, where, [run_id, iteration, phase]) if store.has_table(ROLLOUTS) else 0
    if found:
        store.execute(f"delete from {ROLLOUTS} where {where}", [run_id, iteration, phase])
    if not failed_only:  # the turns of rollouts in flight too: played again, not replayed (`swm.selfplay.journal`)
        forget_prefix(store, f"{run_id}/i{iteration}/{phase}/")
    return found


def load_rollouts(store: StoreRecords, run_id: str, iteration: int, phase: str) -> list[Rollout]:
    """Return the rollouts of one iteration and phase, failed ones included, in id order."""
    if not store.has_table(ROLLOUTS):
        return []
    rows = store.rows(f"select rollout from {ROLLOUTS} where run_id = ? and iteration = ? and phase = ? "
                      "order by rollout_id", [run_id, iteration, phase])
    return [Rollout.model_validate_json(r["rollout"]) for r in rows]


def put_iteration(store: StoreRecords, run_id: str, iteration: int, summary: Mapping[str, object]) -> None:
    store.insert("selfplay_iterations", {"key": f"{run_id}/{iteration}", "run_id": run_id, "iteration": iteration,
                                         **summary, "created": time.time()}, pk="key", replace=True)


def put_run(store: StoreRecords, run_id: str, plan: SelfPlayPlan) -> None:
    """Record the run's plan (its JSON dump) under its id."""
    store.insert("selfplay_runs", {"run_id": run_id, "plan": plan.model_dump(mode="json"), "created": time.time()},
                 pk="run_id", replace=True)
