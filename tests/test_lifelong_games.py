"""Werewolf as a lifelong task family: a deal as a task, a code checker that replays the moves, the loop."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from games_scripted import decider, village_errs, village_finds_wolves

from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.context import SWMContext
from swm.games import Decision, Turn, play_game
from swm.graphs import lifelong
from swm.lifelong import store as ls
from swm.lifelong.game_bridge import game_inputs, game_to_record
from swm.lifelong.update import StrategyNotes
from swm.tasks.families import synthesize
from swm.tasks.splits import heldout
from swm.tasks.verify import check
from swm.testing import ScriptedChatModel, as_structured


def test_a_werewolf_task_is_a_seeded_deal_with_private_briefings() -> None:
    task = synthesize("werewolf", "medium", 3)
    assert task == synthesize("werewolf", "medium", 3) and len(task.agents) == 6
    truth = task.truth
    assert sorted(truth["roles"].values()).count("werewolf") == 2
    for brief in task.agents:
        assert brief.role == truth["roles"][brief.name] and brief.name in brief.private
        others = [b.name for b in task.agents if b.name != brief.name]
        if brief.role != "werewolf":
            assert not any(f"werewolves: {o}" in brief.private for o in others)
    assert [t.family for t in heldout(["easy"], ["werewolf"], 2)] == ["werewolf", "werewolf"]
    assert synthesize("werewolf", "hard", 0, split="heldout").task_id != synthesize("werewolf", "hard", 0).task_id


def _played(task: Any, decide: Any) -> Any:
    inputs = game_inputs(task, game_id="g")
    return play_game("werewolf", decide, seed=inputs["seed"], players=inputs["players"], options=inputs["options"])


def test_the_checker_replays_the_moves_and_reads_the_outcome_from_the_code() -> None:
    task = synthesize("werewolf", "medium", 1)
    won = game_to_record(task, _played(task, decider(village_finds_wolves)), episode_id="e1")
    assert won.verdict.completion and won.verdict.passed and won.verdict.detail["winner"] == "village"
    assert won.verdict.evidence and all(f'<data name="your name">\n{t.agent}\n' in t.prompt for t in won.turns)
    lost = game_to_record(task, _played(task, decider(village_errs)), episode_id="e2")
    assert not lost.verdict.completion and lost.verdict.detail["winner"] == "werewolves"
    # the first move's prompt is the same in both games: one state, two actions, as the action track pairs them
    assert won.turns[0].state_key == lost.turns[0].state_key


def test_the_checker_names_each_illegal_move() -> None:
    task = synthesize("werewolf", "medium", 2)

    def cheat(turn: Turn) -> Decision:
        if turn.request.phase == "day_vote":
            return Decision(target=turn.request.agent)  # oneself
        if turn.request.phase == "day_speak":
            return Decision(error="no tool call", text="")
        return decider(village_finds_wolves)(turn)

    game = _played(task, cheat)
    record = game_to_record(task, game, episode_id="e3")
    assert record.verdict.violations == ["malformed", "self_target"]
    # the checker, replaying from scratch, finds exactly the moves the live moderator flagged
    assert record.verdict.violation_turns == [i for i, m in enumerate(game.moves) if m.violation]
    assert {game.moves[i].phase for i in record.verdict.violation_turns} == {"day_speak", "day_vote"}
    assert check(task, record.turns) == record.verdict


def test_swm_learn_plays_werewolf_through_the_game_graph(tmp_path: Path) -> None:
    def respond(prompt: str, tool: str | None) -> Any:
        if tool == "StrategyNotes":
            return StrategyNotes(notes=["Vote with the seer."])
        assert tool == "GameMove", tool
        if "Your turn to speak" in prompt:
            return as_structured({"say": "I am a villager."}, "GameMove")
        found = re.search(r"Reply with the field `target`: one of ([^,.]+)", prompt)
        args = {"target": found.group(1).strip() if found else "none"}
        if "Add `say`" in prompt:
            args["say"] = "tonight"
        return as_structured(args, "GameMove")

    plan = {"cycles": 1, "levels": ["easy"], "families": ["werewolf"], "episodes_per_level": 2,
            "samples_per_task": 2, "max_turns": 2, "heldout_per_cell": 1, "run_id": "w1",
            "out_dir": str(tmp_path / "out")}
    store = ExperienceStore(tmp_path / "run.db")
    llm = ScriptedChatModel(respond=respond)
    with sqlite_saver(tmp_path / "run.db") as saver:
        out = lifelong.build().compile(checkpointer=saver).invoke(
            {"plan": plan}, {"configurable": {"thread_id": "w1"}, "recursion_limit": 1000},
            context=SWMContext(llm=llm, store=store))
    rows = list(store.rows("select family, phase, policy_version from lifelong_episodes"))
    assert {r["family"] for r in rows} == {"werewolf"}
    # p0 and the candidate p1 on one dev and one test deal each, and 2 collected games
    assert sorted((r["phase"], r["policy_version"]) for r in rows) == [
        ("collect", "p0"), ("collect", "p0"), ("dev", "p0"), ("dev", "p1"), ("test", "p0"), ("test", "p1")]
    assert ls.count_episodes(store, "w1") == 6
    assert store.count("game_moves") > 0 and {r["tool"] for r in [{"tool": t} for t, _ in llm.prompts]} <= {
        "GameMove", "StrategyNotes"}
    assert {c for c, _ in ls.matrix(store, "w1", "pass")} == {0, 1}
    assert "report_path" in out
