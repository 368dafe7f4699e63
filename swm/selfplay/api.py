"""The Python entry point of self-play: run (or resume) a run on the SQLite checkpointer."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig

from swm.context import SWMContext
from swm.selfplay.plan import SelfPlayPlan


def train(plan: SelfPlayPlan | dict[str, Any], *, db: str | Path, thread_id: str | None = None,
          context: SWMContext | None = None) -> dict[str, Any]:
    """Run self-play for ``plan.iterations`` iterations, or resume ``thread_id`` where it stopped.

    Returns the final graph state: ``summaries`` (iteration → per-role rewards, KL, filtered-turn
    rate, tokens/s, seconds), ``stopped`` (why it stopped early, or None) and ``current["adapter"]``
    (the last good checkpoint). A finished thread returns its stored state without new work.
    """
    from checkpoints import ExperienceStore, run_thread, sqlite_saver
    from graphs import selfplay

    plan = plan if isinstance(plan, SelfPlayPlan) else SelfPlayPlan.model_validate(plan)
    thread = thread_id or f"selfplay-{uuid.uuid4().hex[:10]}"
    ctx = context or SWMContext(store=ExperienceStore(db))
    config: RunnableConfig = {"configurable": {"thread_id": thread}, "max_concurrency": 1,
                              "recursion_limit": 20 + 10 * plan.iterations}
    with sqlite_saver(db) as saver:
        out, _ = run_thread(selfplay.build().compile(checkpointer=saver), {"plan": plan.model_dump(mode="json")},
                            config, ctx)
    return out | {"thread_id": thread}
