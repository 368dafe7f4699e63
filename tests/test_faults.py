"""Endpoint faults on a loopback OpenAI-compatible server: retried, or one clear line, never a traceback.

The fake server injects each fault into real HTTP; ``retry_after_ms`` makes the client's backoff
milliseconds long, so the suite stays fast while the retry loop it exercises is the real one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from swm.cli import main
from swm.errors import ModelCallFailed, ModelTimeout
from swm.llm import call_model, make_chat_model
from swm.schemas import ReasonedAnswer
from swm.testing import FakeOpenAIServer, ScriptedChatModel

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


def test_a_429_asking_for_an_hour_is_reported_as_the_one_attempt_made(server: FakeOpenAIServer) -> None:
    server.configure(faults=["429"] * 3, retry_after=3600, retry_after_ms=-1)
    with pytest.raises(ModelCallFailed) as caught:
        call_model(make_chat_model(server.model_spec, max_retries=2), "Where?", ReasonedAnswer)
    assert server.stats()["attempts"] == 1, "the client does not wait an hour"
    assert "HTTP 429 (rate limited, 1 attempt; the server asked to wait 3600 s, longer than the 120 s the " \
           "client waits, so it was not retried)" in str(caught.value)


def test_attempts_are_the_ones_made(server: FakeOpenAIServer) -> None:
    server.configure(faults=["500"] * 5)
    with pytest.raises(ModelCallFailed, match=r"HTTP 500 \(server error, 2 attempts\)"):
        call_model(make_chat_model(server.model_spec, max_retries=1), "Where?", ReasonedAnswer)


@pytest.mark.parametrize("usage", ["negative", "missing"])
def test_unusable_usage_counts_as_unknown_not_as_tokens(server: FakeOpenAIServer, usage: str) -> None:
    server.configure(usage=usage)
    reply = call_model(make_chat_model(server.model_spec), "Where?", ReasonedAnswer)
    assert reply.value is not None
    assert (reply.stats["prompt_tokens"], reply.stats["completion_tokens"], reply.stats["unknown_usage"]) == (0, 0, 1)
    server.configure(usage="real")
    known = call_model(make_chat_model(server.model_spec), "Where?", ReasonedAnswer).stats
    assert known["prompt_tokens"] > 0 and known["unknown_usage"] == 0


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
    server.configure(faults=["invalid_json"] * 4)  # retried like a transient fault: 1 + 3 attempts
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
                                                             db_target: str | Path) -> None:
    from swm.checkpoints import open_store
    from swm.checkpoints.store import FAILED_REPLY_CHARS

    server.configure(faults=["huge"] * 3, huge_chars=50_000)
    db = db_target
    result = CliRunner().invoke(main, ["parse", str(story), "--model", server.model_spec, "--db", str(db)])
    assert result.exit_code == 4, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: no usable parse after 3 attempt(s): ") and "null" not in result.stdout
    kept = open_store(db).failed_replies()
    assert [r["node"] for r in kept] == ["parse"] * 3
    assert all(len(r["raw"]) == FAILED_REPLY_CHARS and r["raw_chars"] > 50_000 for r in kept)


def test_unusable_answer_exits_non_zero(story: Path, tmp_path: Path) -> None:
    from swm.checkpoints import ExperienceStore

    with FakeOpenAIServer(scripts={"ReasonedAnswer": "this is not JSON"}) as fake:
        result = CliRunner().invoke(main, ["ask", "--story", str(story), "--question", "Where?", "--mode", "cot",
                                           "--model", fake.model_spec, "--db", str(tmp_path / "a.db")])
    assert result.exit_code == 4, result.output
    assert "(no answer)" not in result.output
    assert result.output.strip().splitlines()[-1].startswith("error: no usable answer: ")
    assert [r["node"] for r in ExperienceStore(tmp_path / "a.db").failed_replies()] == ["answer"]


def _bench_tom(server: FakeOpenAIServer, db: str | Path, *extra: str, out: Path | None = None) -> tuple[int, str]:
    args = ["bench", "tom", "--benchmark", "sim", "--n", "1", "--modes", "cot", "--concurrency", "1",
            "--no-progress", "--model", server.model_spec, "--max-retries", "1", "--db", str(db),
            "--thread-id", "faults", "--out", str(out or Path(db).parent / "out"), *extra]
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


def _tom_rows(db: str | Path) -> list[dict]:
    from swm.checkpoints import open_store

    return list(open_store(db).rows("select key, status, error from tom_results order by key"))


def test_bench_tom_records_a_failed_question_and_a_rerun_retries_only_it(server: FakeOpenAIServer,
                                                                         tmp_path: Path, db_target: str | Path) -> None:
    db, out = db_target, tmp_path / "out"
    server.configure(faults=["500", "500"])  # the first question's two attempts
    code, output = _bench_tom(server, db, out=out)
    assert code == 3, output  # finished with a failed item: exit 3 (docs/errors.md)
    rows = _tom_rows(db)
    assert len(rows) == 6 and [r["status"] for r in rows].count("failed") == 1
    assert "HTTP 500" in next(r["error"] for r in rows if r["status"] == "failed")
    assert "error: 1 question(s) failed" in output and "| cot | 5 |" in output
    assert server.stats()["attempts"] == 2 + 5
    server.reset()
    code, output = _bench_tom(server, db, out=out)
    assert code == 0, output
    assert server.stats()["attempts"] == 1, "only the failed question is asked again"
    rows = _tom_rows(db)
    assert len(rows) == 6 and {r["status"] for r in rows} == {"done"} and "| cot | 6 |" in output


def test_bench_tom_stops_when_every_question_fails(server: FakeOpenAIServer, tmp_path: Path) -> None:
    db = tmp_path / "tom.db"
    server.configure(faults=["500"] * 100)
    code, output = _bench_tom(server, db)
    assert code == 3 and "5 items in a row failed" in output and "Traceback" not in output
    assert [r["status"] for r in _tom_rows(db)] == ["failed"] * 5
    server.configure(faults=[])
    server.reset()
    code, output = _bench_tom(server, db)
    assert code == 0, output
    rows = _tom_rows(db)
    assert len(rows) == len({r["key"] for r in rows}) == 6 and {r["status"] for r in rows} == {"done"}
    assert server.stats()["attempts"] == 6


def test_bench_sotopia_records_a_failed_episode_and_a_rerun_finishes_only_it(tmp_path: Path) -> None:
    from bench.extra_graphs import SCRIPTS
    from swm.checkpoints import ExperienceStore

    db = tmp_path / "s.db"
    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "2", "--max-turns", "2",
            "--seats", "first", "--concurrency", "1", "--no-progress", "--max-retries", "1", "--db", str(db),
            "--thread-id", "S",
            "--out", str(tmp_path / "out")]
    with FakeOpenAIServer(scripts=SCRIPTS) as fake:
        fake.configure(retry_after_ms=1, faults=["500", "500"])
        first = CliRunner().invoke(main, [*args, "--model", fake.model_spec])
        assert first.exit_code == 3, first.output
        assert "failed 1" in first.output and "Failed episodes (not in the table): 1" in first.output
        rows = list(ExperienceStore(db).rows("select episode_id, status, error from episodes order by episode_id"))
        assert [r["status"] for r in rows].count("failed") == 1
        assert "HTTP 500" in next(r["error"] for r in rows if r["status"] == "failed")
        fake.reset()
        second = CliRunner().invoke(main, [*args, "--model", fake.model_spec])
        assert second.exit_code == 0, second.output
        assert "skipped 1 finished, failed 0" in second.output and fake.stats()["attempts"] > 0
    store = ExperienceStore(db)
    assert {r["status"] for r in store.rows("select status from episodes")} == {"done"}
    turns = list(store.rows("select episode_id, turn from turns"))
    assert len(turns) == len({(t["episode_id"], t["turn"]) for t in turns}), "no turn stored twice"


LEARN = ["learn", "--cycles", "1", "--levels", "easy", "--families", "negotiation", "--episodes-per-level", "2",
         "--samples-per-task", "2", "--max-turns", "2", "--heldout-per-cell", "1", "--concurrency", "1",
         "--max-retries", "1", "--thread-id", "L"]


def _report_calls(path: Path) -> int:
    import re

    found = re.search(r"model calls (\d+)", path.read_text())
    assert found, "the report states its model calls"
    return int(found.group(1))


def test_learn_stops_on_failed_episodes_and_a_rerun_plays_only_them(tmp_path: Path, db_target: str | Path) -> None:
    from bench.extra_graphs import SCRIPTS
    from swm.checkpoints import open_store
    from swm.lifelong import store as ls

    db, out = db_target, tmp_path / "out"
    with FakeOpenAIServer(scripts=SCRIPTS) as fake:
        fake.configure(retry_after_ms=1, faults=["500", "500"])  # the baseline episode's first call, twice
        args = [*LEARN, "--model", fake.model_spec, "--db", str(db), "--out", str(out)]
        first = CliRunner().invoke(main, args)
        assert first.exit_code == 3, first.output
        assert "1 episode(s) of cycle 0 (dev/test) failed after their retries" in first.output
        assert "Traceback" not in first.output
        store = open_store(db)
        assert [r["phase"] in ("dev", "test") for r in ls.failures(store, "L")] == [True]
        assert ls.count_episodes(store, "L") == 1, "the other baseline episode went on and is kept"
        second = CliRunner().invoke(main, args)
        assert second.exit_code == 0, second.output
        assert "playing again the 1 episode(s) that failed" in second.output
        answered = fake.requests
    ids = [r["episode_id"] for r in store.rows("select episode_id from lifelong_episodes")]
    assert len(ids) == len(set(ids)) == ls.count_episodes(store, "L") > 0 and not ls.failures(store, "L")
    assert _report_calls(out / "report.md") == answered, "the report counts every call the server answered"


def test_usage_is_kept_with_each_episode_across_a_crash(tmp_path: Path) -> None:
    from test_lifelong_graph import EVAL_EPISODES, PLAN, TOTAL, Agents

    from swm.checkpoints import ExperienceStore, sqlite_saver
    from swm.context import SWMContext
    from swm.graphs import lifelong
    from swm.usage import total_usage

    db = tmp_path / "run.db"
    config: Any = {"configurable": {"thread_id": "k"}, "max_concurrency": 3, "recursion_limit": 1000}
    made = 0
    baseline_acts = 2 * EVAL_EPISODES * PLAN["max_turns"]
    for agents in (Agents(fail_after=baseline_acts + 3), Agents()):  # dies in cycle 1's collection, then resumes
        llm = ScriptedChatModel(respond=agents)
        ctx = SWMContext(llm=llm, store=ExperienceStore(db))
        inputs = None if made else {"plan": {**PLAN, "run_id": "k", "out_dir": str(tmp_path / "out")}}
        with sqlite_saver(db) as saver:
            graph = lifelong.build().compile(checkpointer=saver)
            try:
                for _ in graph.stream(inputs, config, context=ctx, durability="sync"):
                    pass
            except RuntimeError:
                made -= 1  # the crashing call raised: no reply, no usage
            values = graph.get_state(config).values
        made += llm.calls
    assert ls_count(db) == TOTAL
    assert total_usage(values["usage"])["calls"] == made


def ls_count(db: Path) -> int:
    from swm.checkpoints import ExperienceStore
    from swm.lifelong import store as ls

    return ls.count_episodes(ExperienceStore(db), "k")


def test_unusable_episode_replies_are_kept_for_audit(tmp_path: Path) -> None:
    from swm.checkpoints import ExperienceStore

    db = tmp_path / "e.db"
    with FakeOpenAIServer(scripts={"AgentActionForModel": "speak: not a tool call"}) as fake:
        result = CliRunner().invoke(main, ["play", "--scenario", "swm-bike-sale", "--policy", "plain", "--max-turns",
                                           "2", "--no-judge", "--model", fake.model_spec, "--db", str(db),
                                           "--thread-id", "ep"])
    assert result.exit_code == 0, result.output
    kept = ExperienceStore(db).failed_replies("ep")
    assert [r["node"] for r in kept] == ["act", "act"] and all("not a tool call" in r["raw"] for r in kept)


def test_a_crashed_embedded_server_is_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    import subprocess
    import sys

    import swm.serving.embedded
    from swm.errors import ModelUnavailable

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    crashed = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    crashed.wait()
    server = swm.serving.embedded.EmbeddedServer(crashed, url, tmp_path / "m.gguf", tmp_path / "server.log")
    monkeypatch.setitem(swm.serving.embedded._servers, (tmp_path / "m.gguf", None), server)
    with pytest.raises(ModelUnavailable) as caught:
        call_model(make_chat_model(f"embedded@{url}", max_retries=0), "Where?", ReasonedAnswer)
    assert "embedded llama.cpp server stopped with exit code -11 (signal 11" in str(caught.value)
