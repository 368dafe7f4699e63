"""Resume: an episode killed mid-turn continues at the turn (and node) where it stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from click.testing import CliRunner
from langchain_core.runnables import RunnableConfig
from test_episode_scripts import Responder, scenario

from swm.checkpoints import ExperienceStore, open_store, sqlite_saver
from swm.cli import main
from swm.context import SWMContext
from swm.graphs.episode import build
from swm.social.store import get_episode, load_turns
from swm.testing import ScriptedChatModel


class Crash(RuntimeError):
    pass


def crashing_model(at: int) -> ScriptedChatModel:
    """A scripted model whose call number ``at`` (1-based) raises once, as if the process died there."""
    responder = Responder()
    state = {"n": 0}

    def respond(prompt: str, tool: str | None) -> Any:
        state["n"] += 1
        if state["n"] == at:
            return Crash("killed")
        return responder(prompt, tool)

    return ScriptedChatModel(respond=respond)


def test_killed_episode_resumes_inside_the_turn(tmp_path: Path) -> None:
    # Ann: foresee (3 calls/turn), Bob: plain (1). 4 turns = 8 calls. Call 6 is turn 2's predict.
    llm = crashing_model(at=6)
    ctx = SWMContext(llm=llm, store=ExperienceStore(tmp_path / "store.db"))
    config: RunnableConfig = {"configurable": {"thread_id": "ep"}}
    inputs: dict[str, Any] = {"scenario": scenario().model_dump(), "episode_id": "ep", "policies": {"Ann": "foresee"},
              "max_turns": 4, "judge": False}
    with sqlite_saver(tmp_path / "cp.db") as saver:
        graph = build().compile(checkpointer=saver)
        try:
            graph.invoke(inputs, config, context=ctx)
        except Crash:
            pass
        else:  # pragma: no cover
            raise AssertionError("the scripted crash did not happen")
        assert [t.turn for t in load_turns(ctx.store, "ep")] == [0, 1]
        assert llm.calls == 6
    with sqlite_saver(tmp_path / "cp.db") as saver:  # a new process: new connection, same files
        graph = build().compile(checkpointer=saver)
        assert graph.get_state(config).next == ("foresee",)
        out = graph.invoke(None, config, context=ctx)
    # 8 calls needed + the one that crashed: turn 2's sample was not asked again, nor turns 0-1.
    assert llm.calls == 9
    tools = [t for t, _ in llm.prompts]
    assert tools[4:7] == ["AgentActionForModel", "Foresight", "Foresight"]
    assert out["turn"] == 4 and [t.turn for t in load_turns(ctx.store, "ep")] == [0, 1, 2, 3]
    assert [t.calls for t in load_turns(ctx.store, "ep")] == [3, 1, 3, 1]


def test_swm_play_resumes_with_db_and_thread_id(db_target: str | Path) -> None:
    db = db_target
    args = ["play", "--scenario", "swm-bike-sale", "--policy", "foresee", "--max-turns", "4", "--no-judge",
            "--db", str(db), "--thread-id", "T1"]
    llm = crashing_model(at=7)  # turn 2 (Nora, foresee): sample=5? no: 3+1 -> turn 2 calls are 5, 6, 7
    first = CliRunner().invoke(main, args, obj={"llm": llm})
    assert isinstance(first.exception, Crash)
    assert llm.calls == 7
    second = CliRunner().invoke(main, args, obj={"llm": llm})
    assert second.exit_code == 0, second.output
    assert "resuming thread T1" in second.output
    assert llm.calls == 9  # only turn 2's refine and turn 3's act were asked after the crash
    assert "Turn #3 Omar Haddad" in second.output
    store = open_store(db)
    assert (get_episode(store, "T1") or {})["status"] == "done"
    third = CliRunner().invoke(main, args, obj={"llm": llm})
    assert third.exit_code == 0 and "already finished" in third.output and llm.calls == 9
