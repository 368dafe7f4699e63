"""Self-play RL (OMAR-style): one policy in every seat, per-role rewards, advantages, PPO, evaluation.

    START → start ─(Send × rollouts not yet stored, max_concurrency at once)→ rollout → score → advantages → update
    update → evaluate → start (next iteration) | finish → END;   update (diverged) → finish

Input: ``{"plan": SelfPlayPlan.model_dump()}`` (every key optional; see `swm.selfplay.plan`).
Run it on a checkpointer with ``durability="sync"``: every node is idempotent and the adapter,
value head and optimiser state of each iteration are saved atomically, so a run killed at any
node and resumed on the same thread continues where it stopped without replaying rollouts.
`train` is the Python entry point: it runs (or resumes) a thread on a SQLite file.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy

from swm.checkpoints import open_saver, open_store, run_thread, thread_status
from swm.context import SelfPlayContext
from swm.filenames import file_name
from swm.graph_state import checks_input
from swm.nodes.selfplay import (
    advantages,
    after_evaluate,
    after_update,
    evaluate,
    fan_out,
    finish,
    rollout,
    score,
    start,
    update,
)
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.served import default_concurrency, plan_seats
from swm.selfplay.state import SelfPlayInput, SelfPlayState
from swm.tracking import check_reporter, tracking

# The checkpointer and the experience store share one SQLite file (see graphs/lifelong.py).
STORE_RETRY = RetryPolicy(max_attempts=4, retry_on=sqlite3.OperationalError)


def build() -> StateGraph[SelfPlayState, SelfPlayContext, SelfPlayInput, SelfPlayState]:
    g = StateGraph(SelfPlayState, context_schema=SelfPlayContext, input_schema=SelfPlayInput,
                   output_schema=SelfPlayState)
    g.add_node("start", checks_input(SelfPlayInput)(start), retry_policy=STORE_RETRY)
    g.add_node("rollout", rollout, retry_policy=STORE_RETRY)  # type: ignore[arg-type,call-overload]
    g.add_node("score", score, retry_policy=STORE_RETRY)
    g.add_node("advantages", advantages, retry_policy=STORE_RETRY)
    g.add_node("update", update, retry_policy=STORE_RETRY)
    g.add_node("evaluate", evaluate, retry_policy=STORE_RETRY)
    g.add_node("finish", finish)
    g.add_edge(START, "start")
    g.add_conditional_edges("start", fan_out, ["rollout", "score"])
    g.add_edge("rollout", "score")
    g.add_edge("score", "advantages")
    g.add_edge("advantages", "update")
    g.add_conditional_edges("update", after_update, ["evaluate", "finish"])
    g.add_conditional_edges("evaluate", after_evaluate, ["start", "finish"])
    g.add_edge("finish", END)
    return g


graph = build().compile()


def train(plan: SelfPlayPlan | dict[str, Any], *, db: str | Path, thread_id: str | None = None,
          context: SelfPlayContext | None = None, on_event: Callable[[str, Any], None] | None = None,
          max_concurrency: int | None = None) -> dict[str, Any]:
    """Run self-play for ``plan.iterations`` iterations, or resume ``thread_id`` where it stopped.

    Returns the final state plus ``thread_id``: ``summaries`` (iteration → per-role rewards with
    95% intervals, KL, filtered-turn rate, tokens/s, seconds), ``stopped`` (why it stopped early,
    or None) and ``current["adapter"]`` (the last good checkpoint). A finished thread returns its
    stored state without new work. ``on_event`` sees progress as it goes (`checkpoints.run_thread`).
    ``max_concurrency`` rollouts play at once (default: the embedded server's slots when served,
    1 in torch); each is seeded by its own id, so results do not depend on completion order.
    ``plan.report_to`` names the tracker each iteration's numbers go to (`swm.selfplay.scalars`), opened
    here once for the run (TensorBoard: ``<run dir>/runs``) unless ``context`` holds one; a tracker whose
    package is missing is refused in one line before anything runs.
    """

    plan = plan if isinstance(plan, SelfPlayPlan) else SelfPlayPlan.model_validate(plan)
    thread = thread_id or f"selfplay-{uuid.uuid4().hex[:10]}"
    check_reporter(plan.report_to)
    ctx = context or SelfPlayContext(store=open_store(db))
    concurrency = max_concurrency or default_concurrency(plan.policy, plan_seats(plan))
    config: RunnableConfig = {"configurable": {"thread_id": thread}, "max_concurrency": concurrency,
                              "recursion_limit": 20 + 10 * plan.iterations}
    with open_saver(db) as saver, ExitStack() as stack:
        graph = build().compile(checkpointer=saver)
        opens = plan.report_to != "none" and ctx.tracker.reporter == "none"
        if opens and thread_status(graph.get_state(config)) != "finished":
            run_dir = Path(plan.out_dir) / file_name(thread if plan.run_id == SelfPlayPlan().run_id else plan.run_id)
            ctx = replace(ctx, tracker=stack.enter_context(tracking(plan.report_to, thread, run_dir / "runs",
                                                                    plan.model_dump(mode="json"))))
        out, _ = run_thread(graph, {"plan": plan}, config, ctx, on_event=on_event)
    return out | {"thread_id": thread}
