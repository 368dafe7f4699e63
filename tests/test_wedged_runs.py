"""One failed item must not wedge a run: a rerun on a healthy endpoint completes it, paying no call twice.

Each case injects a real fault on the loopback fake server at a chosen point of a run, then reruns the
same command and checks that the run completes with every item stored once.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from swm.cli import main
from swm.testing import FakeOpenAIServer

ACT = {"action_type": "speak", "argument": "I could do 45 if you take two.", "to": []}
# the run: 2 families, 2 cycles of 2 training episodes; 4 held-out episodes per policy (16 in all)
LEARN = ["learn", "--cycles", "2", "--levels", "easy", "--families", "negotiation,secret", "--episodes-per-level",
         "2", "--samples-per-task", "2", "--max-turns", "2", "--concurrency", "2", "--max-retries", "2",
         "--timeout", "5", "--thread-id", "W"]
EPISODES = 16


class FaultAfterEpisodes:
    """The act script: one ``fault`` queued on the server once the run has ``stored`` episodes; acts as usual.

    The server answers requests on several threads (``--concurrency 2``), so the check and the firing hold a lock:
    two requests that both see the count reached must not queue the fault twice.
    """

    def __init__(self, db: Path, stored: int, fault: str = "429") -> None:
        self.db, self.stored, self.fault = db, stored, fault
        self.server: FakeOpenAIServer | None = None
        self.fired = False
        self._lock = threading.Lock()

    def __call__(self, prompt: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if not self.fired and self.server is not None and self._count() >= self.stored:
                self.fired = True
                self.server.configure(faults=[self.fault])  # the next request: one of the next phase's
        return ACT

    def _count(self) -> int:
        if not self.db.exists():
            return 0
        with sqlite3.connect(self.db) as conn:
            tables = {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}
            return int(conn.execute("select count(*) from lifelong_episodes").fetchone()[0]) \
                if "lifelong_episodes" in tables else 0


def _report_calls(path: Path) -> int:
    found = re.search(r"model calls (\d+)", path.read_text())
    assert found, "the report states its model calls"
    return int(found.group(1))


@pytest.mark.parametrize(("stored", "where"), [(4, "cycle 1 (collect)"), (10, "cycle 2 (collect)"),
                                               (6, "cycle 1 (dev/test)")])
def test_one_failed_episode_does_not_wedge_learn(tmp_path: Path, stored: int, where: str) -> None:
    from swm.checkpoints import ExperienceStore
    from swm.lifelong import store as ls

    db, out = tmp_path / "run.db", tmp_path / "out"
    script = FaultAfterEpisodes(db, stored)
    with FakeOpenAIServer(scripts={"AgentActionForModel": script}) as fake:
        script.server = fake
        fake.configure(retry_after=3600, retry_after_ms=-1)  # a 429 asking for an hour: not retried
        args = [*LEARN, "--model", fake.model_spec, "--db", str(db), "--out", str(out)]
        first = CliRunner().invoke(main, args)
        assert first.exit_code == 3, first.output
        assert fake.stats()["injected"] == {"429": 1}
        lines = first.output.strip().splitlines()
        assert lines[-1].startswith(f"error: 1 episode(s) of {where} failed after their retries"), lines[-3:]
        assert "Traceback" not in first.output
        second = CliRunner().invoke(main, args)
        assert second.exit_code == 0, second.output
        assert "playing again the 1 episode(s) that failed" in second.output
        answered = fake.requests
    store = ExperienceStore(db)
    ids = [r["episode_id"] for r in store.rows("select episode_id from lifelong_episodes")]
    assert len(ids) == len(set(ids)) == EPISODES and not ls.failures(store, "W")
    assert _report_calls(out / "report.md") == answered, "every call answered is counted once"


# ---- a decision's shared request for n choices -------------------------------------------------------


class _Running:
    """Stands in for the embedded server's process: alive."""

    pid = 0

    def poll(self) -> None:
        return None

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        raise subprocess.TimeoutExpired("llama-server", timeout or 0)


