"""Which episodes a lifelong cycle plays: the plan with its defaults, the cycle's tasks, and one job per episode.

A job's id is deterministic (``run/[c<cycle>/]phase/policy/task/s<sample>/seat``), so a resumed
run plays only the episodes not yet in the store. An evaluation's id has no cycle in it: a
policy plays each split task once, and a later cycle reuses the result (the incumbent was
evaluated when it was a candidate), so each cycle plays only the candidate's dev and test
episodes, and its shifted test cells (phase ``shift``: the plan's ``eval_shifts``, counted apart from R
and the deploy gate). `refuse_failed` and `failed_now` keep failed episodes from being used and tell the
CLI that a rerun sends only them again.
"""

from __future__ import annotations

import math
from typing import Any

from swm.checkpoints.store import StoreRecords
from swm.context import LifelongContext
from swm.errors import ModelCallFailed
from swm.lifelong import store as ls
from swm.lifelong.metrics import curriculum_for
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.state import EpisodeJob, LifelongState
from swm.tasks.families import Task, synthesize, task_of_id, variant_for
from swm.tasks.splits import SPLITS, split_tasks

SHIFT = "shift"  # the phase of the shifted test cells
EVAL_PHASES = (*SPLITS, SHIFT)


def plan_of(state: LifelongState, ctx: LifelongContext | None = None) -> LifelongPlan:
    """Return the run's plan; with ``ctx``, its ``out_dir`` is this invocation's.

    The state holds the `LifelongPlan` itself; a checkpoint written before it did holds its JSON
    dump, validated here (earlier key names included) into the model.
    """
    plan = LifelongPlan.model_validate(state.get("plan") or {})
    if ctx is not None and ctx.out_dir:
        plan = plan.model_copy(update={"out_dir": ctx.out_dir})
    return plan



def job_plan(job: EpisodeJob) -> LifelongPlan:
    """Return an episode job's plan (a Send pending in a checkpoint from before the typed plan holds its dump)."""
    return LifelongPlan.model_validate(job["plan"])


def level_of(plan: LifelongPlan, cycle: int) -> str:
    """Return the level cycle ``cycle`` (from 1) trains on."""
    return curriculum_for(plan.levels, plan.cycles)[cycle - 1]



def task_from_id(task_id: str) -> Task:
    return task_of_id(task_id)



def training_tasks(plan: LifelongPlan, cycle: int) -> list[Task]:
    """Return the cycle's tasks: families in turn, enough for ``episodes_per_level`` episodes."""
    level = level_of(plan, cycle)
    n_tasks = math.ceil(plan.episodes_per_level / plan.samples_per_task)
    families = plan.families
    variant = variant_for(level, "train", plan.names)
    return [synthesize(families[i % len(families)], level, cycle * 1000 + i, variant=variant) for i in range(n_tasks)]



def _job(plan: LifelongPlan, task: Task, cycle: int, phase: str, sample: int, policy: str) -> EpisodeJob:
    if plan.self_play:
        seat, tested = "all", task.names[0]
    else:
        tested = task.names[sample % len(task.names)]
        seat = tested
    # An evaluation's result depends on the policy and the task, not on the cycle that asks for it.
    when = "" if phase in EVAL_PHASES else f"c{cycle}/"
    episode_id = f"{plan.run_id}/{when}{phase}/{policy}/{task.task_id}/s{sample}/{seat}"
    return EpisodeJob(episode_id=episode_id, task_id=task.task_id, cycle=cycle, phase=phase, sample=sample,
                      seat=seat, tested_agent=tested, policy_version=policy, plan=plan)



def collect_jobs(state: LifelongState) -> list[EpisodeJob]:
    plan, cycle = plan_of(state), state["cycle"]
    jobs = []
    for i, task in enumerate(training_tasks(plan, cycle)):
        for s in range(plan.samples_per_task):
            if i * plan.samples_per_task + s < plan.episodes_per_level:
                jobs.append(_job(plan, task, cycle, "collect", s, state["incumbent"]))
    return jobs



def eval_split(plan: LifelongPlan, split: str) -> list[Task]:
    """Return the run's tasks of one evaluation split (``dev`` chooses, ``test`` reports).

    ``eval_families`` (default: the trained ``families``) may add families that are evaluated but
    never collected: transfer to them, and forgetting, is then measured on the same split.
    """
    per_cell = plan.dev_per_cell if split == "dev" else plan.heldout_per_cell
    return split_tasks(split, plan.levels, plan.eval_families or plan.families, per_cell, names=plan.names,
                       episodes=plan.episode_split)


def shift_tasks(plan: LifelongPlan) -> list[Task]:
    """Return the run's shifted test cells (``eval_shifts``): test-split tasks drawn with each shift's variant."""
    families = plan.eval_families or plan.families
    return [t for shift in plan.eval_shifts
            for t in split_tasks("test", plan.levels, families, plan.shift_per_cell, names=plan.names, shift=shift)]


def eval_jobs(state: LifelongState, policy: str, split: str) -> list[EpisodeJob]:
    plan = plan_of(state)
    tasks = shift_tasks(plan) if split == SHIFT else eval_split(plan, split)
    return [_job(plan, t, state["cycle"], split, 0, policy) for t in tasks]



def pending_evaluations(state: LifelongState, store: StoreRecords) -> list[EpisodeJob]:
    """Return the dev and test episodes of the incumbent and the candidate not yet in the store.

    The incumbent's were played when it was evaluated as a candidate (or at cycle 0), so in a
    run that was not interrupted only the candidate's are left.
    """
    policies = dict.fromkeys([state.get("incumbent", "p0"), state.get("candidate_policy", "p0")])
    jobs = [j for p in policies for split in EVAL_PHASES for j in eval_jobs(state, p, split)]
    return [j for j in jobs if not ls.episode_done(store, j["episode_id"])]



def refuse_failed(store: StoreRecords, plan: LifelongPlan, cycle: int, phases: tuple[str, ...]) -> None:
    """Stop before a fan-out's episodes are used while some of them failed after their retries.

    The other episodes of the fan-out finished and are kept; on the rerun `nodes.lifelong.resend`
    sends only the failed ones again (`failed_now`).
    """
    failed = [r for r in ls.failures(store, plan.run_id) if r["cycle"] == cycle and r["phase"] in phases]
    if failed:
        played = [p for p in phases if p != SHIFT or plan.eval_shifts]  # the phases this run plays
        raise ModelCallFailed(f"{len(failed)} episode(s) of cycle {cycle} ({'/'.join(played)}) failed after their "
                              f"retries (first: {failed[0]['error']})",
                              "rerun with the same --db and --thread-id to play only those again")



def failed_now(state: LifelongState, store: StoreRecords) -> list[dict[str, Any]]:
    """Return the failure rows of the current phase's episodes (collect, or the dev and test evaluations)."""
    plan, cycle = plan_of(state), state.get("cycle", 0)
    evaluating = cycle == 0 or state.get("phase") in ("evaluate", "deploy")
    phases = EVAL_PHASES if evaluating else ("collect",)
    return [r for r in ls.failures(store, plan.run_id) if r["cycle"] == cycle and r["phase"] in phases]
