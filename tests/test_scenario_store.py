"""A scenario lives in the experience store once; the episode's state and rows carry its reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from test_episode_scripts import Responder, scenario

from bench.scenario_growth import big_scenario, measure_one
from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.context import SWMContext
from swm.errors import InputError
from swm.graphs.episode import build
from swm.nodes import env
from swm.social.export import episode_row
from swm.social.scenario_store import forget_cached, is_reference, put_scenario, reference, scenario_from
from swm.social.store import get_episode
from swm.testing import ScriptedChatModel

SIZE = 2_000_000  # characters of bulk: large against a checkpoint step (tens of KB), small enough to be quick
SLACK = 512 * 1024  # empty-table pages, a few KB per checkpoint step, PostgreSQL's TOAST headers


@pytest.mark.parametrize("where", ["scenario", "profile"])
def test_a_large_scenario_grows_the_database_by_one_copy(db_target: str | Path, where: str) -> None:
    # Passed by reference (as the CLI and the benchmark pass it), the store holds the one copy; a
    # second one anywhere (the state, the episode row, the opening scene, the world) makes 2x.
    # Before the scenario moved to the store, two turns grew SQLite by 19 copies.
    row = measure_one(db_target, big_scenario(SIZE, where), "ref", where, "test")
    bound = 1.5 * row.scenario_bytes + SLACK
    grown = [after - row.empty for after in row.after]
    assert all(g <= bound for g in grown), f"grew {[round(g / row.scenario_bytes, 2) for g in grown]} copies"


def test_an_inline_scenario_is_moved_to_the_store_before_the_first_turn(db_target: str | Path) -> None:
    # Inline (Studio, graph.invoke), the input's own checkpoints keep it (three copies, once);
    # no turn adds another. Before, each turn added about six.
    row = measure_one(db_target, big_scenario(SIZE), "inline", "scenario", "test")
    per_turn = [b - a for a, b in zip(row.after, row.after[1:], strict=False)]
    assert all(g <= 0.1 * row.scenario_bytes for g in per_turn), f"turns added {per_turn} bytes"
    assert row.after[-1] - row.empty <= 4.5 * row.scenario_bytes + SLACK


def play(tmp_path: Path, ctx: SWMContext, scenario_input: Any, thread: str = "t") -> tuple[dict[str, Any], Any]:
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    with sqlite_saver(tmp_path / "cp.db") as saver:
        graph = build().compile(checkpointer=saver)
        out = graph.invoke({"scenario": scenario_input, "episode_id": thread, "max_turns": 2, "judge": False},
                           config, context=ctx)
        return out, graph.get_state(config).values


def test_the_state_and_the_episode_row_carry_a_reference(tmp_path: Path) -> None:
    ctx = SWMContext(llm=ScriptedChatModel(respond=Responder()), store=ExperienceStore(tmp_path / "store.db"))
    lamp = scenario()
    out, state = play(tmp_path, ctx, lamp.model_dump())
    ref = reference(lamp)
    assert state["scenario"] == ref and is_reference(state["scenario"])
    assert (get_episode(ctx.store, out["episode_id"]) or {})["scenario"] == ref
    assert ctx.store.count("scenarios") == 1
    put_scenario(ctx.store, lamp)  # again: nothing more is written
    assert ctx.store.count("scenarios") == 1
    exported = episode_row(ctx.store, out["episode_id"])
    assert exported["scenario"] == lamp.scenario and [a["goal"] for a in exported["agents"]] == \
        [a.goal for a in lamp.agents]
    assert out["world"].steps[0].scene == lamp.scenario  # a short scenario is the opening scene whole


def test_without_a_store_of_its_own_the_scenario_stays_inline(tmp_path: Path) -> None:
    # the in-memory fallback dies with the process: a thread resumed elsewhere must still have it
    ctx = SWMContext(llm=ScriptedChatModel(respond=Responder()))
    out, state = play(tmp_path, ctx, scenario().model_dump())
    assert state["scenario"] == scenario().model_dump(mode="json") and out["turn"] == 2


def test_a_reference_the_store_lacks_is_one_clear_error(tmp_path: Path) -> None:
    store = ExperienceStore(tmp_path / "store.db")
    other = scenario(sid="not-stored")
    forget_cached()
    with pytest.raises(InputError, match="not-stored .* is not in the experience store"):
        scenario_from(store, reference(other))
    ctx = SWMContext(llm=ScriptedChatModel(respond=Responder()), store=store)
    with pytest.raises(InputError, match="is not in the experience store"):
        play(tmp_path, ctx, reference(other))


def test_a_huge_scenario_text_opens_the_world_cut_and_named(tmp_path: Path) -> None:
    ctx = SWMContext(llm=ScriptedChatModel(respond=Responder()), store=ExperienceStore(tmp_path / "store.db"))
    big = big_scenario(50_000)
    out, _ = play(tmp_path, ctx, put_scenario(ctx.store, big))
    scene = out["world"].steps[0].scene
    assert scene.startswith(big.scenario[:env.SCENE_CHARS]) and len(scene) < env.SCENE_CHARS + 200
    assert reference(big)["ref"] in scene
    prompt = ctx.llm.prompts[0][1]
    assert big.scenario in prompt  # the agents still read the whole scenario