@pytest.fixture
def llama_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake server as the embedded llama-server: decisions go to its ``/v1/completions`` with ``n`` choices.

    The leader of two samples waits `swm.serving.choices.WAIT` (0.5 s) for its sibling, then sends alone; on a
    busy machine the second thread can start later than that, and the tests count one shared request. The wait
    is a minute here (it ends as soon as the sibling joins), as in tests/test_llama_server.py.
    """
    from swm.lifelong import decision_play
    from swm.serving import embedded

    gguf = embedded.gguf_path()
    if not gguf.is_file():
        pytest.skip(f"no embedded GGUF at {gguf}")
    monkeypatch.setattr(decision_play._gathered, "wait", 60.0)
    with FakeOpenAIServer() as fake:
        fake.configure(retry_after_ms=1)
        server = embedded.EmbeddedServer(_Running(), fake.base_url, gguf, tmp_path / "server.log",  # type: ignore[arg-type]
                                         engine=embedded.ENGINE, slots=4)
        monkeypatch.setattr(embedded, "engine", lambda: embedded.ENGINE)
        monkeypatch.setitem(embedded._servers, (gguf, None, embedded.ENGINE), server)
        yield fake


def _two_samples(max_retries: int = 0) -> list[Any]:
    """Play two samples of one decision at once (one request with n=2); return each text, or its error."""
    from concurrent.futures import ThreadPoolExecutor

    from swm.lifelong.decision_play import _complete, sampling_seed
    from swm.tasks.decisions import decision_prompt, decision_task

    task = decision_task("persuasion", 4)

    def sample(s: int) -> Any:
        try:
            return _complete("embedded", decision_prompt(task), 0.7, sampling_seed(task.task_id, s), 30.0,
                             siblings=2, **({"max_retries": max_retries} if max_retries else {}))[0]
        except Exception as exc:  # noqa: BLE001 - the test looks at what each sample got
            return exc

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(sample, (0, 1)))


@pytest.mark.parametrize(("fault", "failed"), [("missing_choice", 1), ("null_choice", 0)])
def test_a_spoiled_choice_fails_only_its_own_sample(llama_server: FakeOpenAIServer, fault: str, failed: int) -> None:
    from swm.errors import ModelCallFailed

    llama_server.configure(faults=[fault])
    got = _two_samples()
    assert llama_server.stats()["attempts"] == 1, "the two samples shared one request"
    assert isinstance(got[failed], ModelCallFailed), got
    what = "left out choice 2 of 2" if fault == "missing_choice" else "sent no text for choice 1 of 2"
    assert what in got[failed].one_line() and "\n" not in got[failed].one_line()
    assert isinstance(got[1 - failed], str) and got[1 - failed], "the other sample keeps its move"


def test_a_500_on_the_shared_request_is_retried(llama_server: FakeOpenAIServer) -> None:
    llama_server.configure(faults=["500"])
    got = _two_samples(max_retries=2)
    assert all(isinstance(text, str) for text in got), got
    assert llama_server.stats()["attempts"] == 2 and llama_server.requests == 1


def test_a_chat_reply_with_no_choice_is_retried_then_one_clear_failure() -> None:
    from swm.errors import ModelCallFailed
    from swm.llm import call_model, make_chat_model
    from swm.schemas import ReasonedAnswer

    with FakeOpenAIServer() as fake:
        fake.configure(faults=["missing_choice"], retry_after_ms=1)
        assert call_model(make_chat_model(fake.model_spec, max_retries=1), "Where?", ReasonedAnswer).value
        assert fake.stats()["attempts"] == 2
        fake.configure(faults=["missing_choice"] * 2)
        with pytest.raises(ModelCallFailed, match="no choice in the reply") as caught:
            call_model(make_chat_model(fake.model_spec, max_retries=1), "Where?", ReasonedAnswer)
    assert "\n" not in caught.value.one_line()


def test_a_chat_choice_with_no_content_is_a_reply_that_does_not_fit() -> None:
    from swm.llm import call_model, make_chat_model
    from swm.schemas import ReasonedAnswer

    with FakeOpenAIServer() as fake:
        fake.configure(faults=["null_choice"])
        reply = call_model(make_chat_model(fake.model_spec, max_retries=0), "Where?", ReasonedAnswer)
    assert reply.value is None and reply.error and "\n" not in reply.error


# ---- swm ask after one bad reply ------------------------------------------------------------------------


class BadOnce:
    """The answer tool's script: garbage arguments the first time, a valid answer after."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, prompt: str, body: dict[str, Any]) -> Any:
        self.calls += 1
        return "{not json" if self.calls == 1 else {"reasoning": "Anne moved it.", "answer": "the box"}


