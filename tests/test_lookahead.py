"""Rollouts: N candidates × k simulated steps; the call formula; N=1, k=1 is Foresee-and-Act."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig
from test_episode_scripts import Responder, model, scenario

from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.context import SWMContext
from swm.graphs.episode import build
from swm.graphs.lookahead import calls_per_turn
from swm.social.schemas import FutureScore
from swm.social.store import load_turns
from swm.testing import ScriptedChatModel


def run(tmp_path: Path, ctx: SWMContext, policy: str, turns: int = 1) -> dict:
    with sqlite_saver(tmp_path / f"cp-{policy}.db") as saver:
        graph = build().compile(checkpointer=saver)
        return graph.invoke({"scenario": scenario().model_dump(), "episode_id": policy, "max_turns": turns,
                             "policies": {"Ann": policy}, "judge": False},
                            {"configurable": {"thread_id": policy}}, context=ctx)


@pytest.mark.parametrize(("width", "depth"), [(1, 1), (1, 3), (2, 1), (3, 2), (4, 3)])
def test_call_shape_is_n_plus_nk_plus_scores_plus_refine(tmp_path: Path, width: int, depth: int) -> None:
    models = {role: model() for role in ("agent", "partner", "world_model", "judge")}
    ctx = SWMContext(chat_models=models, lookahead_width=width, lookahead_depth=depth,
                     store=ExperienceStore(tmp_path / "s.db"))
    out = run(tmp_path, ctx, "lookahead")
    assert models["agent"].calls == width + 1  # N samples + 1 refine
    assert models["world_model"].calls == width * depth  # N × k simulated steps
    assert models["judge"].calls == (width if width > 1 else 0)  # each future judged when there is a choice
    (row,) = load_turns(ctx.store, "lookahead")
    assert row.calls == calls_per_turn(width, depth) == width + width * depth + (width if width > 1 else 0) + 1
    assert {k: v["calls"] for k, v in out["usage"].items() if k != "act"} == {
        "sample": width, "simulate": width * depth, "refine": 1, **({"score": width} if width > 1 else {})}
    if width > 1:
        assert row.candidates is not None and len(__import__("json").loads(row.candidates)) == width


def test_width_one_depth_one_is_exactly_foresee_and_act(tmp_path: Path) -> None:
    prompts = {}
    for policy in ("foresee", "lookahead"):
        llm = model()
        ctx = SWMContext(llm=llm, lookahead_width=1, lookahead_depth=1,
                         store=ExperienceStore(tmp_path / f"{policy}.db"))
        run(tmp_path, ctx, policy, turns=3)
        prompts[policy] = llm.prompts
        assert [r.calls for r in load_turns(ctx.store, policy)] == [3, 1, 3]
    assert prompts["foresee"] == prompts["lookahead"]  # same calls, same prompts, same order


def test_best_scored_candidate_is_refined(tmp_path: Path) -> None:
    base = Responder()
    judged = iter([2, 9, 4])

    def respond(prompt: str, tool: str | None):  # type: ignore[no-untyped-def]
        if tool == "FutureScore":
            return FutureScore(reasoning="r", goal_progress=next(judged))
        return base(prompt, tool)

    ctx = SWMContext(llm=ScriptedChatModel(respond=respond), lookahead_width=3, lookahead_depth=1,
                     store=ExperienceStore(tmp_path / "s.db"))
    run(tmp_path, ctx, "lookahead")
    (row,) = load_turns(ctx.store, "lookahead")
    import json

    candidates = json.loads(row.candidates or "[]")
    best = max(candidates, key=lambda c: c["score"]["goal_progress"])
    assert row.intended is not None and row.intended.model_dump() == best["action"]


def test_failed_simulation_is_recorded_and_ranked_last(tmp_path: Path) -> None:
    llm = ScriptedChatModel(respond=Responder(fail={"Foresight": True}))
    ctx = SWMContext(llm=llm, lookahead_width=2, lookahead_depth=2, store=ExperienceStore(tmp_path / "s.db"))
    run(tmp_path, ctx, "lookahead")
    (row,) = load_turns(ctx.store, "lookahead")
    # 2 samples + 2 failed first steps (the second steps are never asked) + 2 scores; refine skipped.
    assert row.calls == 6
    assert row.fallback and "predict step 1" in row.fallback and row.action == row.intended


def test_killed_lookahead_resumes_without_resampling(tmp_path: Path) -> None:
    """A crash in the simulate fan-out: the finished samples (and finished branches) are not asked again."""
    base = Responder()
    seen = {"Foresight": 0}

    def respond(prompt: str, tool: str | None):  # type: ignore[no-untyped-def]
        if tool == "Foresight":
            seen["Foresight"] += 1
            if seen["Foresight"] == 2:
                return RuntimeError("killed mid-simulation")
        return base(prompt, tool)

    llm = ScriptedChatModel(respond=respond)
    ctx = SWMContext(llm=llm, lookahead_width=3, lookahead_depth=1, store=ExperienceStore(tmp_path / "s.db"))
    config: RunnableConfig = {"configurable": {"thread_id": "r"}}
    inputs = {"scenario": scenario().model_dump(), "episode_id": "r", "max_turns": 1, "policies": {"Ann": "lookahead"},
              "judge": False}
    with sqlite_saver(tmp_path / "cp.db") as saver:
        graph = build().compile(checkpointer=saver)
        with pytest.raises(RuntimeError):
            graph.invoke(inputs, config, context=ctx)
        out = graph.invoke(None, config, context=ctx)
    tools = [t for t, _ in llm.prompts]
    assert tools.count("AgentActionForModel") == 3 + 1  # 3 samples once each, then the refine
    assert 3 + 1 <= tools.count("Foresight") <= 3 + 1 + 2  # the crashed branch again (+ any cut short)
    assert tools.count("FutureScore") == 3 and out["turn"] == 1
