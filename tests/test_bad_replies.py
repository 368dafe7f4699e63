"""HTTP 200 answers that are not chat completions, and replies that drip: a failed call, retried, never a crash."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from swm.cli import main
from swm.errors import ModelTimeout, NotAChatCompletion
from swm.llm import call_model, make_chat_model
from swm.schemas import ReasonedAnswer
from swm.testing import FakeOpenAIServer, scaled

NOT_COMPLETIONS = ["html", "sse", "double_json", "invalid_json"]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        fake.configure(retry_after_ms=1, drip_interval=0.05)
        yield fake


@pytest.mark.parametrize("fault", NOT_COMPLETIONS)
def test_a_reply_that_is_not_a_chat_completion_is_retried(server: FakeOpenAIServer, fault: str) -> None:
    server.configure(faults=[fault])
    reply = call_model(make_chat_model(server.model_spec, max_retries=1), "Where?", ReasonedAnswer)
    assert reply.value is not None and server.stats()["attempts"] == 2


@pytest.mark.parametrize("fault", NOT_COMPLETIONS)
def test_it_fails_the_call_in_one_line_when_retries_run_out(server: FakeOpenAIServer, fault: str) -> None:
    server.configure(faults=[fault] * 2)
    with pytest.raises(NotAChatCompletion) as caught:
        call_model(make_chat_model(server.model_spec, max_retries=1), "Where?", ReasonedAnswer)
    assert "not a chat completion" in str(caught.value) and "(2 attempts)" in str(caught.value)
    assert "\n" not in str(caught.value) and server.stats()["attempts"] == 2


def test_an_html_page_is_named_as_such(server: FakeOpenAIServer) -> None:
    server.configure(faults=["html"])
    with pytest.raises(NotAChatCompletion, match="an HTML page"):
        call_model(make_chat_model(server.model_spec, max_retries=0), "Where?")


def test_bench_tom_fails_the_question_keeps_it_and_a_rerun_retries_only_it(server: FakeOpenAIServer,
                                                                           tmp_path: Path) -> None:
    from swm.checkpoints import open_store

    db = tmp_path / "tom.db"
    args = ["bench", "tom", "--benchmark", "sim", "--n", "1", "--modes", "cot", "--concurrency", "1", "--no-progress",
            "--model", server.model_spec, "--max-retries", "1", "--db", str(db), "--thread-id", "r",
            "--out", str(tmp_path / "out")]
    server.configure(faults=["html", "sse"])  # both attempts of the first question
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 3 and "Traceback" not in first.output, first.output
    rows = list(open_store(db).rows("select key, status, error from tom_results"))
    assert len(rows) == 6 and [r["error"] for r in rows if r["status"] == "failed"][0].count("not a chat completion")
    server.reset()
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0, second.output
    assert server.stats()["attempts"] == 1, "only the failed question is asked again"


def test_timeout_is_a_total_deadline_per_request(server: FakeOpenAIServer) -> None:
    """A reply that drips a byte every 50 ms never trips a read timeout; the deadline cuts it."""
    server.configure(faults=["drip"] * 2, drip_bytes=10**6)  # an endless drip
    start = time.monotonic()
    with pytest.raises(ModelTimeout, match="within 0.5 s"):
        call_model(make_chat_model(server.model_spec, timeout=0.5, max_retries=1), "Where?")
    # the slack (the client's own work) is stretched on a busy machine; an endless drip never ends without the deadline
    assert time.monotonic() - start < 2 * 0.5 + 0.5 + scaled(1.0), "two attempts of 0.5 s and one backoff, with slack"
    assert server.stats()["attempts"] == 2


def test_a_slow_reply_inside_the_deadline_is_read(server: FakeOpenAIServer) -> None:
    server.configure(faults=["drip"], drip_bytes=6)  # 0.3 s of padding, then the reply
    reply = call_model(make_chat_model(server.model_spec, timeout=2, max_retries=0), "Where?", ReasonedAnswer)
    assert reply.value is not None


def test_the_deadline_runs_on_the_openai_clients_own_http_library() -> None:
    """openai 3 runs on httpx2 and openai 2 on httpx: a transport or timeout of the other library is not retried."""
    import openai._base_client

    import swm.deadline

    assert swm.deadline.httpx is openai._base_client.httpx
