"""The parser graph: one call for a good parse, the repair loop, the best parse kept, bad input."""

from __future__ import annotations

import pytest
from helpers import STORY, good_parse, wrong_agents_parse
from langchain_core.messages import AIMessage

from swm.context import SWMContext
from swm.errors import InputError
from swm.graphs import parse
from swm.testing import ScriptedChatModel


def run(model: ScriptedChatModel, narrative: str = STORY, **ctx: object) -> dict:
    return parse.build().compile().invoke({"narrative": narrative}, context=SWMContext(llm=model, **ctx))


def test_good_parse_costs_one_call_and_is_counted() -> None:
    model = ScriptedChatModel(replies=[good_parse()])
    out = run(model)
    assert model.calls == 1
    assert out["world"].agents == ["Sally", "Anne"]
    assert out["report"].ok and out["attempts"] == 1
    assert out["usage"]["parse"]["calls"] == 1
    assert out["usage"]["parse"]["prompt_tokens"] == len(model.prompts[0][1]) // 4
    assert out["usage"]["parse"]["completion_tokens"] > 0
    assert out["prompts"]["parse"] == "parse_paper@v2" and out["prompts"]["protocol"] == "paper"
    assert model.prompts[0][0] == "S3APParse"


def test_repair_loop_sends_the_problems_back_and_stops_when_fixed() -> None:
    model = ScriptedChatModel(replies=[wrong_agents_parse(), good_parse()])
    out = run(model)
    assert model.calls == 2
    second_prompt = model.prompts[1][1]
    assert "Sally_1" in second_prompt and "does not appear in the narrative" in second_prompt
    assert "Previous attempt" not in model.prompts[0][1], "a first attempt carries no feedback block"
    assert "Previous attempt had these issues" in second_prompt
    assert out["report"].ok and out["attempts"] == 2


def test_attempts_run_out_and_the_best_parse_is_kept_with_its_problems() -> None:
    bad_json = AIMessage(content="", tool_calls=[{"name": "S3APParse", "args": {"agents_names": "oops"},
                                                 "id": "c1"}])
    model = ScriptedChatModel(replies=[wrong_agents_parse(), bad_json, bad_json])
    out = run(model, max_parse_attempts=3)
    assert model.calls == 3
    assert out["world"] is not None, "the schema-valid first attempt must not be replaced by nothing"
    assert out["world"].agents == ["Sally", "Sally_1"]
    assert any("Sally_1" in p for p in out["parse_problems"])
    assert out["usage"]["parse"]["failures"] == 2


def test_text_reply_instead_of_tool_call_is_repaired() -> None:
    model = ScriptedChatModel(replies=["I think Sally is sad.", good_parse()])
    out = run(model)
    assert model.calls == 2
    assert "not valid S3AP JSON" in model.prompts[1][1]
    assert out["report"].ok


@pytest.mark.parametrize("narrative", ["", "   \n\t "])
def test_empty_narrative_is_refused_before_any_call(narrative: str) -> None:
    model = ScriptedChatModel(replies=[])
    with pytest.raises(InputError, match="narrative is empty"):
        run(model, narrative)
    assert model.calls == 0


def test_oversized_narrative_is_refused_with_the_limit() -> None:
    model = ScriptedChatModel(replies=[])
    with pytest.raises(InputError, match="over the limit of 100"):
        run(model, "x" * 101, max_narrative_chars=100)
    assert model.calls == 0


def test_parse_is_cached_by_story_hash_in_the_store() -> None:
    model = ScriptedChatModel(replies=[good_parse()])
    ctx = SWMContext(llm=model)
    graph = parse.build().compile()
    graph.invoke({"narrative": STORY}, context=ctx)
    again = graph.invoke({"narrative": "  " + STORY.replace(". ", ".\n")}, context=ctx)
    assert model.calls == 1
    assert again["parse_cached"] is True
    assert again["world"].agents == ["Sally", "Anne"]
    assert "parse" not in (again.get("usage") or {})


def test_the_parse_tool_allows_one_timestep_a_sentence_and_a_longer_reply_still_validates() -> None:
    """The bound is the tool schema's ``maxItems`` (llama.cpp's grammar closes the list there; the README's story on
    the embedded model looped to the 1,536-token cap on two of three attempts without it), never a validation rule."""
    from swm.nodes.parse import max_timesteps, sentences_in
    from swm.schemas import MAX_STEPS, S3APParse, s3ap_parse_schema
    from swm.testing import FakeOpenAIServer

    assert sentences_in(STORY) == 4
    assert sentences_in('Mr. Smith said "Hi." Then he left!\n\nOk?') == 4 and sentences_in("A: hi\nB: hello\n") == 2
    assert max_timesteps(STORY, 0) == MAX_STEPS and max_timesteps("x " * 10_000 + ". y." * 100, 1) == MAX_STEPS
    bounded = s3ap_parse_schema(1)
    assert s3ap_parse_schema(MAX_STEPS) is S3APParse and bounded.__name__ == "S3APParse"
    assert bounded.model_validate(good_parse().model_dump()).socialized_context, "more steps than the bound"
    with FakeOpenAIServer(record=True) as server:
        for per_sentence, expected in ((1, sentences_in(STORY)), (0, MAX_STEPS)):
            parse.build().compile().invoke({"narrative": STORY}, context=SWMContext(
                model=server.model_spec, steps_per_sentence=per_sentence))
            (tool,) = server.bodies()[-1]["tools"]
            assert tool["function"]["name"] == "S3APParse"
            assert tool["function"]["parameters"]["properties"]["socialized_context"]["maxItems"] == expected
