"""Review points: a person answers the graph at ``interrupt()`` and the run goes on with that answer.

The ask graph stops before its answer to let a person keep or correct the parse; the lifelong loop stops at each
deploy to let a person approve or refuse it. Neither stops unless the context names the point, and a saver built
with swm's serializer resumes the thread without LangGraph's "unregistered type" warning.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from helpers import STORY, good_parse
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.types import Command
from test_lifelong_graph import Agents

from swm.checkpoints import SERDE, ExperienceStore
from swm.context import SWMContext
from swm.errors import InputError
from swm.graphs import ask, lifelong
from swm.lifelong import store as ls
from swm.schemas import ReasonedAnswer
from swm.state import SocialWorld
from swm.testing import ScriptedChatModel

QUESTION = "Where will Sally look for the marble?"
CONFIG: Any = {"configurable": {"thread_id": "t"}}
# one level, one family, one cycle: a baseline and one candidate, each on one dev and one test task
PLAN: dict[str, Any] = {"run_id": "t", "cycles": 1, "levels": ["easy"], "families": ["negotiation"],
                        "episodes_per_level": 2, "samples_per_task": 2, "max_turns": 2, "heldout_per_cell": 1,
                        "gate_alpha": 1.0}


def _asking(review: list[str] | None = None, replies: list[Any] | None = None) -> tuple[Any, ScriptedChatModel,
                                                                                        SWMContext]:
    llm = ScriptedChatModel(replies=replies or [good_parse(), ReasonedAnswer(reasoning="She did not see.",
                                                                             answer="basket")])
    ctx = SWMContext(llm=llm, task="tomi", review=review or [])  # type: ignore[arg-type]
    return ask.build().compile(checkpointer=InMemorySaver(serde=SERDE)), llm, ctx


def _corrected() -> SocialWorld:
    world = SocialWorld.from_s3ap(good_parse().model_dump())
    world.steps[-1].scene = "The marble is in the cupboard."
    return world


def test_the_parse_review_stops_before_the_answer_with_the_parse_and_its_failed_checks() -> None:
    graph, llm, ctx = _asking(["parse"])
    out = graph.invoke({"narrative": STORY, "question": QUESTION}, CONFIG, context=ctx)
    (pending,) = out["__interrupt__"]
    request = pending.value
    assert request["review"] == "parse" and request["question"] == QUESTION and request["narrative"] == STORY
    assert SocialWorld.model_validate(request["world"]) == out["world"]
    assert request["ok"] is out["report"].ok and request["problems"] == out["parse_problems"]
    assert pending.response_schema["title"] == "ParseReview"  # a client can draw the answer's form
    state = graph.get_state(CONFIG)
    assert state.next == ("review",) and [i.id for i in state.interrupts] == [pending.id]
    assert llm.calls == 1, "nothing was asked of the QA model yet"


def test_a_corrected_parse_is_the_one_the_answer_reads() -> None:
    graph, llm, ctx = _asking(["parse"])
    graph.invoke({"narrative": STORY, "question": QUESTION}, CONFIG, context=ctx)
    out = graph.invoke(Command(resume={"world": _corrected().model_dump()}), CONFIG, context=ctx)
    assert out["parse_review"] == "corrected" and out["world"] == _corrected() and out["answer"] == "basket"
    qa_prompt = llm.prompts[-1][1]
    assert "cupboard" in qa_prompt and "The marble is in the box." not in qa_prompt
    assert not graph.get_state(CONFIG).next and not graph.get_state(CONFIG).interrupts


def test_keep_keeps_the_parse() -> None:
    graph, llm, ctx = _asking(["parse"])
    first = graph.invoke({"narrative": STORY, "question": QUESTION}, CONFIG, context=ctx)
    out = graph.invoke(Command(resume="keep"), CONFIG, context=ctx)
    assert out["parse_review"] == "kept" and out["world"] == first["world"]
    assert "The marble is in the box." in llm.prompts[-1][1]


def test_a_failed_parse_can_be_given_by_the_person() -> None:
    bad = "no JSON here"
    graph, llm, ctx = _asking(["parse"], [bad, bad, bad, ReasonedAnswer(reasoning="r", answer="basket")])
    out = graph.invoke({"narrative": STORY, "question": QUESTION}, CONFIG, context=ctx)
    request = out["__interrupt__"][0].value
    assert request["world"] is None and request["ok"] is False and request["problems"]
    done = graph.invoke(Command(resume={"world": _corrected().model_dump()}), CONFIG, context=ctx)
    assert done["social_state"] == "parsed" and done["world"] == _corrected() and "cupboard" in llm.prompts[-1][1]


def test_a_correction_that_is_no_social_world_is_refused_in_one_line_and_the_review_still_waits() -> None:
    graph, llm, ctx = _asking(["parse"])
    graph.invoke({"narrative": STORY, "question": QUESTION}, CONFIG, context=ctx)
    with pytest.raises(InputError, match=r"^the parse review's answer does not fit: world\.agents: ") as caught:
        graph.invoke(Command(resume={"world": {"agents": "Sally", "steps": []}}), CONFIG, context=ctx)
    assert "\n" not in str(caught.value)
    with pytest.raises(InputError, match=r"world\.stepz: Extra inputs are not permitted"):
        graph.invoke(Command(resume={"world": {"agents": ["Sally"], "stepz": []}}), CONFIG, context=ctx)
    assert llm.calls == 1 and graph.get_state(CONFIG).next == ("review",)
    out = graph.invoke(Command(resume={"world": _corrected().model_dump()}), CONFIG, context=ctx)
    assert out["world"] == _corrected() and llm.calls == 2


def test_by_default_the_ask_graph_never_stops_nor_steps_through_the_review() -> None:
    graph, llm, ctx = _asking()
    steps = [next(iter(update)) for update in graph.stream({"narrative": STORY, "question": QUESTION}, CONFIG,
                                                            context=ctx, stream_mode="updates")]
    assert steps == ["prepare", "parse", "check", "answer"]
    out = graph.get_state(CONFIG).values
    assert "parse_review" not in out and out["answer"] == "basket"
    assert not graph.get_state(CONFIG).interrupts and llm.calls == 2
    cot = ScriptedChatModel(replies=[ReasonedAnswer(reasoning="r", answer="basket")])
    plain = ask.build().compile(checkpointer=InMemorySaver(serde=SERDE)).invoke(
        {"narrative": STORY, "question": QUESTION, "mode": "cot"}, CONFIG,
        context=SWMContext(llm=cot, review=["parse"]))  # a mode with no parse has nothing to review
    assert "__interrupt__" not in plain and plain["answer"] == "basket"


def test_an_unknown_review_point_is_refused_in_one_line() -> None:
    with pytest.raises(InputError, match=r"^unknown review point 'deplyo' \(did you mean 'deploy'\?\) — review "
                                         r"takes deploy, parse$"):
        SWMContext(review=["deplyo"])  # type: ignore[list-item]
    assert SWMContext(review="parse").review == ["parse"]  # type: ignore[arg-type]


# ---- the serializer a saver of one's own needs ------------------------------------------------------------------

def _serde_events(saver: InMemorySaver, caplog: pytest.LogCaptureFixture) -> tuple[list[SerdeEvent], list[str]]:
    """Run the parse review on ``saver`` and resume it; return the allow-list events and warnings logged."""
    events: list[SerdeEvent] = []
    stop = register_serde_event_listener(events.append)
    try:
        with caplog.at_level(logging.WARNING):
            graph = ask.build().compile(checkpointer=saver)
            ctx = SWMContext(llm=ScriptedChatModel(replies=[good_parse(), ReasonedAnswer(reasoning="r", answer="x")]),
                             task="tomi", review=["parse"])
            graph.invoke({"narrative": STORY, "question": QUESTION}, CONFIG, context=ctx)
            graph.invoke(Command(resume="keep"), CONFIG, context=ctx)
            assert graph.get_state(CONFIG).values["parse_review"] == "kept"
    finally:
        stop()
    return events, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_saver_with_swms_serializer_resumes_with_no_unregistered_type(caplog: pytest.LogCaptureFixture) -> None:
    events, warnings = _serde_events(InMemorySaver(serde=SERDE), caplog)
    assert events == [] and not [w for w in warnings if "unregistered" in w or "Blocked" in w]
    # the same run on a saver with LangGraph's default serializer revives swm's state as unregistered types
    events, _ = _serde_events(InMemorySaver(), caplog)
    assert {"kind": "msgpack_unregistered_allowed", "module": "swm.state", "name": "SocialWorld"} in events


# ---- the deploy review in the lifelong loop ---------------------------------------------------------------------

def _learn(tmp_path: Path, agents: Agents, review: list[str]) -> tuple[Any, Any, SWMContext, ExperienceStore]:
    store = ExperienceStore(tmp_path / "store.db")
    ctx = SWMContext(llm=ScriptedChatModel(respond=agents), store=store, review=review)  # type: ignore[arg-type]
    graph = lifelong.build().compile(checkpointer=InMemorySaver(serde=SERDE))
    out = graph.invoke({"plan": {**PLAN, "out_dir": str(tmp_path / "out")}}, {**CONFIG, "recursion_limit": 1000},
                       context=ctx)
    return graph, out, ctx, store


def test_a_refused_deploy_keeps_the_old_policy_though_the_gate_would_deploy(tmp_path: Path) -> None:
    graph, out, ctx, store = _learn(tmp_path, Agents(), ["deploy"])
    (pending,) = out["__interrupt__"]
    request = pending.value
    assert request["review"] == "deploy" and request["cycle"] == 1 and request["split"] == "dev"
    assert (request["incumbent"], request["candidate"], request["metric"]) == ("p0", "p1", "pass")
    assert request["gate"]["deploy"] is True and request["gate"]["explain"].startswith("deployed")
    dev = {p: ls.eval_cells(store, "t", p, "pass", "dev")["easy"] for p in ("p0", "p1")}
    easy = request["levels"]["easy"]
    assert (easy["incumbent"]["successes"], easy["incumbent"]["n"]) == (dev["p0"].successes, dev["p0"].n)
    assert (easy["candidate"]["successes"], easy["candidate"]["n"]) == (dev["p1"].successes, dev["p1"].n)
    assert easy["delta"] == round(dev["p1"].rate - dev["p0"].rate, 6)
    state = graph.get_state(CONFIG)
    assert state.next == ("deploy",) and state.interrupts[0].id == pending.id
    assert not store.count("lifelong_deploys", "cycle = 1"), "nothing is written before the person answers"
    done = graph.invoke(Command(resume={"decision": "refuse", "note": "wait for more dev tasks"}), CONFIG, context=ctx)
    assert done["incumbent"] == "p0" and done["phase"] == "done"
    assert done["decisions"]["1"] == "kept the previous policy: refused by a person: wait for more dev tasks"
    row = next(store.rows("select * from lifelong_deploys where cycle = 1"))
    assert row["deployed"] == 0 and "reviewer:refuse" in row["reasons"]
    deployed = {r["curve"]: r["policy_version"] for r in store.rows(
        "select curve, policy_version from lifelong_matrix where cycle = 1 and metric = 'pass'")}
    assert deployed == {"deployed": "p0", "candidate": "p1"}


def test_an_approved_deploy_deploys_what_the_gate_refused(tmp_path: Path) -> None:
    graph, out, ctx, store = _learn(tmp_path, Agents(sabotage=True), ["deploy"])
    request = out["__interrupt__"][0].value
    assert request["gate"]["deploy"] is False and "current_fell:easy" in request["gate"]["reasons"]
    with pytest.raises(InputError, match=r"^the deploy review's answer does not fit: decision: Input should be "
                                         r"'approve' or 'refuse' — resume with \"approve\"") as caught:
        graph.invoke(Command(resume="maybe"), CONFIG, context=ctx)
    assert "\n" not in str(caught.value) and graph.get_state(CONFIG).next == ("deploy",)
    done = graph.invoke(Command(resume="approve"), CONFIG, context=ctx)
    assert done["incumbent"] == "p1" and done["phase"] == "done"
    assert done["decisions"]["1"] == "deployed over the gate's current_fell:easy (approved by a person)"
    row = next(store.rows("select * from lifelong_deploys where cycle = 1"))
    assert row["deployed"] == 1 and "current_fell:easy" in row["reasons"] and "reviewer:approve" in row["reasons"]
    assert [p["deployed"] for p in ls.policies(store, "t")] == [True, True]


def test_by_default_the_lifelong_loop_never_stops(tmp_path: Path) -> None:
    graph, out, _, store = _learn(tmp_path, Agents(), [])
    assert "__interrupt__" not in out and out["phase"] == "done" and out["incumbent"] == "p1"
    assert not graph.get_state(CONFIG).interrupts and out["decisions"]["1"].startswith("deployed: ")
