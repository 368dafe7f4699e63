"""Werewolf's per-role signals from the moderator's record: hand-built games whose numbers are computed by hand."""

from __future__ import annotations

import math
from typing import Any

import pytest
from games_scripted import decider, village_finds_wolves

from swm.games import GameRecord, MoveRecord, Outcome, get_game, play_game
from swm.games.metrics import summarise_games
from swm.games.signals import game_signals, games_for_half_width, summarise_signals, units_for_half_width
from swm.selfplay.game_rollout import play_game_rollout
from swm.state import SocialStep
from swm.stats import wilson_interval
from swm.training.trajectory import Generation

PLAYERS = ["Ava", "Ben", "Cara", "Dev", "Eli"]
ROLES = {"Ava": "werewolf", "Ben": "seer", "Cara": "villager", "Dev": "villager", "Eli": "villager"}


def game(moves: list[tuple[Any, ...]], winner: str, last_round: int) -> GameRecord:
    """A record from (round, phase, agent, options, target, violation, text, events) per move."""
    rows = []
    for i, (rnd, phase, agent, options, target, violation, text, events) in enumerate(moves):
        kind = "speak" if phase == "day_speak" else "choose"
        rows.append(MoveRecord(turn=i, round=rnd, phase=phase, agent=agent, role=ROLES[agent],
                               side="werewolves" if ROLES[agent] == "werewolf" else "village", kind=kind,
                               options=options, allow_abstain=phase == "day_vote", target=target, text=text,
                               violation=violation, events=events))
    sides = {p: "werewolves" if r == "werewolf" else "village" for p, r in ROLES.items()}
    return GameRecord(game="werewolf", seed=0, players=PLAYERS, roles=ROLES, sides=sides,
                      briefing=SocialStep(timestep="setup", scene="", observations={}, actions={}), moves=rows,
                      outcome=Outcome(winner=winner, reason="", round=last_round, sides=sides, roles=ROLES))


def others(alive: list[str], seat: str) -> list[str]:
    return [p for p in alive if p != seat]


def speeches(rnd: int, alive: list[str], said: dict[str, str] | None = None) -> list[tuple[Any, ...]]:
    return [(rnd, "day_speak", p, [], None, None, (said or {}).get(p, "Hello."), {}) for p in alive]


def drawn_game() -> GameRecord:
    """Round 1: the wolf kills Cara, the seer finds Ava and says so, the village votes out Ben (the seer); Dev's vote
    names no player. Round 2: the wolf picks itself (illegal), the vote ties, the game is a draw after two rounds."""
    a1 = ["Ava", "Ben", "Dev", "Eli"]
    a2 = ["Ava", "Dev", "Eli"]
    return game([
        (1, "night_wolves", "Ava", ["Ben", "Cara", "Dev", "Eli"], "Cara", None, "", {}),
        (1, "night_seer", "Ben", ["Ava", "Cara", "Dev", "Eli"], "Ava", None, "",
         {"checked": "Ava", "is_werewolf": True, "killed": "Cara"}),
        *speeches(1, a1, {"Ben": "I am the seer: ava is a werewolf!"}),
        (1, "day_vote", "Ava", others(a1, "Ava"), "Ben", None, "", {}),
        (1, "day_vote", "Ben", others(a1, "Ben"), "Ava", None, "", {}),
        (1, "day_vote", "Dev", others(a1, "Dev"), None, "no_such_player", "", {}),
        (1, "day_vote", "Eli", others(a1, "Eli"), "Ben", None, "", {"eliminated": "Ben"}),
        (2, "night_wolves", "Ava", ["Dev", "Eli"], None, "self_target", "", {"killed": None}),
        *speeches(2, a2),
        (2, "day_vote", "Ava", others(a2, "Ava"), "Dev", None, "", {}),
        (2, "day_vote", "Dev", others(a2, "Dev"), "Ava", None, "", {}),
        (2, "day_vote", "Eli", others(a2, "Eli"), None, None, "", {"eliminated": None}),
    ], "draw", 2)


