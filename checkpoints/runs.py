"""Run a graph on a checkpointed thread: start it, resume it where it stopped, or return its result."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot

Status = Literal["started", "resumed", "finished"]


def run_thread(graph: Any, inputs: Mapping[str, Any], config: RunnableConfig, context: Any,
               announce: Callable[[Status, StateSnapshot], None] | None = None) -> tuple[dict[str, Any], Status]:
    """Start the thread, resume it at the node where it stopped, or return its finished state.

    A finished thread costs no model call. Checkpoints are written with ``durability="sync"``:
    each finished node is on disk before the next starts, so a killed process loses at most the
    node in flight. ``announce`` sees the status and snapshot before anything runs (to print it,
    or to refuse a finished thread that holds other input).
    """
    snapshot = graph.get_state(config)
    status: Status = "resumed" if snapshot.next else "finished" if snapshot.values else "started"
    if announce is not None:
        announce(status, snapshot)
    if status == "finished":
        return dict(snapshot.values), status
    out = graph.invoke(None if status == "resumed" else dict(inputs), config, context=context, durability="sync")
    return dict(out), status
