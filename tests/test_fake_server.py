"""The fake OpenAI-compatible server answers real ChatOpenAI calls over loopback (no timing asserted)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from langchain_core.utils.function_calling import convert_to_openai_tool
from openai import OpenAI
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from swm.context import SWMContext
from swm.errors import ModelCallFailed
from swm.llm import call_model, make_chat_model
from swm.schemas import ReasonedAnswer, S3APParse
from swm.testing.schema_instance import known_schemas, minimal_instance
from swm.testing.server import FakeOpenAIServer, _State
from swm.validation import validate_s3ap


def test_answers_a_structured_chatopenai_call() -> None:
    with FakeOpenAIServer() as server:
        model = make_chat_model(server.model_spec)
        reply = call_model(model, "Where will Sally look for the ball?", ReasonedAnswer)
        assert reply.error is None and isinstance(reply.value, ReasonedAnswer)
        assert reply.stats["calls"] == 1 and reply.stats["prompt_tokens"] > 0 and reply.stats["completion_tokens"] > 0
        stats = server.stats()
        assert server.requests == 1 and stats["by_tool"] == {"ReasonedAnswer": 1}
        assert len(stats["slept"]) == 1


def test_answers_text_and_scripted_tools() -> None:
    scripts = {"ReasonedAnswer": {"reasoning": "She did not see the move.", "answer": "the basket"},
               "<text>": "hello there"}
    with FakeOpenAIServer(scripts=scripts) as server:
        model = make_chat_model(server.model_spec)
        assert call_model(model, "Say hi.").value == "hello there"
        assert call_model(model, "Where?", ReasonedAnswer).value.answer == "the basket"
        server.reset()
        assert server.requests == 0


def test_scripted_function_sees_the_prompt() -> None:
    seen: list[str] = []

    def answer(prompt: str, body: dict) -> dict:
        seen.append(prompt)
        return {"reasoning": "r", "answer": prompt[-3:]}

    with FakeOpenAIServer(scripts={"ReasonedAnswer": answer}) as server:
        reply = call_model(make_chat_model(server.model_spec), "question xyz", ReasonedAnswer)
    assert reply.value.answer == "xyz" and seen == ["question xyz"]


def test_the_default_parse_passes_the_rule_checks() -> None:
    with FakeOpenAIServer() as server:
        reply = call_model(make_chat_model(server.model_spec),
                           "#### Context: Max and Zoe meet. Max hides the key. "
                           "#### Task specific instructions: none", S3APParse)
    assert reply.value.agents_names == ["Max", "Zoe"]
    assert validate_s3ap(reply.value.model_dump()).ok


TOOL_SCHEMAS = ("S3APParse", "ReasonedAnswer", "DirectAnswer", "AgentActionForModel", "Foresight", "FutureScore",
                "SotopiaEvaluation", "EnvResponse")


@pytest.mark.parametrize("name", TOOL_SCHEMAS)
def test_swm_tool_schemas_get_a_valid_minimal_instance(name: str) -> None:
    schema = known_schemas().get(name)
    if schema is None:
        pytest.skip(f"{name} is not defined in this checkout")
    params = convert_to_openai_tool(schema)["function"]["parameters"]
    schema.model_validate(minimal_instance(params))


def test_minimal_instance_respects_enums_ranges_and_lengths() -> None:
    class Probe(BaseModel):
        model_config = ConfigDict(extra="forbid")
        kind: Literal["speak", "leave"]
        score: int = Field(ge=3, le=9)
        ratio: float = Field(gt=-5, lt=-1)
        code: Annotated[str, StringConstraints(min_length=5, max_length=8)]
        tags: list[str] = Field(min_length=2, max_length=4)
        note: str | None = None

    params = convert_to_openai_tool(Probe)["function"]["parameters"]
    value = Probe.model_validate(minimal_instance(params))
    assert value.kind == "speak" and 3 <= value.score <= 9 and len(value.tags) == 2 and len(value.code) >= 5


def test_sampled_latency_is_seeded() -> None:
    def draws(seed: int) -> list[float]:
        state = _State(0.2, 0.05, seed, {}, "", False)
        return [state.draw_latency() for _ in range(5)]

    assert draws(7) == draws(7) != draws(8)
    assert all(d >= 0 for d in draws(7))


def test_counts_concurrent_requests() -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from swm.testing import scaled

    pair = threading.Barrier(2, timeout=scaled(60))

    def answer(prompt: str, body: dict[str, Any]) -> None:
        """Wait until another request is in too (two in flight, however the threads are scheduled); None: the
        schema's minimal instance, as without a script."""
        pair.wait()

    with FakeOpenAIServer(scripts={"ReasonedAnswer": answer}) as server:
        model = make_chat_model(server.model_spec)
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda i: call_model(model, f"q{i}", ReasonedAnswer), range(8)))
        assert all(r.value is not None for r in replies)
        assert server.requests == 8 and server.stats()["max_in_flight"] >= 2


def test_fail_at_stands_in_for_a_crash() -> None:
    with FakeOpenAIServer() as server:
        model = make_chat_model(server.model_spec)
        server.configure(fail_at=1)
        call_model(model, "first", ReasonedAnswer)
        with pytest.raises(ModelCallFailed, match="HTTP 400"):
            call_model(model, "second", ReasonedAnswer)
        server.configure(fail_at=-1)
        assert call_model(model, "third", ReasonedAnswer).value is not None


def test_fail_at_lets_no_more_than_k_of_requests_arriving_together_through() -> None:
    """The check against K and the count of requests let past are one step: six at once, K = 2, two answered."""
    from concurrent.futures import ThreadPoolExecutor

    def ask(i: int) -> bool:
        try:
            return call_model(model, f"q{i}", ReasonedAnswer).value is not None
        except ModelCallFailed as exc:
            assert "HTTP 400" in str(exc)
            return False

    with FakeOpenAIServer() as server:
        model = make_chat_model(server.model_spec, max_retries=0)
        server.configure(fail_at=2)
        with ThreadPoolExecutor(6) as pool:
            answered = list(pool.map(ask, range(6)))
        assert answered.count(True) == 2 and server.requests == 2


def test_runs_as_a_separate_process() -> None:
    with FakeOpenAIServer(scripts={"<text>": "from the child"}, process=True) as server:
        ctx = SWMContext(model=server.model_spec)
        assert call_model(ctx.model_for("qa"), "hi").value == "from the child"
        assert server.requests == 1 and server.slept >= 0


def test_a_whole_graph_runs_against_it() -> None:
    from swm.graphs import ask

    with FakeOpenAIServer() as server:
        ctx = SWMContext(model=server.model_spec)
        out = ask.build().compile().invoke({"narrative": "Anne and Bob talk. Anne hides the cake.",
                                            "question": "Where is the cake?", "mode": "s3ap"}, context=ctx)
        assert out["answer"] and not out.get("parse_problems")
        assert server.stats()["by_tool"] == {"S3APParse": 1, "ReasonedAnswer": 1}


def test_a_streamed_chat_answer_is_the_same_answer() -> None:
    """Agent harnesses (verifiers' chat program among them) ask for a stream: they get the answer as events."""
    with FakeOpenAIServer(scripts={"<text>": "hello there"}) as server:
        client = OpenAI(base_url=server.base_url, api_key="sk-no-key-needed")
        chunks = list(client.chat.completions.create(model="fake", messages=[{"role": "user", "content": "hi"}],
                                                     stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hello there"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
