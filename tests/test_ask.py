"""Theory-of-mind QA: exact calls per mode, the cached parse, what each prompt contains."""

from __future__ import annotations

import pytest
from helpers import STORY, good_parse

from swm.context import SWMContext
from swm.errors import InputError
from swm.graphs import ask
from swm.schemas import DirectAnswer, ReasonedAnswer
from swm.testing import ScriptedChatModel
from swm.usage import total_usage


def answer(text: str) -> ReasonedAnswer:
    return ReasonedAnswer(reasoning="Sally left before the move.", answer=text)


def test_s3ap_mode_one_parse_one_qa_then_one_qa_for_a_second_question() -> None:
    model = ScriptedChatModel(replies=[good_parse(), answer("basket"), answer("box")])
    ctx = SWMContext(llm=model, task="tomi")
    graph = ask.build().compile()
    first = graph.invoke({"narrative": STORY, "question": "Where will Sally look for the marble?"}, context=ctx)
    assert model.calls == 2
    assert first["answer"] == "basket"
    assert {k: v["calls"] for k, v in first["usage"].items()} == {"parse": 1, "answer": 1}
    assert [tool for tool, _ in model.prompts] == ["S3APParse", "ReasonedAnswer"]
    qa_prompt = model.prompts[1][1]
    # the paper protocol: the S3AP as indented JSON, then its context manual (the schema and the task's rules)
    assert "## Extra Information" in qa_prompt and '"agents_names": [\n    "Sally",\n    "Anne"\n  ]' in qa_prompt
    assert "#### Context Manual\nHere's how to interpret the above socialized context" in qa_prompt
    assert "<same_as_state />" in qa_prompt  # the repository's SocializedContext schema explains the tags
    assert "You are dissecting the TOMI scenarios" in qa_prompt.split("interpret the above socialized context")[1]
    assert STORY in qa_prompt, "the paper's setting gives the narrative and the S3AP"
    second = graph.invoke({"narrative": STORY, "question": "Where is the marble?"}, context=ctx)
    assert model.calls == 3
    assert second["parse_cached"] is True and second["answer"] == "box"
    assert total_usage(second["usage"])["calls"] == 1
    assert second["prompts"]["qa"] == "qa_paper_tomi@v1" and second["prompts"]["protocol"] == "paper"
    assert second["models"]["qa"].startswith("<injected")


@pytest.mark.parametrize(("mode", "reply", "tool"), [
    ("cot", answer("basket"), "ReasonedAnswer"),
    ("vanilla", DirectAnswer(answer="basket"), "DirectAnswer"),
])
def test_baseline_modes_make_one_call_and_no_parse(mode: str, reply: object, tool: str) -> None:
    model = ScriptedChatModel(replies=[reply])
    out = ask.build().compile().invoke({"narrative": STORY, "question": "Where?", "mode": mode},
                                       context=SWMContext(llm=model))
    assert model.calls == 1 and model.prompts[0][0] == tool
    assert out["answer"] == "basket" and out.get("world") is None
    assert "Extra Info" not in model.prompts[0][1]


def test_s3ap_only_mode_gives_the_state_without_the_narrative() -> None:
    model = ScriptedChatModel(replies=[good_parse(), answer("basket")])
    ask.build().compile().invoke({"narrative": STORY, "question": "Where?", "mode": "s3ap_only"},
                                 context=SWMContext(llm=model))
    qa_prompt = model.prompts[1][1]
    assert "Anne moves the marble to the box." not in qa_prompt
    assert '"agents_names"' in qa_prompt


def test_the_swm_protocol_keeps_its_generic_prompt_and_compact_state() -> None:
    model = ScriptedChatModel(replies=[good_parse(), answer("basket")])
    out = ask.build().compile().invoke({"narrative": STORY, "question": "Where?"},
                                       context=SWMContext(llm=model, task="tomi", prompt_protocol="swm"))
    parse_prompt, qa_prompt = model.prompts[0][1], model.prompts[1][1]
    assert '"agents_names": ["Sally", "Anne"]' in qa_prompt and "how to interpret the" not in qa_prompt
    assert out["prompts"]["qa"] == "qa_s3ap@v2" and out["prompts"]["parse"] == "parse@v3"
    assert out["prompts"]["protocol"] == "swm" and "Previous attempt" not in parse_prompt


def test_roles_can_use_different_models() -> None:
    parser = ScriptedChatModel(replies=[good_parse()])
    qa = ScriptedChatModel(replies=[answer("basket")])
    ask.build().compile().invoke({"narrative": STORY, "question": "Where?"},
                                 context=SWMContext(chat_models={"parser": parser, "qa": qa}))
    assert (parser.calls, qa.calls) == (1, 1)


def test_malformed_answer_is_recorded_not_dropped() -> None:
    model = ScriptedChatModel(replies=["basket, probably"])
    out = ask.build().compile().invoke({"narrative": STORY, "question": "Where?", "mode": "cot"},
                                       context=SWMContext(llm=model))
    assert out["answer"] == ""
    assert "instead of calling the schema tool" in out["answer_error"]
    assert out["usage"]["answer"]["failures"] == 1


@pytest.mark.parametrize(("inp", "message"), [
    ({"narrative": STORY, "question": "  "}, "question is empty"),
    ({"narrative": STORY, "question": "Where?", "mode": "telepathy"}, "mode: Input should be 'vanilla'"),
    ({"narrative": STORY, "question": "Where?", "task": "chess"}, "task: Input should be 'generic'"),
])
def test_bad_input_fails_before_any_call(inp: dict, message: str) -> None:
    model = ScriptedChatModel(replies=[])
    with pytest.raises(InputError, match=message):
        ask.build().compile().invoke(inp, context=SWMContext(llm=model))
    assert model.calls == 0
