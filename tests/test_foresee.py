"""Foresee-and-Act: sample → predict → refine, exactly three calls a turn, and its fallbacks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_episode_scripts import Responder, model, scenario

from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.context import SWMContext
from swm.graphs.episode import build
from swm.graphs.foresee_act import build as build_foresee
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


@pytest.mark.parametrize("order", ["sotopia", "prefix"])
def test_in_prefix_order_predict_and_refine_put_the_conversation_last(tmp_path: Path, order: str) -> None:
    """``act_order="prefix"`` orders Foresee-and-Act's per-turn prompts for a prefix cache too: a seat's next predict
    and refine prompts repeat its last ones up to the conversation, the fixed instructions and format before it."""
    agent, partner, world = model(), model(), model()
    ctx = SWMContext(chat_models={"agent": agent, "partner": partner, "world_model": world, "judge": model()},
                     store=ExperienceStore(tmp_path / "s.db"), act_order=order)  # type: ignore[arg-type]
    out = run(tmp_path, ctx, turns=4)
    predicts = [p for _, p in world.prompts]
    refines = [p for kind, p in agent.prompts if "Here is your intended action:" in p]
    assert len(predicts) == 2 and len(refines) == 2
    for prompts_, fixed in ((predicts, "Predict the next social world state."),
                            (refines, "Your action should follow the given format:")):
        last, this = prompts_
        new = this[len(os.path.commonprefix([last, this])):]
        assert (fixed in new) == (order == "sotopia"), new[:300]
        assert "Bob" in new, "the turns since the seat's last prompt are what is new"
    suffix = "" if order == "sotopia" else "_prefix"
    version = "v3" if order == "sotopia" else "v1"
    assert out["prompts"]["predict"] == f"foresee_predict{suffix}@{version}"
    assert out["prompts"]["refine"] == f"foresee_refine{suffix}@{version}"


def test_the_two_orders_of_predict_and_refine_hold_the_same_lines() -> None:
    from swm.prompts import load

    for name in ("foresee_predict", "foresee_refine"):
        sotopia, prefix = load(name, "v3").text, load(f"{name}_prefix", "v1").text
        assert sorted(line for line in sotopia.splitlines() if line.strip()) == \
            sorted(line for line in prefix.splitlines() if line.strip()), name
