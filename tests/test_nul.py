"""NUL characters never reach a backend: removed (and counted) at the model and input-file boundaries,
and removed by the PostgreSQL checkpointer itself from any other path, so no thread is poisoned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

from click.testing import CliRunner
from langgraph.graph import END, START, StateGraph

from swm.checkpoints import open_saver, open_store
from swm.cli import main
from swm.llm import call_model, make_chat_model
from swm.schemas import ReasonedAnswer
from swm.testing import FakeOpenAIServer


def _answer(prompt: str, body: dict[str, Any]) -> dict[str, str]:
    return {"reasoning": "The ball\x00 moved.", "answer": "bas\x00ket"}


def test_a_nul_in_a_reply_is_removed_and_counted() -> None:
    with FakeOpenAIServer(scripts={"ReasonedAnswer": _answer}, text="fi\x00ne") as fake:
        reply = call_model(make_chat_model(fake.model_spec), "Where?", ReasonedAnswer)
        text = call_model(make_chat_model(fake.model_spec), "Say it.")
    assert reply.value.answer == "basket" and reply.stats["nul_removed"] == 2
    assert text.value == "fine" and text.stats["nul_removed"] == 1


def test_bench_tom_finishes_when_the_model_sends_nul(tmp_path: Path, db_target: str | Path) -> None:
    args = ["bench", "tom", "--benchmark", "sim", "--n", "1", "--modes", "cot", "--concurrency", "1",
            "--no-progress", "--db", str(db_target), "--thread-id", "N", "--out", str(tmp_path / "out")]
    with FakeOpenAIServer(scripts={"ReasonedAnswer": _answer}) as fake:
        result = CliRunner().invoke(main, [*args, "--model", fake.model_spec])
    assert result.exit_code == 0, result.output
    rows = list(open_store(db_target).rows("select status, answer from tom_results"))
    assert len(rows) == 6 and {r["status"] for r in rows} == {"done"} and {r["answer"] for r in rows} == {"basket"}


def test_bench_sotopia_finishes_on_a_scenario_with_nul(tmp_path: Path, db_target: str | Path) -> None:
    from bench.extra_graphs import SCRIPTS
    from swm.scenarios import SHIPPED

    row = json.loads(SHIPPED.read_text(encoding="utf-8").splitlines()[0])
    data = tmp_path / "s.jsonl"
    data.write_text(json.dumps({**row, "scenario": row["scenario"] + "\x00 (a stray NUL)"}) + "\n", encoding="utf-8")
    args = ["bench", "sotopia", "--data", str(data), "--policies", "plain", "--max-turns", "1", "--seats", "first",
            "--no-progress", "--db", str(db_target), "--thread-id", "S", "--out", str(tmp_path / "out")]
    with FakeOpenAIServer(scripts=SCRIPTS) as fake:
        result = CliRunner().invoke(main, [*args, "--model", fake.model_spec])
    assert result.exit_code == 0, result.output
    assert "s.jsonl:1: removed 1 NUL character(s)" in result.output and "failed 0" in result.output


class _State(TypedDict):
    text: str
    echo: str


def test_the_postgres_checkpointer_stores_a_state_string_with_nul(db_target: str | Path) -> None:
    """Any other path: a node that returns NUL text; the thread finishes and resumes (nothing replayed)."""
    calls: list[int] = []

    def speak(state: _State) -> dict[str, str]:
        calls.append(1)
        return {"text": "x\x00y"}

    graph = StateGraph(_State)
    graph.add_node("speak", speak)
    graph.add_node("echo", lambda state: {"echo": state["text"] + "!"})
    graph.add_edge(START, "speak")
    graph.add_edge("speak", "echo")
    graph.add_edge("echo", END)
    config: Any = {"configurable": {"thread_id": "t"}}
    with open_saver(db_target) as saver:
        out = graph.compile(checkpointer=saver).invoke({"text": "", "echo": ""}, config, durability="sync")
    assert out["echo"].replace("\x00", "") == "xy!"
    with open_saver(db_target) as saver:
        state = graph.compile(checkpointer=saver).get_state(config)
    assert not state.next and state.values["echo"].replace("\x00", "") == "xy!" and calls == [1]
