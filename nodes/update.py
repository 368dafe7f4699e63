"""The update node: kept pairs (with the replay buffer) become the cycle's candidate policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

import prompts
from nodes.lifelong import plan_of
from swm.context import SWMContext
from swm.errors import InputError
from swm.lifelong import store as ls
from swm.lifelong.state import LifelongState
from swm.lifelong.update import METHODS, Policy, export, memory_update, train_trl


def update(state: LifelongState, runtime: Runtime[SWMContext]) -> dict[str, Any]:
    """Make policy ``p<cycle>`` from this cycle's kept pairs and, with replay, every earlier cycle's."""
    ctx = runtime.context
    store = ctx.experience_store()
    plan, cycle = plan_of(state, ctx), state["cycle"]
    method = plan["update"]
    if method not in METHODS:
        raise InputError(f"unknown update method {method!r}", f"use one of {', '.join(METHODS)}")
    run = plan["run_id"]
    cycles = range(1, cycle + 1) if plan["replay"] else [cycle]
    used = ls.pairs(store, run, cycles, kept=True)
    parent = ls.get_policy(store, run, state.get("incumbent", "p0")) or Policy(version="p0")
    version = f"p{cycle}"
    update_out: dict[str, Any] = {"phase": "evaluate", "candidate_policy": version}
    if ls.get_policy(store, run, version) is not None:  # written before a crash: keep it, make no call again
        return update_out
    errors: list[str] = []
    if method == "memory":
        policy, stats, errors = memory_update(parent, version, cycle, used, ctx.model_for("agent"))
        update_out["usage"] = {"update": stats}
        update_out["prompts"] = {"distill": prompts.load("lifelong_distill").id,
                                 "memory": prompts.load("lifelong_memory").id}
    else:
        out_dir = Path(plan["out_dir"]).expanduser()
        dataset = export(used, method, out_dir / f"cycle{cycle}-{method}.jsonl")
        checkpoint = None
        if plan.get("hf_model") and used:
            checkpoint = str(train_trl(method, dataset, plan["hf_model"], out_dir / f"cycle{cycle}-{method}-model"))
        policy = Policy(version=version, parent=parent.version, kind=method, cycle=cycle, notes=parent.notes,
                        exemplars=parent.exemplars, dataset=str(dataset), checkpoint=checkpoint,
                        pairs_used=len(used))
    ls.put_policy(store, run, policy, errors)
    return update_out
