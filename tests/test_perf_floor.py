"""Call counts against each graph's floor, with a scripted model (deterministic; no timing).

The floor is the minimal number of model calls a graph's algorithm needs: one parse per
distinct story plus one QA call per question (a cached parse costs nothing), three calls per
Foresee-and-Act turn, the look-ahead formula, per-turn policy calls plus judge calls per episode,
and episodes × turns for one lifelong cycle. The cases are the ones ``python -m bench``
measures (``bench.cases``), so the suite and the tests agree on every floor.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.cases import GraphCase, core_cases, extra_cases, story
from bench.extra_graphs import SCRIPTS
from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.checkpoints.store import StoreRecords
from swm.context import SWMContext
from swm.testing import ScriptedChatModel
from swm.testing.schema_instance import known_schemas, scripted_arguments


def responder(prompt: str, tool: str | None) -> Any:
    """Answer as the fake server does: scripted replies, else the schema's minimal valid instance."""
    if tool is None:
        return "speak: I think we can agree on that."
    # A pydantic instance, not an AIMessage: ScriptedChatModel checks BaseModel first, and an
    # AIMessage is one, so it would be wrapped as the tool's arguments.
    return known_schemas()[tool].model_validate(scripted_arguments(tool, prompt, SCRIPTS))


def scripted_context(case: GraphCase, store: StoreRecords) -> tuple[SWMContext, ScriptedChatModel]:
    model = ScriptedChatModel(respond=responder)
    ctx = SWMContext(llm=model, **case.context)
    ctx.store = store
    return ctx, model


def all_cases() -> list[GraphCase]:
    found, _gaps = extra_cases()
    return core_cases() + found


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.name)
@pytest.mark.parametrize("checkpointer", [False, True], ids=["memory", "sqlite"])
def test_calls_equal_the_floor(case: GraphCase, checkpointer: bool, tmp_path: Any) -> None:
    db = tmp_path / "swm.db"
    store = ExperienceStore(db if checkpointer else ":memory:")
    ctx, model = scripted_context(case, store)
    with sqlite_saver(db) as saver:
        graph = case.build().compile(checkpointer=saver if checkpointer else None)
        for i in (0, 1):  # the first run warms the parse cache for the cached-story case
            before = model.calls
            inp = case.inputs(i)
            graph.invoke(inp, {"configurable": {"thread_id": f"{case.name}-{i}"}}, context=ctx)
            if i == 1 or not case.name.endswith("cached story)"):
                assert model.calls - before == case.floor(inp), (case.name, model.prompts[before:])
    store.close()


def test_ask_many_questions_costs_one_parse_per_story() -> None:
    from swm.graphs import ask

    model = ScriptedChatModel(respond=responder)
    ctx = SWMContext(llm=model)
    graph = ask.build().compile()
    questions = [(story(0), "Where will Sally look?"), (story(0), "Where is the apple?"),
                 (story(1), "Where will Anne look?"), (story(0), "Who moved the apple?")]
    for narrative, question in questions:
        out = graph.invoke({"narrative": narrative, "question": question, "mode": "s3ap"}, context=ctx)
        assert out["answer"] and not out.get("parse_problems")
    tools = [tool for tool, _ in model.prompts]
    assert tools.count("S3APParse") == 2  # distinct stories
    assert tools.count("ReasonedAnswer") == 4  # questions
    assert model.calls == 6


def test_batch_does_not_add_calls() -> None:
    case = next(c for c in core_cases() if c.name.startswith("ask (s3ap, new"))
    model = ScriptedChatModel(respond=responder)
    ctx = SWMContext(llm=model)
    inputs = [case.inputs(i) for i in range(8)]
    outs = case.build().compile().batch(inputs, {"max_concurrency": 8}, context=ctx)
    assert all(o["answer"] for o in outs)
    assert model.calls == sum(case.floor(i) for i in inputs) == 16


def test_the_scripted_parse_is_valid_on_the_first_attempt() -> None:
    from swm.graphs import parse

    model = ScriptedChatModel(respond=responder)
    out = parse.build().compile().invoke({"narrative": story(3)}, context=SWMContext(llm=model))
    assert out["attempts"] == 1 and out["report"].ok and not out["parse_problems"]
    assert model.calls == 1


def test_lookahead_formula_matches_its_calls() -> None:
    lookahead = pytest.importorskip("swm.graphs.lookahead")
    from bench.extra_graphs import _policy_input

    for width, depth in ((1, 1), (2, 1), (2, 3)):
        model = ScriptedChatModel(respond=responder)
        ctx = SWMContext(llm=model, lookahead_width=width, lookahead_depth=depth)
        lookahead.build().compile().invoke(_policy_input(0), context=ctx)
        assert model.calls == lookahead.calls_per_turn(width, depth), (width, depth)
