"""Model settings the paper fixes: temperature 0.0 for ordinary models, none at all for reasoning models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from swm.llm import ModelSpec, call_model, make_chat_model
from swm.testing import FakeOpenAIServer

FIX = Path(__file__).parent / "fixtures" / "tom"


@pytest.mark.parametrize(("spec", "reasoning"), [
    ("o1", True), ("o3", True), ("o3-mini", True), ("o4-mini", True), ("gpt-5", True), ("gpt-5-mini", True),
    ("deepseek-ai/DeepSeek-R1@http://127.0.0.1:1/v1", True), ("reasoning:qwq-32b@http://127.0.0.1:1/v1", True),
    ("gpt-4o", False), ("gpt-4.1", False), ("omni-7b", False), ("Qwen/Qwen2.5-7B-Instruct@http://h/v1", False),
    ("embedded", False),
])
def test_reasoning_models_are_recognised(spec: str, reasoning: bool) -> None:
    assert ModelSpec.parse(spec).reasoning is reasoning


def test_the_reasoning_mark_is_kept_and_stripped_from_the_name() -> None:
    parsed = ModelSpec.parse("reasoning:qwq-32b@http://127.0.0.1:8000/v1")
    assert (parsed.name, parsed.base_url) == ("qwq-32b", "http://127.0.0.1:8000/v1")
    assert str(parsed) == "reasoning:qwq-32b@http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(("name", "sent"), [("gpt-4o", 0.0), ("o3", None), ("reasoning:my-thinker", None)])
def test_temperature_sent_over_http(name: str, sent: float | None) -> None:
    bodies: list[dict[str, Any]] = []

    def text(prompt: str, body: dict[str, Any]) -> str:
        bodies.append(body)
        return "ok"

    with FakeOpenAIServer(scripts={"<text>": text}) as server:
        base = server.model_spec.partition("@")[2]
        call_model(make_chat_model(f"{name}@{base}", temperature=0.0), "Say ok.")
    assert len(bodies) == 1
    assert bodies[0].get("temperature") == sent and (sent is not None or "temperature" not in bodies[0])


def test_long_reasoning_keeps_the_right_answer_and_is_counted(tmp_path: Path) -> None:
    """A server that ignores the schema's 1,000-character cap sends 3,000 characters of reasoning."""
    from swm.checkpoints import ExperienceStore
    from swm.context import SWMContext
    from swm.graphs import ask
    from swm.tom.loaders import load_benchmark
    from swm.tom.report import summarise
    from swm.tom.runner import run_benchmark

    items = load_benchmark("tomi", FIX / "percept_tomi_mini.csv")[:1]  # gold: hamper

    def long_answer(prompt: str, body: dict[str, Any]) -> dict[str, str]:
        return {"reasoning": "Theo left before the move. " * 111, "answer": "the hamper"}

    with FakeOpenAIServer(scripts={"ReasonedAnswer": long_answer}) as server:
        ctx = SWMContext(model=server.model_spec, task="tomi", store=ExperienceStore(tmp_path / "r.db"))
        rows = run_benchmark(items, ["cot"], ctx, tmp_path / "r.db", "run", progress=False,
                             ask_graph=ask.build())["rows"]
    assert rows[0]["correct"] == 1 and rows[0]["answer"] == "the hamper" and not rows[0]["answer_error"]
    assert rows[0]["reasoning_truncated"] == 1
    assert summarise(rows, ["cot"])["overall"][0]["reasoning_truncated"] == 1
