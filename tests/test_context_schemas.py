"""Each graph's context schema (what Studio shows) holds exactly the context fields its nodes read.

The fields a graph reads are found in its source: starting from every node and router of the compiled
graph (subgraphs included), follow each use of the context (``runtime.context``, a name bound to it, a
parameter it is passed to in a function of swm, a method of the context class) and collect the fields
read on it. The one use this cannot follow is a graph run inside a node (``episode_graph.invoke(...,
context=ctx)``): `PLAYS` names those.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import json
import textwrap
import types
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from swm.context import SWMContext, json_keys

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = json.loads((ROOT / "langgraph.json").read_text())["graphs"]
# graphs a node runs with its own context: the lifelong loop plays its episodes and games through them
PLAYS = {"lifelong": ("episode", "game")}

FIELDS = {f.name for f in fields(SWMContext)}


def _graph(name: str) -> Any:
    from swm.graphs.served import graph_module

    return importlib.import_module(graph_module(GRAPHS[name])).graph


def _resolve(fn: Any, expr: ast.expr) -> Any:
    """Return the object a call's function expression names in ``fn``'s scope, or None."""
    if isinstance(expr, ast.Name):
        scope = inspect.getclosurevars(fn)
        for names in (scope.nonlocals, scope.globals):
            if expr.id in names:
                return names[expr.id]
        return None
    if isinstance(expr, ast.Attribute):
        owner = _resolve(fn, expr.value)
        return getattr(owner, expr.attr, None) if isinstance(owner, types.ModuleType | type) else None
    return None


def _swm_function(obj: Any) -> Any:
    obj = inspect.unwrap(obj) if callable(obj) else obj
    if isinstance(obj, types.FunctionType) and obj.__module__.split(".")[0] == "swm":
        return obj
    return None


@functools.cache
def _derived_attributes() -> dict[str, frozenset[str]]:
    """Return the context's attributes made from fields when it is built (``failures`` from its limit)."""
    out: dict[str, frozenset[str]] = {}
    for cls in SWMContext.__mro__:
        post = cls.__dict__.get("__post_init__")
        if post is None:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(post)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id == "self":
                        read = {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute)
                                and isinstance(n.value, ast.Name) and n.value.id == "self"}
                        out[target.attr] = frozenset(read & FIELDS)
    return out


@functools.cache
def reads(fn: Any, contexts: frozenset[str], runtimes: frozenset[str] = frozenset()) -> frozenset[str]:
    """Return the context fields ``fn`` reads where its names ``contexts`` hold the context (``runtimes``: a
    Runtime)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    ctx, rt = set(contexts), set(runtimes)

    def is_ctx(e: ast.expr) -> bool:
        return (isinstance(e, ast.Name) and e.id in ctx) or (
            isinstance(e, ast.Attribute) and e.attr == "context" and isinstance(e.value, ast.Name) and e.value.id in rt)

    def returns_context(call: ast.expr) -> bool:
        if not isinstance(call, ast.Call):
            return False
        if isinstance(call.func, ast.Attribute) and is_ctx(call.func.value):
            return True  # ctx.with_models(...)
        target = _swm_function(_resolve(fn, call.func))
        return target is not None and "Context" in str(target.__annotations__.get("return", ""))

    for _ in range(3):  # names bound to the context (``ctx = runtime.context``, ``ctx = learner_context(ctx, ...)``)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and (is_ctx(node.value) or returns_context(node.value)):
                ctx.update(t.id for t in node.targets if isinstance(t, ast.Name))

    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_ctx(node.value):
            if node.attr in FIELDS:
                found.add(node.attr)
            elif node.attr in _derived_attributes():
                found |= _derived_attributes()[node.attr]
            elif callable(getattr(SWMContext, node.attr, None)):
                found |= reads(getattr(SWMContext, node.attr), frozenset({"self"}))
        if isinstance(node, ast.Call):
            passed = [(i, None, a) for i, a in enumerate(node.args)] + [(None, k.arg, k.value) for k in node.keywords]
            handed = [(i, k, a) for i, k, a in passed if is_ctx(a) or (isinstance(a, ast.Name) and a.id in rt)]
            target = _swm_function(_resolve(fn, node.func)) if handed else None
            if target is None:
                continue
            params = list(inspect.signature(target).parameters)
            for i, k, a in handed:
                name = k if k is not None else (params[i] if i is not None and i < len(params) else None)
                if name is None:
                    continue
                as_runtime = isinstance(a, ast.Name) and a.id in rt
                found |= reads(target, frozenset() if as_runtime else frozenset({name}),
                               frozenset({name}) if as_runtime else frozenset())
    return frozenset(found)


def _node_functions(graph: Any) -> list[Any]:
    """Return every node and router function of a compiled graph, its subgraphs' included."""
    out = []
    builder = graph.builder
    for spec in builder.nodes.values():
        runnable = spec.runnable
        if hasattr(runnable, "builder"):  # a compiled subgraph
            out += _node_functions(runnable)
        elif getattr(runnable, "func", None) is not None:
            out.append(inspect.unwrap(runnable.func))
    for branches in builder.branches.values():
        for branch in branches.values():
            func = getattr(branch.path, "func", None)
            if func is not None:
                out.append(inspect.unwrap(func))
    return out


