"""The graphs as the LangGraph server loads them (``langgraph.json``): each refuses unknown context keys.

The server keeps only the context keys its schema names and drops the rest without a word, so a
misspelt ``{"modle": ...}`` would run on the default model (the embedded one, started as a child
of the server). Each graph here is a factory the server calls with the run's context as the
caller sent it: a key that is not one of `SWMContext`'s fails the run before any node runs, in one
line naming the key and the closest valid one. For schema and state reads (no context) the
factory returns the graph as it is.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from swm.errors import InputError

if TYPE_CHECKING:
    from langgraph_sdk.runtime import ServerRuntime

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


def refuse_unknown_keys(context: Any, known: list[str]) -> None:
    """Raise an `InputError` naming every key of ``context`` not in ``known`` (with the closest valid one)."""
    if not isinstance(context, Mapping):
        return
    unknown = sorted(str(k) for k in context if k not in known)
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        named.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise InputError(f"unknown context key{'s' if len(unknown) > 1 else ''} {', '.join(named)}",
                     f"the context takes {', '.join(known)}")


def _factory(name: str) -> Callable[..., Any]:
    def make(runtime: ServerRuntime) -> Any:
        graph = importlib.import_module(GRAPHS[name]).graph
        execution = runtime.execution_runtime
        if execution is not None:
            refuse_unknown_keys(execution.context, context_keys(graph))
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
