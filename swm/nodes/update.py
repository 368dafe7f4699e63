"""The update node: kept pairs (with the replay buffer) become the cycle's candidate policy.

``memory`` distils notes for an API model. ``sft``/``dpo``/``kto`` export the cycle's rows (kept
trajectories, or both tracks' kept pairs) to ``<out>/exports`` (`swm.lifelong.exports`), train a
LoRA adapter continued from the incumbent's (`swm.training.trl_update`), serve it
(`swm.serving.serve_adapter`: a GGUF LoRA on llama.cpp, or a runtime-LoRA server), verify that the
server plays it (`swm.lifelong.serve.verify_deploy`: identity and a probe; a mismatch stops the
cycle) and record the adapter (kept in the run's store under its content hash:
`swm.lifelong.artifacts`), its GGUF, the spec it is served as, what was verified and the training
stats on the policy. A kill during training leaves no policy row: the rerun reuses a finished
adapter or trains again; everything collected stays in the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime

from swm import prompts
from swm.checkpoints.store import StoreRecords
from swm.context import LifelongContext
from swm.errors import InputError
from swm.lifelong import store as ls
from swm.lifelong.artifacts import keep_adapter, local_adapter
from swm.lifelong.episodes import passed_of
from swm.lifelong.exports import trainer_of, write_exports
from swm.lifelong.jobs import plan_of
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.ppo_update import train_ppo
from swm.lifelong.samples import load_samples, put_samples, sample_rows, samples_of
from swm.lifelong.serve import LORA_SERVER_HINT, lora_name, verify_deploy
from swm.lifelong.state import LifelongState
from swm.lifelong.update import (
    METHODS,
    PolicyVersion,
    dpo_rows,
    kto_rows,
    memory_update,
    sft_rows,
    training_rows,
)
from swm.serving import require_base_gguf, serve_adapter
from swm.tasks.families import is_sampled
from swm.tracking import Tracker
from swm.training.trl_update import TrainSettings, train_adapter


def _base_gguf(plan: LifelongPlan) -> Path | None:
    """Return the GGUF llama.cpp serves adapters over (None: a runtime-LoRA server serves them)."""

    if plan.lora_server:
        return None
    return require_base_gguf(plan.hf_model, plan.base_gguf, LORA_SERVER_HINT)


def export_cycle(store: StoreRecords, plan: LifelongPlan, method: str,
                 cycles: list[int]) -> tuple[list[dict[str, Any]], int]:
    """Return the export rows of the replay window and how many kept samples, trajectories or pairs are behind them.

    Decisions and two-turn tasks go through the kept-sample table (`swm.lifelong.samples`), written
    here once per collected sample; episodes give kept trajectories (sft, rs-sft) or the gate's kept pairs.
    """
    run = plan.run_id
    episodes = [e for c in cycles for e in ls.load_episodes(store, run, c, "collect")]
    decisions = [e for e in episodes if is_sampled(e.level)]
    rows: list[dict[str, Any]] = []
    if decisions:
        put_samples(store, samples_of(decisions, {e.episode_id: passed_of(e, plan) for e in decisions}))
        rows += sample_rows(method, load_samples(store, run, cycles), plan.keep, plan.ppo_groups,
                            gated=plan.gating, share=plan.balance_share if plan.balance else None)
    used = len(rows)
    if method in ("sft", "rs-sft"):
        kept = [e for e in episodes if not is_sampled(e.level) and passed_of(e, plan)]
        return rows + sft_rows(kept), used + len(kept)
    if method == "ppo":
        return rows, used  # decisions and two-turn moves only: PPO needs each sample's own reward
    pairs = [p for p in ls.pairs(store, run, cycles, kept=True) if not is_sampled(p.level)]
    return rows + (dpo_rows(pairs) if method == "dpo" else kto_rows(pairs)), used + len(pairs)


def train_policy(store: StoreRecords, plan: LifelongPlan, method: str, parent: PolicyVersion, version: str,
                 cycle: int, cycles: list[int], temperature: float = 0.7,
                 tracker: Tracker | None = None) -> tuple[PolicyVersion, list[str]]:
    """Export, train from the parent's adapter, keep it in the store, serve; return the new policy.

    With no rows the policy keeps the parent's weights. The parent's adapter comes from where it
    was trained or, when that folder is gone (deleted, or another machine), from the run's store
    (`local_adapter`); the new adapter is stored there under its content hash before it is served.
    The trainer's logs go to ``tracker`` (the run's) as ``train/<version>/...``.
    """

    out_dir = Path(plan.out_dir).expanduser()
    on_policy = method == "ppo"  # PPO trains on this cycle's samples alone (swm.lifelong.ppo_update)
    if on_policy:
        cycles = [cycle]
    rows, used = export_cycle(store, plan, method, cycles)
    dataset = write_exports(out_dir, method, cycle=cycle, replay=bool(plan.replay) and not on_policy, rows=rows)
    inherited = {"notes": parent.notes, "exemplars": parent.exemplars, "base_model": parent.base_model,
                 "adapter": parent.adapter, "adapter_sha256": parent.adapter_sha256,
                 "adapter_gguf": parent.adapter_gguf, "served_as": parent.served_as}
    common = {"version": version, "parent": parent.version, "kind": method, "cycle": cycle, "dataset": str(dataset),
              "pairs_used": used}
    if not rows:
        kept = f"no {method} rows in cycles {cycles}: the parent's weights are kept"
        return PolicyVersion(**common, **inherited), [kept]
    base_gguf = _base_gguf(plan)
    adapter_dir = (out_dir / "adapters" / version).resolve()
    settings = TrainSettings(**{**(plan.train or {}), "run_name": f"{plan.run_id}-{version}"})
    run_tracker, section = tracker or Tracker(), f"train/{version}"
    trainer = trainer_of(method)
    trained_on = training_rows(trainer, rows)
    parent_adapter = str(local_adapter(store, parent, out_dir)) if parent.adapter else None
    if on_policy:
        stats = train_ppo(load_samples(store, plan.run_id, cycles), plan.hf_model, adapter_dir,
                          parent_adapter=parent_adapter, settings=settings,
                          estimator=plan.estimator, temperature=temperature,
                          groups=plan.ppo_groups, iterations=plan.ppo_iterations, group=plan.ppo_group,
                          tracker=run_tracker, section=section)
    else:
        stats = train_adapter(trainer, trained_on, plan.hf_model, adapter_dir,
                              parent_adapter=parent_adapter, settings=settings, tracker=run_tracker,
                              section=section)
    stats = stats.model_copy(update={"pairs_used": used})
    sha = keep_adapter(store, adapter_dir)
    draft = PolicyVersion(**common, **{**inherited, "adapter": str(adapter_dir), "adapter_sha256": sha})
    spec, gguf = serve_adapter(adapter_dir, name=lora_name(draft, plan.run_id), base_gguf=base_gguf,
                               lora_server=plan.lora_server)
    # a decision's reply ends at its first newline (swm.lifelong.decision_play): so does the probe's
    stop = ("\n",) if rows[0].get("source") == "decision" else ()
    checked = verify_deploy(spec, adapter_dir, plan.hf_model, trained_on[0]["prompt"],
                            plan.verify_served, stop=stop, temperature=temperature)  # a mismatch stops the cycle
    return draft.model_copy(update={"base_model": str(plan.hf_model or "embedded"), "served_as": spec,
                                    "adapter_gguf": str(gguf) if gguf else None, "train": stats,
                                    "served_check": checked}), []


def update(state: LifelongState, runtime: Runtime[LifelongContext]) -> dict[str, Any]:
    """Make policy ``p<cycle>`` from this cycle's kept pairs and, with replay, every earlier cycle's."""
    ctx = runtime.context
    store = ctx.experience_store()
    plan, cycle = plan_of(state, ctx), state["cycle"]
    method = plan.update
    if method not in METHODS:
        raise InputError(f"unknown update method {method!r}", f"use one of {', '.join(METHODS)}")
    run = plan.run_id
    cycles = list(range(1, cycle + 1)) if plan.replay else [cycle]
    parent = ls.get_policy(store, run, state.get("incumbent", "p0")) or PolicyVersion(version="p0")
    version = f"p{cycle}"
    update_out: dict[str, Any] = {"phase": "evaluate", "candidate_policy": version}
    if ls.get_policy(store, run, version) is not None:  # written before a crash: keep it, make no call again
        return update_out
    errors: list[str] = []
    if method == "memory":
        used = ls.pairs(store, run, cycles, kept=True)
        policy, stats, errors = memory_update(parent, version, cycle, used, ctx.model_for("agent"))
        update_out["usage"] = {"update": stats}
        update_out["prompts"] = {"distill": prompts.load("lifelong_distill").id,
                                 "memory": prompts.load("lifelong_memory").id}
    else:
        policy, errors = train_policy(store, plan, method, parent, version, cycle, cycles, ctx.temperature,
                                      ctx.tracker)
    ls.put_policy(store, run, policy, errors)
    return update_out