def village_game() -> GameRecord:
    """Round 1: the wolf kills Dev, the seer checks Cara (no werewolf), the village votes the wolf out."""
    a1 = ["Ava", "Ben", "Cara", "Eli"]
    return game([
        (1, "night_wolves", "Ava", ["Ben", "Cara", "Dev", "Eli"], "Dev", None, "", {}),
        (1, "night_seer", "Ben", ["Ava", "Cara", "Dev", "Eli"], "Cara", None, "",
         {"checked": "Cara", "is_werewolf": False, "killed": "Dev"}),
        *speeches(1, a1, {"Ben": "Cara is fine, and Ava is quiet."}),
        (1, "day_vote", "Ava", others(a1, "Ava"), "Ben", None, "", {}),
        (1, "day_vote", "Ben", others(a1, "Ben"), "Ava", None, "", {}),
        (1, "day_vote", "Cara", others(a1, "Cara"), "Ava", None, "", {}),
        (1, "day_vote", "Eli", others(a1, "Eli"), "Ava", None, "", {"eliminated": "Ava"}),
    ], "village", 1)


def test_one_games_signals_by_hand() -> None:
    s = game_signals(drawn_game())
    # choose moves: the wolf's two picks and two votes (one pick illegal), the seer's check and vote, four villager
    # votes (Dev's first illegal, Eli's last an abstention: legal); speeches are not counted
    assert s["moves"] == {"werewolf": 4, "seer": 2, "doctor": 0, "villager": 4}
    assert s["legal"] == {"werewolf": 3, "seer": 2, "doctor": 0, "villager": 3}
    # the village's cast votes: Ben → Ava (1 wolf of 3 options), Eli → Ben (1 of 3), Dev → Ava (1 of 2)
    # five village vote moves: Ben's, Dev's (illegal), Eli's, Dev's, Eli's (an abstention); three cast
    assert (s["ballots"], s["votes"], s["vote_hits"]) == (5, 3, 2)
    assert s["vote_chance"] == pytest.approx(1 / 3 + 1 / 3 + 1 / 2)
    assert s["vote_chance_var"] == pytest.approx(2 * (1 / 3) * (2 / 3) + 1 / 4)
    assert (s["checks"], s["check_hits"], s["check_chance"]) == (1, 1, 0.25)
    # one seer speech while it knew a living werewolf, naming it (case aside); Ben is dead on day 2
    assert (s["seer_speeches"], s["seer_reveals"]) == (1, 1)
    assert (s["wolf_rounds"], s["wolf_alive"], s["winner"]) == ([2], [True], "draw")
    v = game_signals(village_game())
    assert (v["votes"], v["vote_hits"], v["vote_chance"]) == (3, 3, pytest.approx(1.0))
    assert (v["checks"], v["check_hits"], v["seer_speeches"]) == (1, 0, 0)
    assert (v["wolf_rounds"], v["wolf_alive"], v["winner"]) == ([0], [False], "village")


def test_pooled_signals_and_their_intervals_by_hand() -> None:
    out = summarise_signals([game_signals(drawn_game()), game_signals(village_game())])
    assert out["games"] == 2
    assert (out["wins"]["village"]["rate"], out["wins"]["werewolves"]["rate"], out["draws"]["rate"]) == (0.5, 0, 0.5)
    legal = out["legal"]
    assert (legal["all"]["hits"], legal["all"]["n"]) == (14, 16) and "doctor" not in legal
    assert (legal["werewolf"]["hits"], legal["werewolf"]["n"], legal["villager"]["n"]) == (5, 6, 6)
    # Wilson at 5/6, by hand: centre (p + z²/2n)/(1 + z²/n) = 0.7032, spread 0.2667
    assert legal["werewolf"]["ci95"] == pytest.approx([0.4365, 0.9699], abs=1e-3)
    assert legal["werewolf"]["half"] == pytest.approx(0.2667, abs=1e-3)
    votes = out["village_votes"]
    assert (votes["hits"], votes["n"]) == (5, 6) and (out["village_cast"]["hits"], out["village_cast"]["n"]) == (6, 8)
    assert votes["chance"] == pytest.approx((7 / 6 + 1) / 6)  # 13/36: the expected hits of uniform voters
    assert votes["z"] == pytest.approx((5 - 13 / 6) / math.sqrt(25 / 36 + 2 / 3))  # 17/7
    assert list(votes["ci95"]) == [round(x, 4) for x in wilson_interval(5, 6)]
    assert (out["seer_checks"]["rate"], out["seer_checks"]["chance"]) == (0.5, 0.25)
    assert (out["seer_reveals"]["hits"], out["seer_reveals"]["n"]) == (1, 1)
    assert (out["wolf_survived"]["rate"], out["wolf_survived"]["n"]) == (0.5, 2)
    rounds = out["wolf_rounds"]  # [2, 0]: mean 1, t(1) · √2 / √2
    assert (rounds["mean"], rounds["n"]) == (1.0, 2) and rounds["ci95"] == pytest.approx(12.706)
    assert out["per_game"]["legal moves"] == 8.0 and out["per_game"]["village votes"] == 3.0