def test_ask_answers_on_rerun_after_one_bad_reply(tmp_path: Path) -> None:
    story = tmp_path / "story.txt"
    story.write_text("Sally puts the ball in the basket. Sally leaves. Anne moves the ball to the box.")
    with FakeOpenAIServer(scripts={"ReasonedAnswer": BadOnce()}) as fake:
        args = ["ask", "--story", str(story), "--question", "Where will Sally look?", "--mode", "cot", "--model",
                fake.model_spec, "--db", str(tmp_path / "a.db"), "--thread-id", "A"]
        first = CliRunner().invoke(main, args)
        assert first.exit_code == 4, first.output
        assert first.output.strip().splitlines()[-1].startswith("error: no usable answer: ")
        second = CliRunner().invoke(main, args)
        assert second.exit_code == 0, second.output
        assert "the box" in second.output and "resuming thread A at answer" in second.output
        assert fake.requests == 2, "only the answer is asked again"
        third = CliRunner().invoke(main, args)
        assert third.exit_code == 0 and "already finished" in third.output and fake.requests == 2


STORY = "Sally puts the ball in the basket. Sally leaves. Anne moves the ball to the box."


@pytest.mark.parametrize("fault", ["bad_arguments", "wrong_tool"])
def test_parse_parses_again_on_rerun_after_one_bad_reply(tmp_path: Path, fault: str) -> None:
    story = tmp_path / "story.txt"
    story.write_text(STORY)
    with FakeOpenAIServer() as fake:
        fake.configure(faults=[fault])
        args = ["parse", str(story), "--max-attempts", "1", "--model", fake.model_spec, "--db",
                str(tmp_path / "p.db"), "--thread-id", "P"]
        first = CliRunner().invoke(main, args)
        assert first.exit_code == 4, first.output
        assert first.output.strip().splitlines()[-1].startswith("error: no usable parse after 1 attempt(s)")
        second = CliRunner().invoke(main, args)
        assert second.exit_code == 0, second.output
        assert '"agents_names"' in second.output and "resuming thread P at prepare" in second.output
        assert fake.requests == 2, "the parse is asked for once more"
        third = CliRunner().invoke(main, args)
        assert third.exit_code == 0 and "already finished" in third.output and fake.requests == 2


def test_ask_parses_again_on_rerun_after_one_bad_parse_reply(tmp_path: Path) -> None:
    story = tmp_path / "story.txt"
    story.write_text(STORY)
    with FakeOpenAIServer(scripts={"ReasonedAnswer": {"reasoning": "Anne moved it.", "answer": "the basket"}}) as fake:
        fake.configure(faults=["bad_arguments"])  # the first request: the parse
        args = ["ask", "--story", str(story), "--question", "Where will Sally look?", "--max-attempts", "1",
                "--model", fake.model_spec, "--db", str(tmp_path / "a.db"), "--thread-id", "A"]
        first = CliRunner().invoke(main, args)
        assert first.exit_code == 6, first.output
        assert fake.requests == 1, "no answer without a social state"
        second = CliRunner().invoke(main, args)
        assert second.exit_code == 0, second.output
        assert "the basket" in second.output and "resuming thread A at prepare" in second.output
        assert fake.stats()["by_tool"] == {"S3APParse": 2, "ReasonedAnswer": 1}, "the parse, then the answer"
        third = CliRunner().invoke(main, args)
        assert third.exit_code == 0 and "already finished" in third.output and fake.requests == 3


# ---- training options TRL refuses --------------------------------------------------------------------


@pytest.mark.parametrize(("option", "refused"), [
    (["--update", "kto", "--train-batch-size", "1"], "TRL's KTO needs at least 2 rows a batch"),
    (["--update", "dpo", "--train-rank", "0"], "--train-rank 0: a LoRA rank is at least 1"),
    (["--update", "ppo", "--train-lr", "-1"], "--train-lr -1: a learning rate is not negative"),
])
def test_training_options_are_refused_before_the_first_call(tmp_path: Path, option: list[str], refused: str) -> None:
    pytest.importorskip("trl")
    with FakeOpenAIServer() as fake:
        result = CliRunner().invoke(main, [*LEARN, *option, "--model", fake.model_spec, "--db", str(tmp_path / "k.db"),
                                           "--out", str(tmp_path / "out")])
        assert fake.stats()["attempts"] == 0, "refused before any model call"
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"error: {option[0]} {option[1]} cannot train with ") and refused in last, last
    assert "Traceback" not in result.output
