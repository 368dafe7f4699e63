"""The convert node: a cycle's training episodes become preference pairs on both tracks."""

from __future__ import annotations

from collections import defaultdict

from langgraph.runtime import Runtime
from langgraph.types import Command

from swm.context import LifelongContext
from swm.lifelong import store as ls
from swm.lifelong.convert import build_pairs
from swm.lifelong.jobs import plan_of, refuse_failed, task_from_id
from swm.lifelong.records import EpisodeRecord
from swm.lifelong.state import LifelongState
from swm.nodes.lifelong import resend


def convert(state: LifelongState, runtime: Runtime[LifelongContext]) -> Command[str]:
    """Build action and perception pairs from this cycle's episodes; they wait, ungated, for ``gate``.

    On a rerun after failed episodes it sends only those again (`resend`) and does not go on to
    ``gate``: the staged pairs are written, and gated, only once every episode of the cycle is in.
    """
    if (again := resend(state, runtime)) is not None:
        return again
    store = runtime.context.experience_store()
    plan, cycle = plan_of(state), state["cycle"]
    refuse_failed(store, plan, cycle, ("collect",))
    by_task: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for record in ls.load_episodes(store, plan.run_id, cycle, "collect"):
        by_task[record.task_id].append(record)
    built = [p for task_id, eps in sorted(by_task.items()) for p in build_pairs(task_from_id(task_id), eps, cycle)]
    store.insert("lifelong_staged", {"run_id": plan.run_id, "cycle": cycle,
                                     "pairs": [p.model_dump(mode="json") for p in built]},
                 pk=("run_id", "cycle"), replace=True)
    return Command(goto="gate", update={"phase": "gate"})
