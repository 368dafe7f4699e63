"""Endpoint faults on a loopback OpenAI-compatible server: retried, or one clear line, never a traceback.

The fake server injects each fault into real HTTP; ``retry_after_ms`` makes the client's backoff
milliseconds long, so the suite stays fast while the retry loop it exercises is the real one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.fake_server import FakeOpenAIServer
from swm.cli import main
from swm.errors import ModelCallFailed, ModelTimeout
from swm.llm import call_model, make_chat_model
from swm.schemas import ReasonedAnswer

STORY = "Sally and Anne are in the room. Sally puts the ball in the basket. Sally leaves. Anne moves the ball."


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        fake.configure(retry_after_ms=1, hang=10)
        yield fake


@pytest.fixture
def story(tmp_path: Path) -> Path:
    path = tmp_path / "story.txt"
    path.write_text(STORY)
    return path


def test_a_burst_of_500s_is_retried(server: FakeOpenAIServer) -> None:
    server.configure(faults=["500"] * 3)
    reply = call_model(make_chat_model(server.model_spec), "Where?", ReasonedAnswer)
    assert reply.value is not None
    assert server.stats()["attempts"] == 4 and server.requests == 1


def test_500s_without_retry_after_back_off_exponentially(server: FakeOpenAIServer) -> None:
    server.configure(faults=["500", "500"], retry_after_ms=-1)
    reply = call_model(make_chat_model(server.model_spec), "Where?", ReasonedAnswer)
    arrivals = server._state.arrivals
    assert reply.value is not None and len(arrivals) == 3
    first, second = arrivals[1] - arrivals[0], arrivals[2] - arrivals[1]
    assert first >= 0.5 * 0.75 and second >= 1.0 * 0.75, "0.5 s then 1 s, less at most 25% jitter"


def test_429_honours_retry_after(server: FakeOpenAIServer) -> None:
    server.configure(faults=["429"], retry_after=1, retry_after_ms=-1)
    reply = call_model(make_chat_model(server.model_spec), "Where?", ReasonedAnswer)
    arrivals = server._state.arrivals
    assert reply.value is not None and len(arrivals) == 2
    assert arrivals[1] - arrivals[0] >= 1.0, "the client waited the server's Retry-After"


def test_a_dropped_connection_is_retried(server: FakeOpenAIServer) -> None:
    server.configure(faults=["drop"])
    assert call_model(make_chat_model(server.model_spec), "Where?", ReasonedAnswer).value is not None
    assert server.stats()["attempts"] == 2


def test_a_hung_endpoint_is_reported_as_a_timeout(server: FakeOpenAIServer) -> None:
    server.configure(faults=["hang", "hang"])
    with pytest.raises(ModelTimeout) as caught:
        call_model(make_chat_model(server.model_spec, timeout=0.2, max_retries=1), "Where?", ReasonedAnswer)
    assert "did not answer within 0.2 s (2 attempts)" in str(caught.value)
    assert "cannot reach" not in str(caught.value)


def test_retries_run_out_in_one_line(server: FakeOpenAIServer) -> None:
    server.configure(faults=["500"] * 5)
    with pytest.raises(ModelCallFailed) as caught:
        call_model(make_chat_model(server.model_spec, max_retries=2), "Where?", ReasonedAnswer)
    assert "HTTP 500 (server error, 3 attempts)" in str(caught.value) and "\n" not in str(caught.value)
    assert server.stats()["attempts"] == 3


def test_a_reply_that_is_not_json_fails_the_call(server: FakeOpenAIServer) -> None:
    server.configure(faults=["invalid_json"])
    with pytest.raises(ModelCallFailed, match="not a chat completion"):
        call_model(make_chat_model(server.model_spec), "Where?", ReasonedAnswer)


def test_cli_timeout_is_one_line_and_exit_3(server: FakeOpenAIServer, story: Path, tmp_path: Path) -> None:
    server.configure(faults=["hang"])
    result = CliRunner().invoke(main, ["ask", "--story", str(story), "--question", "Where?", "--mode", "cot",
                                       "--model", server.model_spec, "--timeout", "0.2", "--max-retries", "0",
                                       "--db", str(tmp_path / "t.db")])
    assert result.exit_code == 3, result.output
    assert "did not answer within 0.2 s (1 attempt)" in result.output and "Traceback" not in result.output


def test_cli_survives_a_500_burst(server: FakeOpenAIServer, story: Path, tmp_path: Path) -> None:
    server.configure(faults=["500"] * 3)
    result = CliRunner().invoke(main, ["ask", "--story", str(story), "--question", "Where?", "--mode", "cot",
                                       "--model", server.model_spec, "--db", str(tmp_path / "b.db")])
    assert result.exit_code == 0, result.output
    assert server.stats()["attempts"] == 4


def test_unusable_parse_exits_non_zero_and_keeps_the_replies(server: FakeOpenAIServer, story: Path,
                                                             tmp_path: Path) -> None:
    from checkpoints import ExperienceStore
    from checkpoints.store import FAILED_REPLY_CHARS

    server.configure(faults=["huge"] * 3, huge_chars=50_000)
    db = tmp_path / "p.db"
    result = CliRunner().invoke(main, ["parse", str(story), "--model", server.model_spec, "--db", str(db)])
    assert result.exit_code == 4, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: no usable parse after 3 attempt(s): ") and "null" not in result.stdout
    kept = ExperienceStore(db).failed_replies()
    assert [r["node"] for r in kept] == ["parse"] * 3
    assert all(len(r["raw"]) == FAILED_REPLY_CHARS and r["raw_chars"] > 50_000 for r in kept)


def test_unusable_answer_exits_non_zero(story: Path, tmp_path: Path) -> None:
    from checkpoints import ExperienceStore

    with FakeOpenAIServer(scripts={"ReasonedAnswer": "this is not JSON"}) as fake:
        result = CliRunner().invoke(main, ["ask", "--story", str(story), "--question", "Where?", "--mode", "cot",
                                           "--model", fake.model_spec, "--db", str(tmp_path / "a.db")])
    assert result.exit_code == 4, result.output
    assert "(no answer)" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("error: no usable answer: ")
    assert [r["node"] for r in ExperienceStore(tmp_path / "a.db").failed_replies()] == ["answer"]
