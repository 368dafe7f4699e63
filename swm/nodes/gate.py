"""The gate node: every staged pair is judged by the gate's rules; verdicts and counts are stored."""

from __future__ import annotations

import json
from typing import Any

from langgraph.runtime import Runtime

from swm.context import LifelongContext
from swm.lifelong import store as ls
from swm.lifelong.gate import GateSettings, gate_pairs, reject_counts
from swm.lifelong.jobs import plan_of
from swm.lifelong.records import TRACKS, PreferencePair
from swm.lifelong.state import LifelongState


def gate(state: LifelongState, runtime: Runtime[LifelongContext]) -> dict[str, Any]:
    """Gate the cycle's pairs (``plan.gating`` off keeps all, still recording the reasons)."""
    store = runtime.context.experience_store()
    plan, cycle = plan_of(state), state["cycle"]
    rows = list(store.rows("select pairs from lifelong_staged where run_id = ? and cycle = ?",
                           [plan.run_id, cycle]))
    staged = [PreferencePair.model_validate(p) for p in json.loads(rows[0]["pairs"])] if rows else []
    settings = GateSettings(enabled=bool(plan.gating), min_margin=float(plan.min_margin))
    results = gate_pairs(staged, settings, seen=ls.pair_ids(store, plan.run_id, cycle))
    ls.put_pairs(store, plan.run_id, cycle, results, settings.enabled)
    for track in TRACKS:
        mine = [r for r in results if r.pair.track == track]
        ls.put_gate_counts(store, plan.run_id, cycle, track, sum(r.kept for r in mine), len(mine),
                           reject_counts(mine))
    kept = sum(r.kept for r in results)
    return {"phase": "update", "kept": kept, "rejected": len(results) - kept}
