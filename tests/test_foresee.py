"""Foresee-and-Act: sample → predict → refine, exactly three calls a turn, and its fallbacks."""

from __future__ import annotations

from pathlib import Path

from test_episode_scripts import Responder, model, scenario

from checkpoints import ExperienceStore, sqlite_saver
from graphs.episode import build
from graphs.foresee_act import build as build_foresee
from swm.context import SWMContext
from swm.social.store import load_turns
from swm.testing import ScriptedChatModel


def run(tmp_path: Path, ctx: SWMContext, turns: int = 4) -> dict:
    with sqlite_saver(tmp_path / "cp.db") as saver:
        graph = build().compile(checkpointer=saver)
        return graph.invoke({"scenario": scenario().model_dump(), "episode_id": "e", "max_turns": turns,
                             "policies": {"Ann": "foresee"}, "judge": False},
                            {"configurable": {"thread_id": "e"}}, context=ctx)


def test_three_calls_per_foresee_turn_in_order(tmp_path: Path) -> None:
    agent, partner, world = model(), model(), model()
    ctx = SWMContext(chat_models={"agent": agent, "partner": partner, "world_model": world, "judge": model()},
                     store=ExperienceStore(tmp_path / "s.db"))
    out = run(tmp_path, ctx)
    assert [t for t, _ in agent.prompts] == ["AgentActionForModel"] * 4  # sample, refine × 2 turns
    assert world.calls == 2 and partner.calls == 2
    rows = load_turns(ctx.store, "e")
    assert [(r.agent, r.calls) for r in rows] == [("Ann", 3), ("Bob", 1), ("Ann", 3), ("Bob", 1)]
    assert {k: v["calls"] for k, v in out["usage"].items()} == {"sample": 2, "predict": 2, "refine": 2, "act": 2}
    first = rows[0]
    assert first.intended is not None and first.prediction is not None and first.fallback is None
    assert out["world"].steps[0].mental_states == {"Bob": "wary"}  # the world model's prediction, recorded
    refine_prompt = agent.prompts[1][1]
    assert "Here is your intended action:" in refine_prompt and "<mental_state>wary</mental_state>" in refine_prompt
    assert out["prompts"]["refine"] == "foresee_refine@v3" and out["prompts"]["predict"] == "foresee_predict@v3"


def test_subgraph_alone_has_the_three_nodes() -> None:
    assert set(build_foresee().nodes) == {"sample", "predict", "refine"}


def test_predict_failure_falls_back_to_the_intended_action(tmp_path: Path) -> None:
    llm = ScriptedChatModel(respond=Responder(fail={"Foresight": True}))
    ctx = SWMContext(llm=llm, store=ExperienceStore(tmp_path / "s.db"))
    run(tmp_path, ctx, turns=1)
    (row,) = load_turns(ctx.store, "e")
    assert row.calls == 2  # sample + predict; refine is skipped
    assert row.action == row.intended and row.action.action_type == "speak"
    assert row.fallback and row.fallback.startswith("predict step 1:") and "intended action" in row.fallback


def test_refine_failure_falls_back_to_the_intended_action(tmp_path: Path) -> None:
    llm = ScriptedChatModel(respond=Responder(fail={"AgentActionForModel": {2}}))  # the refine call
    ctx = SWMContext(llm=llm, store=ExperienceStore(tmp_path / "s.db"))
    run(tmp_path, ctx, turns=1)
    (row,) = load_turns(ctx.store, "e")
    assert row.calls == 3 and row.action == row.intended and row.action.argument == "line 0"
    assert row.fallback and row.fallback.startswith("refine:")


def test_sample_failure_is_recorded_never_a_silent_none(tmp_path: Path) -> None:
    llm = ScriptedChatModel(respond=Responder(fail={"AgentActionForModel": {1}}))  # the sample call
    ctx = SWMContext(llm=llm, store=ExperienceStore(tmp_path / "s.db"))
    run(tmp_path, ctx, turns=1)
    (row,) = load_turns(ctx.store, "e")
    # The text reply is salvaged as speech and the refine still runs; the problem is on the turn.
    assert row.intended is not None and row.intended.argument == "this is not a tool call"
    assert row.notes and "sample: reply did not fit" in row.notes
    assert row.calls == 3 and row.action.argument == "line 0"


def test_plain_act_failure_is_recorded(tmp_path: Path) -> None:
    llm = ScriptedChatModel(respond=Responder(fail={"AgentActionForModel": True}))
    ctx = SWMContext(llm=llm, store=ExperienceStore(tmp_path / "s.db"))
    with sqlite_saver(tmp_path / "cp.db") as saver:
        build().compile(checkpointer=saver).invoke(
            {"scenario": scenario().model_dump(), "episode_id": "p", "max_turns": 1, "judge": False},
            {"configurable": {"thread_id": "p"}}, context=ctx)
    (row,) = load_turns(ctx.store, "p")
    assert row.fallback and row.fallback.startswith("act:") and row.action.action_type == "speak"