def test_the_games_an_interval_of_0_2_needs() -> None:
    # the widest Wilson interval is at rate ½: half-width 0.2008 at n = 20, 0.1967 at 21
    assert units_for_half_width(0.2) == 21 and units_for_half_width(0.1) == 93
    out = summarise_signals([game_signals(drawn_game()), game_signals(village_game())])
    need = games_for_half_width(out, 0.2)
    assert need["legal moves"] == 3 and need["village votes"] == 7 and need["games"] == 21
    assert need["werewolves"] == 21 and need["seer reveals"] == 42
    empty = summarise_signals([])
    assert empty["games"] == 0 and empty["legal"]["all"]["rate"] is None and empty["village_votes"]["z"] is None


def test_the_signals_agree_with_the_game_benchmarks_metrics() -> None:
    records = [play_game("werewolf", decider(village_finds_wolves), seed=s, n_players=n, options={"max_rounds": 3})
               for s, n in ((1, 5), (2, 6), (3, 8))]
    ours = summarise_signals(game_signals(r) for r in records)
    theirs = summarise_games(records, ["village", "werewolves"])
    assert ours["village_votes"]["n"] == theirs["vote_accuracy"]["n"] > 0
    assert ours["village_votes"]["rate"] == theirs["vote_accuracy"]["rate"] == 1.0
    assert ours["village_votes"]["chance"] == pytest.approx(theirs["vote_accuracy"]["chance"])
    assert ours["seer_checks"]["rate"] == theirs["seer_hit_rate"]["rate"]
    assert ours["legal"]["all"]["rate"] == 1.0 and ours["wins"]["village"]["rate"] == 1.0


def test_werewolfs_row_declares_these_signals() -> None:
    """Self-play reads a game's signals from its row: Werewolf's count and pool as this module's functions."""
    werewolf, counts = get_game("werewolf"), [game_signals(drawn_game()), game_signals(village_game())]
    assert [werewolf.signals(r) for r in (drawn_game(), village_game())] == counts
    assert werewolf.pool_signals(counts) == summarise_signals(counts)


class Silent:
    """Says a line; names nobody at a choice, so every night pick is illegal and every vote an abstention."""

    def generate(self, prompt: str) -> Generation:
        return Generation(text="I pick nobody at all", prompt_ids=[1], token_ids=[5], logprobs=[-0.5])


def test_a_self_play_rollout_keeps_the_games_signals() -> None:
    rollout = play_game_rollout("werewolf", Silent(), seed=3, players=5, options={"max_rounds": 2},
                                rollout_id="w/g0", task_id="werewolf:train:3", iteration=0, sample=0, illegal="filter")
    assert rollout.verdict is not None
    signals = rollout.verdict["signals"]
    assert isinstance(signals, dict)
    illegal = len(rollout.verdict["violation_turns"])
    chosen = sum(signals["moves"].values())
    assert illegal > 0 and sum(signals["legal"].values()) == chosen - illegal
    assert signals["votes"] == 0 and signals["winner"] == "draw" and signals["wolf_alive"] == [True]
