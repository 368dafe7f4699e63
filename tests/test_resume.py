"""Kill a run mid-graph in a subprocess; the same thread continues without repeating finished nodes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import STORY

from swm.checkpoints import open_saver
from swm.commands._common import run_graph
from swm.context import SWMContext
from swm.graphs import ask
from swm.schemas import ReasonedAnswer
from swm.testing import ScriptedChatModel

KILLED_RUN = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from helpers import STORY, good_parse
    from swm.testing import ScriptedChatModel
    from swm.checkpoints import open_saver
    from swm.graphs import ask
    from swm.context import SWMContext

    def respond(prompt, tool):
        if tool == "S3APParse":
            return good_parse()
        os.kill(os.getpid(), signal.SIGKILL)  # killed while the QA call is in flight

    with open_saver({db!r}) as saver:
        graph = ask.build().compile(checkpointer=saver)
        graph.invoke({{"narrative": STORY, "question": "Where will Sally look?"}},
                     {{"configurable": {{"thread_id": "t1"}}}},
                     context=SWMContext(llm=ScriptedChatModel(respond=respond)), durability="sync")
""")


def test_killed_run_resumes_after_the_last_finished_node(db_target: str | Path) -> None:
    db = db_target
    script = KILLED_RUN.format(tests=str(Path(__file__).parent), db=str(db))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]

    model = ScriptedChatModel(replies=[ReasonedAnswer(reasoning="she left", answer="basket")])
    config = {"configurable": {"thread_id": "t1"}}
    with open_saver(db) as saver:
        graph = ask.build().compile(checkpointer=saver)
        snapshot = graph.get_state(config)
        assert snapshot.next == ("answer",)
        assert snapshot.values["world"].agents == ["Sally", "Anne"]
        out = graph.invoke(None, config, context=SWMContext(llm=model))
    assert model.calls == 1 and model.prompts[0][0] == "ReasonedAnswer"
    assert out["answer"] == "basket"
    assert out["usage"]["parse"]["calls"] == 1, "the killed run's parse call stays counted"
    assert out["usage"]["answer"]["calls"] == 1


def test_cli_runner_resumes_then_replays_a_finished_thread(db_target: str | Path) -> None:
    db = db_target
    failing = ScriptedChatModel(replies=[ReasonedAnswer(reasoning="r", answer="basket")])
    inputs = {"narrative": STORY, "question": "Where?", "mode": "cot"}
    out, thread = run_graph(ask.build(), inputs, SWMContext(llm=failing), db, "fixed", "ask")
    assert out["answer"] == "basket" and thread == "fixed"
    silent = ScriptedChatModel(replies=[])
    again, _ = run_graph(ask.build(), inputs, SWMContext(llm=silent), db, "fixed", "ask")
    assert silent.calls == 0 and again["answer"] == "basket"
    import pytest

    from swm.errors import InputError

    with pytest.raises(InputError, match="finished run on other input"):
        run_graph(ask.build(), {**inputs, "question": "Other?"}, SWMContext(llm=silent), db, "fixed", "ask")


def test_a_stopped_thread_refuses_other_input_and_names_the_difference(tmp_path: Path) -> None:
    import pytest

    from swm.errors import InputError

    db = tmp_path / "cli.db"
    inputs = {"narrative": STORY, "question": "Where?", "mode": "cot"}
    crashing = ScriptedChatModel(replies=[RuntimeError("stopped mid-answer")])
    with pytest.raises(RuntimeError, match="stopped mid-answer"):
        run_graph(ask.build(), inputs, SWMContext(llm=crashing), db, "t", "ask")
    silent = ScriptedChatModel(replies=[])
    with pytest.raises(InputError, match=r"stopped run on other input \(question: 'Where\?' → 'Other\?'\)"):
        run_graph(ask.build(), {**inputs, "question": "Other?"}, SWMContext(llm=silent), db, "t", "ask")
    assert silent.calls == 0
    model = ScriptedChatModel(replies=[ReasonedAnswer(reasoning="r", answer="basket")])
    out, _ = run_graph(ask.build(), inputs, SWMContext(llm=model), db, "t", "ask")
    assert out["answer"] == "basket" and model.calls == 1
