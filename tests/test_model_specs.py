"""Model specs: provider:model through init_chat_model, name@url kept, malformed specs refused before any call."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from swm.cli import main
from swm.context import SWMContext
from swm.errors import ModelSpecError
from swm.llm import ModelSpec, call_model, make_chat_model
from swm.schemas import ReasonedAnswer
from swm.testing import FakeOpenAIServer


@pytest.mark.parametrize(("spec", "provider", "name", "url"), [
    ("openai:gpt-4o", "openai", "gpt-4o", None),
    ("anthropic:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5", None),
    ("ollama:llama3.1:8b", "ollama", "llama3.1:8b", None),
    ("llama3.1:8b@http://127.0.0.1:11434/v1", None, "llama3.1:8b", "http://127.0.0.1:11434/v1"),
    ("ft:gpt-4o-mini:org::abc", None, "ft:gpt-4o-mini:org::abc", None),
    ("reasoning:openai:o3@https://h.example/v1", "openai", "o3", "https://h.example/v1"),
    ("embedded:lora=/tmp/a.gguf", None, "embedded:lora=/tmp/a.gguf", None),
])
def test_specs_parse_into_provider_name_and_url(spec: str, provider: str | None, name: str, url: str | None) -> None:
    parsed = ModelSpec.parse(spec)
    assert (parsed.provider, parsed.name, parsed.base_url) == (provider, name, url)
    assert str(parsed) == spec


@pytest.mark.parametrize(("spec", "message"), [
    ("m@localhost:8000/v1", "no usable base URL"),
    ("m@127.0.0.1:8000", "no usable base URL"),
    ("m@ftp://h/v1", "no usable base URL"),
    ("anthropc:claude-3", "did you mean 'anthropic'"),
    ("@http://h/v1", "no model name"),
])
def test_malformed_specs_are_refused_when_the_context_is_made(spec: str, message: str) -> None:
    with pytest.raises(ModelSpecError, match=message):
        SWMContext(model=spec)
    with pytest.raises(ModelSpecError, match=message):
        SWMContext(models={"judge": spec})


def test_an_unknown_role_in_models_is_refused() -> None:
    with pytest.raises(ModelSpecError, match="unknown role 'jugde'"):
        SWMContext(models={"jugde": "gpt-4o"})


def test_a_provider_without_its_package_names_the_package() -> None:
    pytest.importorskip("langchain")
    with pytest.raises(ModelSpecError) as failed:
        make_chat_model("anthropic:claude-sonnet-4-5")
    assert str(failed.value) == ("provider 'anthropic' needs the langchain-anthropic package"
                                 " — pip install langchain-anthropic")


def test_provider_model_goes_through_init_chat_model_over_http() -> None:
    pytest.importorskip("langchain")
    with FakeOpenAIServer(scripts={"ReasonedAnswer": {"reasoning": "r", "answer": "the basket"}}) as server:
        model = make_chat_model(f"openai:fake@{server.base_url}")
        reply = call_model(model, "Where?", ReasonedAnswer)
        assert reply.value.answer == "the basket"
        assert server.stats()["by_model"] == {"fake": 1}


def _ask(tmp_path: Path, *extra: str) -> object:
    story = tmp_path / "s.txt"
    story.write_text("Sally puts the marble in the basket.")
    return CliRunner().invoke(main, ["ask", "--story", str(story), "--question", "Where?", "--mode", "cot",
                                     "--db", str(tmp_path / "x.db"), *extra])


def test_cli_refuses_a_url_with_no_scheme_in_one_line_exit_2(tmp_path: Path) -> None:
    result = _ask(tmp_path, "--model", "m@localhost:8000/v1")
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert "write it as http://localhost:8000/v1" in result.output  # type: ignore[attr-defined]
    assert "Traceback" not in result.output  # type: ignore[attr-defined]


def test_cli_missing_package_and_missing_key_exit_2_before_any_call(tmp_path: Path) -> None:
    pytest.importorskip("langchain")
    with FakeOpenAIServer() as server:
        result = _ask(tmp_path, "--model", f"fake@{server.base_url}", "--parser-model", "anthropic:claude-x")
        assert server.stats()["attempts"] == 0
    assert result.exit_code == 2 and "pip install langchain-anthropic" in result.output  # type: ignore[attr-defined]
    result = _ask(tmp_path, "--parser-model", "gpt-4o", "--model", "m@http://127.0.0.1:9/v1")
    assert result.exit_code == 2 and "needs OPENAI_API_KEY" in result.output  # type: ignore[attr-defined]
