"""The graphs as the LangGraph server loads them (``langgraph.json``): each refuses unknown context keys.

The server keeps only the context keys its schema names and drops the rest without a word, so a
misspelt ``{"modle": ...}`` would run on the default model (the embedded one, started as a child
of the server). Each graph here is a factory the server calls with the run's context as the
caller sent it: a key that no graph takes (not one of `SWMContext`'s) fails the run before any
node runs, in one line naming the key and the closest valid one. A key of `SWMContext` that this
graph does not read is let through and dropped, as `graph.invoke` drops it in Python, so one
context serves every graph. For schema and state reads (no context) the factory returns the graph
as it is.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from swm.context import SWMContext, json_keys, refuse_unknown_keys

if TYPE_CHECKING:
    from langgraph_sdk.runtime import ServerRuntime

__all__ = ["GRAPHS", "context_keys", "graph_module", "refuse_unknown_keys"]

# the graph each server id serves: its module (whose ``graph`` is the compiled graph)
GRAPHS = {name: f"swm.graphs.{name}" for name in ("parse", "ask", "episode", "foresee_act", "lookahead", "lifelong",
                                                 "game", "selfplay")}


def graph_module(target: str) -> str:
    """Return the module of a ``langgraph.json`` target: ``swm.graphs.served:ask`` → ``swm.graphs.ask``."""
    module, _, attr = target.partition(":")
    return GRAPHS[attr] if module == __name__ else module


def context_keys(graph: Any) -> list[str]:
    """Return the context keys a graph takes over the API: the properties of its context JSON schema."""
    return list((graph.get_context_jsonschema() or {}).get("properties") or {})


def _factory(name: str) -> Callable[..., Any]:
    def make(runtime: ServerRuntime) -> Any:
        graph = importlib.import_module(GRAPHS[name]).graph
        execution = runtime.execution_runtime
        if execution is not None:
            refuse_unknown_keys(execution.context, context_keys(graph), also=json_keys(SWMContext))
        return graph

    make.__name__ = make.__qualname__ = name
    make.__doc__ = f"The ``{name}`` graph for the server, refusing unknown context keys."
    return make


parse = _factory("parse")
ask = _factory("ask")
episode = _factory("episode")
foresee_act = _factory("foresee_act")
lookahead = _factory("lookahead")
lifelong = _factory("lifelong")
game = _factory("game")
selfplay = _factory("selfplay")