def fields_read(name: str) -> set[str]:
    """Return the context fields the graph ``name`` reads, over the API (JSON fields only)."""
    found: set[str] = set()
    for fn in _node_functions(_graph(name)):
        if "runtime" in inspect.signature(fn).parameters:
            found |= reads(fn, frozenset(), frozenset({"runtime"}))
    for played in PLAYS.get(name, ()):
        found |= fields_read(played)
    return found & set(json_keys(SWMContext))


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_a_graphs_context_schema_holds_exactly_the_fields_its_nodes_read(name: str) -> None:
    shown = set(_graph(name).get_context_jsonschema()["properties"])
    read = fields_read(name)
    assert shown == read, f"{name}: shown, never read {sorted(shown - read)}; read, not shown {sorted(read - shown)}"


def test_the_analysis_sees_reads_through_helpers_methods_and_built_attributes() -> None:
    """The reads found for a few graphs, spelt out: the walk is not vacuous."""
    assert {"lookahead_width", "lookahead_depth", "act_order", "prompt_versions"} <= fields_read("lookahead")
    assert {"task", "allow_without_state", "prompt_protocol", "max_parse_attempts"} <= fields_read("ask")
    assert "allow_without_state" not in fields_read("parse")
    assert {"max_failures_in_a_row", "out_dir", "resend_failed"} <= fields_read("lifelong")
    assert {"model", "models", "temperature", "max_tokens", "timeout", "max_retries"} == fields_read("selfplay")


def test_every_field_is_read_by_some_graph() -> None:
    assert set().union(*(fields_read(n) for n in GRAPHS)) == set(json_keys(SWMContext))


def test_a_context_dict_for_another_graph_runs_and_a_misspelt_key_is_named() -> None:
    """One context dict serves every graph: keys a graph does not read are dropped; a key no graph takes is refused."""
    from swm.errors import InputError
    from swm.graphs import ask
    from swm.schemas import ReasonedAnswer
    from swm.testing import ScriptedChatModel

    llm = ScriptedChatModel(replies=[ReasonedAnswer(reasoning="It was put there.", answer="kitchen")])
    inp = {"narrative": "Sally puts the ball in the kitchen.", "question": "Where is the ball?", "mode": "cot"}
    out = ask.graph.invoke(inp, context={"llm": llm, "task": "tomi", "lookahead_width": 3, "resend_failed": True})
    assert out["answer"] == "kitchen" and llm.calls == 1
    with pytest.raises(InputError, match=r"^unknown context key 'modle' \(did you mean 'model'\?\) — the context "
                                         r"takes model, models, temperature") as caught:
        ask.graph.invoke(inp, context={"llm": llm, "modle": "gpt-4o"})
    assert "\n" not in str(caught.value) and "lookahead_width" not in str(caught.value), "lists the ask graph's keys"


def test_the_full_context_object_runs_every_graph_and_each_graph_names_its_own() -> None:
    from swm import context as c

    own = {"parse": c.ParseContext, "ask": c.AskContext, "foresee_act": c.ActContext, "lookahead": c.EpisodeContext,
           "episode": c.EpisodeContext, "game": c.GameContext, "lifelong": c.LifelongContext,
           "selfplay": c.SelfPlayContext}
    assert set(own) == set(GRAPHS)
    for name, cls in own.items():
        assert _graph(name).context_schema is cls, name
        assert isinstance(SWMContext(), cls), f"an SWMContext is a {cls.__name__}: it passes to {name} unchanged"
