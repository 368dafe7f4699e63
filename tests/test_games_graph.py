"""The game graph: what each seat's prompt holds, resume after kill -9 mid-night, and ``swm bench games``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from games_scripted import parse_prompt, responder, village_finds_wolves, wolves
from langchain_core.runnables import RunnableConfig

from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.cli import main
from swm.context import SWMContext
from swm.games import default_players, get_game
from swm.games.store import get_game_row, load_moves, load_world
from swm.graphs.game import build
from swm.testing import ScriptedChatModel

TESTS = Path(__file__).parent


def roles_for(seed: int, n: int = 6) -> dict[str, str]:
    return get_game("werewolf").deal(default_players(n), seed).roles


def play(seed: int, store: ExperienceStore, llm: ScriptedChatModel, **inputs: Any) -> dict[str, Any]:
    ctx = SWMContext(llm=llm, store=store)
    return dict(build().compile().invoke({"game_id": f"g{seed}", "seed": seed, **inputs}, context=ctx))


def test_each_prompt_holds_only_what_its_seat_could_see() -> None:
    seed = 2
    roles = roles_for(seed)
    llm = ScriptedChatModel(respond=responder(village_finds_wolves, roles))
    store = ExperienceStore(":memory:")
    out = play(seed, store, llm)
    assert out["outcome"]["winner"] == "village"
    pack = wolves(roles)
    seer = next(p for p, r in roles.items() if r == "seer")
    asked: dict[str, list[str]] = {}
    for tool, prompt in llm.prompts:
        assert tool == "GameMove"
        asked.setdefault(parse_prompt(prompt)[0], []).append(prompt)
    assert set(asked) <= set(roles) and seer in asked and set(pack) <= set(asked)
    assert any(roles[s] == "villager" for s in asked)
    for seat, texts in asked.items():
        for text in texts:
            assert f"Your secret role: {roles[seat]}." in text
            if seat in pack:
                continue
            assert "NIGHTMSG" not in text and "picked" not in text and "fellow werewolves" not in text
            for wolf in pack:
                assert f"{wolf} is a werewolf" not in text
            history = text.split("What you know and have seen so far", 1)[1].split("The moderator asks you:")[0]
            for line in history.splitlines():  # no line of its memory speaks of werewolves but its own vision
                if "werewolf" in line and not line.startswith(f"- You are {seat}. Your secret role"):
                    assert seat == seer and line.startswith("- Your vision:"), line
            if seat != seer:
                assert "Your vision" not in text
    seer_saw = "\n".join(asked[seer])
    assert "Your vision:" in seer_saw
    for wolf in pack:  # the pack sees each other's night messages
        other = next(w for w in pack if w != wolf)
        assert any(f"NIGHTMSG-{other}" in t for t in asked[wolf]) or other not in asked
    # the stored world agrees: a villager's perspective never holds a night pick or the seer's vision
    world = load_world(store, "g2")
    for seat in roles:
        memory = " ".join(e.observation for e in world.perspective(seat))
        if seat not in pack:
            assert "NIGHTMSG" not in memory
        if seat != seer:
            assert "Your vision" not in memory


def test_a_malformed_reply_is_a_recorded_violation_and_the_game_goes_on() -> None:
    seed = 0
    script = responder(village_finds_wolves, roles_for(seed))

    def respond(prompt: str, tool: str | None) -> Any:
        seat, phase, _ = parse_prompt(prompt)
        if phase == "day_vote" and seat == "Ava":
            return "I vote for whoever looks nervous"  # text, no tool call
        return script(prompt, tool)

    store = ExperienceStore(":memory:")
    out = play(seed, store, ScriptedChatModel(respond=respond))
    moves = load_moves(store, "g0")
    bad = [m for m in moves if m.violation]
    assert bad and all(m.agent == "Ava" and m.phase == "day_vote" and m.violation == "malformed" for m in bad)
    assert all(m.target is None and "abstained" in (m.fallback or "") for m in bad)
    assert out["usage"]["act"]["failures"] == len(bad)
    assert out["per_role"]["Ava"]["side"] == "village"
    assert (get_game_row(store, "g0") or {})["status"] == "done"


def test_a_game_killed_in_the_middle_of_a_night_resumes_at_that_move(tmp_path: Path) -> None:
    seed, kill_at = 2, 16  # night 2 (one werewolf left): call 15 is its pick, call 16 the seer's check
    db = tmp_path / "game.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    proc = subprocess.run([sys.executable, str(TESTS / "games_scripted.py"), str(db), "T", str(kill_at), str(seed)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    store = ExperienceStore(db)
    before = load_moves(store, "T")
    assert len(before) == kill_at - 1 and before[-1].phase == "night_wolves" and before[-1].round == 2
    config: RunnableConfig = {"configurable": {"thread_id": "T"}}
    roles = roles_for(seed)
    llm = ScriptedChatModel(respond=responder(village_finds_wolves, roles))
    with sqlite_saver(db) as saver:
        graph = build().compile(checkpointer=saver)
        snapshot = graph.get_state(config)
        assert snapshot.next == ("act",) and snapshot.values["game_state"]["phase"] == "night_seer"
        out = graph.invoke(None, config, context=SWMContext(llm=llm, store=store), durability="sync")
    after = load_moves(store, "T")
    reference_store = ExperienceStore(":memory:")
    reference = play(seed, reference_store, ScriptedChatModel(respond=responder(village_finds_wolves, roles)))
    expected = load_moves(reference_store, "g2")
    assert [m.turn for m in after] == list(range(len(expected)))
    assert [(m.agent, m.target, m.text, m.prompt) for m in after] == [(m.agent, m.target, m.text, m.prompt)
                                                                      for m in expected]
    assert llm.calls == len(expected) - (kill_at - 1)  # the killed call is asked again, nothing before it
    assert parse_prompt(llm.prompts[0][1])[1] == "night_seer"
    assert out["outcome"] == reference["outcome"]


def test_bench_games_writes_the_table_and_resumes_by_thread(tmp_path: Path) -> None:
    db, out_dir = tmp_path / "bench.db", tmp_path / "out"
    llm = ScriptedChatModel(respond=responder(village_finds_wolves, roles_for(0)))  # game 0 uses seed 0
    args = ["bench", "games", "--n", "1", "--policies", "plain,random", "--db", str(db), "--thread-id", "B",
            "--out", str(out_dir), "--no-progress", "--json"]
    first = CliRunner().invoke(main, args, obj={"llm": llm})
    assert first.exit_code == 0, first.output
    calls = llm.calls
    assert calls > 0
    table = json.loads((out_dir / "games.json").read_text())["table"]
    plain = next(r for r in table if r["policy"] == "plain")["metrics"]
    assert plain["games"] == 1 and plain["wins"]["village"]["hits"] == 1
    assert plain["vote_accuracy"]["rate"] == 1.0 and plain["illegal_rate"]["rate"] == 0.0
    assert plain["calls_per_game"]["mean"] == calls and plain["tokens_per_game"]["mean"] > calls
    random_row = next(r for r in table if r["policy"] == "random")["metrics"]
    assert random_row["games"] == 1 and random_row["calls_per_game"]["mean"] == 0
    assert "village win [95% CI]" in (out_dir / "games.md").read_text()
    assert len((out_dir / "games.jsonl").read_text().splitlines()) == 2
    second = CliRunner().invoke(main, args, obj={"llm": llm})
    assert second.exit_code == 0 and "skipped 2 finished" in second.output and llm.calls == calls


def test_bench_games_refuses_bad_input_in_one_line() -> None:
    for extra, message in ((["--policies", "smart"], "unknown policy"), (["--players", "4"], "5 to 8 players"),
                           (["--side", "wolves"], "unknown side"), (["--game", "chess"], "unknown game")):
        result = CliRunner().invoke(main, ["bench", "games", "--n", "1", *extra])
        assert result.exit_code == 2 and message in result.output, result.output


def test_fixed_opponents_a_side_on_its_own_model_or_on_the_random_baseline() -> None:
    seed = 1
    roles = roles_for(seed)
    village = ScriptedChatModel(respond=responder(village_finds_wolves, roles))
    pack = ScriptedChatModel(respond=responder(village_finds_wolves, roles))
    store = ExperienceStore(":memory:")
    ctx = SWMContext(chat_models={"agent": village, "partner": pack}, store=store)
    out = dict(build().compile().invoke({"game_id": "f", "seed": seed, "tested_side": "village"}, context=ctx))
    assert out["outcome"]["winner"] == "village"
    assert {roles[parse_prompt(p)[0]] == "werewolf" for _, p in village.prompts} == {False}
    assert {roles[parse_prompt(p)[0]] == "werewolf" for _, p in pack.prompts} == {True}
    assert set(out["models"]) == {"agent", "partner"}
    # the werewolves on the code baseline: no call for their seats, their moves marked random
    baseline = ScriptedChatModel(respond=responder(village_finds_wolves, roles))
    out = dict(build().compile().invoke({"game_id": "r", "seed": seed, "policies": {"werewolves": "random"}},
                                        context=SWMContext(llm=baseline, store=store)))
    moves = load_moves(store, "r")
    assert {m.policy for m in moves if m.side == "werewolves"} == {"random"}
    assert all(m.calls == 0 for m in moves if m.side == "werewolves")
    assert baseline.calls == sum(m.calls for m in moves) == sum(1 for m in moves if m.side == "village")
