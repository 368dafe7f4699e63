"""What a tracker plots for a lifelong run after each cycle's deploy (`cycle_scalars`), read from the store.

The deploy node logs them on the axis ``cycle`` (`swm.tracking`), cycle 0 being the baseline:

* ``R/<curve>/<metric>/<level>`` — R[cycle, level], the test-split rate (held out, never chosen on) of the
  policy the curve counts: ``deployed``, the one in service after the cycle; ``candidate``, the one trained in it;
* ``ACC/<curve>/<metric>``, ``BWT/…``, ``FWT/…`` — the retention metrics of R's rows 0 … cycle
  (`swm.lifelong.metrics`; BWT and FWT once a level was trained before the last row, as the report has them);
* ``dev/<metric>/<level>`` — the candidate's dev-split rates, which the deploy gate chose on;
* ``deploy/deployed`` (1: the candidate went into service, 0: the incumbent stayed) and
  ``deploy/delta/<level>`` (candidate − incumbent on dev);
* ``gate/kept``, ``gate/built`` — the cycle's preference pairs;
* ``update/…`` — the candidate's training stats: its last logged loss, steps, rows, seconds and tokens/s.

Each training step's own logs (TRL's, or PPO's loss parts, KL and clip fraction) go under ``train/<policy>/``
from the update node (`swm.training.trl_update.tracker_callback`, `swm.lifelong.ppo_update`).
"""

from __future__ import annotations

import json
from typing import Any

from swm.checkpoints.store import StoreRecords
from swm.lifelong import store as ls
from swm.lifelong.metrics import curriculum_for, summary
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.report import CURVES, METRICS

RETENTION = ("ACC", "BWT", "FWT")


def retention_scalars(store: StoreRecords, plan: LifelongPlan, cycle: int) -> dict[str, float | None]:
    """R's row ``cycle`` and ACC/BWT/FWT over rows 0 … ``cycle``, per curve and metric."""
    out: dict[str, float | None] = {}
    curriculum = curriculum_for(plan.levels, plan.cycles)
    for metric in METRICS:
        for curve in CURVES:
            r = {key: cell for key, cell in ls.matrix(store, plan.run_id, metric, curve).items() if key[0] <= cycle}
            if not any(c == cycle for c, _ in r):
                continue
            out |= {f"R/{curve}/{metric}/{level}": cell.rate for (c, level), cell in r.items() if c == cycle and cell.n}
            found = summary(r, plan.levels, curriculum)
            out |= {f"{name}/{curve}/{metric}": (e.value if e else None) for name, e in found.items()
                    if name in RETENTION}
    return out


def cycle_scalars(store: StoreRecords, plan: LifelongPlan, cycle: int, candidate: str) -> dict[str, float | None]:
    """Return the numbers of cycle ``cycle``, whose trained policy is ``candidate`` (``p0`` at the baseline)."""
    run = plan.run_id
    out = retention_scalars(store, plan, cycle)
    for metric in METRICS:
        out |= {f"dev/{metric}/{level}": cell.rate
                for level, cell in ls.eval_cells(store, run, candidate, metric, "dev").items() if cell.n}
    deploys = list(store.rows("select deployed, deltas from lifelong_deploys where run_id = ? and cycle = ?",
                              [run, cycle])) if store.has_table("lifelong_deploys") else []
    for row in deploys:
        deltas = json.loads(row["deltas"]) if isinstance(row["deltas"], str) else row["deltas"] or {}
        out |= {"deploy/deployed": float(row["deployed"]), **{f"deploy/delta/{k}": v for k, v in deltas.items()}}
    counts = ls.gate_counts(store, run, cycle)
    if counts:
        out |= {"gate/kept": counts.get("_kept", 0), "gate/built": counts.get("_total", 0)}
    policy = ls.get_policy(store, run, candidate) if cycle > 0 else None
    if policy is not None and policy.train is not None:
        out |= _update_scalars(policy.train.model_dump())
    return out


def _update_scalars(train: dict[str, Any]) -> dict[str, float | None]:
    loss = train.get("loss") or []
    return {"update/loss": loss[-1] if loss else None, "update/steps": train.get("steps"),
            "update/rows": train.get("examples"), "update/seconds": train.get("seconds"),
            "update/tokens_per_s": train.get("tokens_per_s")}
