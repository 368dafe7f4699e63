"""Werewolf's rules, decided by code: scripted games with known outcomes, ties, illegal moves, metrics."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from games_scripted import decider, village_errs, village_finds_wolves, wolves

from swm.errors import InputError
from swm.games import Decision, GameRecord, Turn, get_game, play_game, random_decider
from swm.games.metrics import summarise_games
from swm.games.werewolf import night_victim, vote_result

SIDES = ["village", "werewolves"]


def eliminated(record: GameRecord) -> list[str]:
    return [m.events["eliminated"] for m in record.moves if m.events.get("eliminated")]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_village_wins_when_it_votes_out_both_werewolves(seed: int) -> None:
    record = play_game("werewolf", decider(village_finds_wolves), seed=seed, n_players=6)
    assert record.outcome is not None
    assert (record.outcome.winner, record.outcome.reason) == ("village", "every werewolf is dead")
    assert sorted(eliminated(record)) == sorted(wolves(record.roles))
    assert not any(m.violation for m in record.moves)
    rewards = record.rewards()
    assert all(rewards[p] == (1.0 if record.sides[p] == "village" else -1.0) for p in record.players)
    per_role = record.outcome.per_role()
    assert {v["role"] for v in per_role.values() if v["won"]} >= {"seer", "villager"}


def test_the_werewolves_win_when_the_village_eliminates_its_own() -> None:
    record = play_game("werewolf", decider(village_errs), seed=4, n_players=6)
    assert record.outcome is not None
    assert record.outcome.winner == "werewolves"
    assert eliminated(record) and not set(eliminated(record)) & set(wolves(record.roles))
    killed = [m.events["killed"] for m in record.moves if m.events.get("killed")]
    # 6 seats: the game ends as soon as the 2 werewolves face 2 others
    assert len(killed) + len(eliminated(record)) == 2
    assert record.moves[-1].step.count("the werewolves win") >= 1


def test_a_tied_vote_eliminates_nobody_and_the_game_goes_on() -> None:
    def tie(turn: Turn) -> Decision:
        r = turn.request
        if r.phase != "day_vote":
            return decider(village_finds_wolves)(turn)
        first, second = turn.state.alive[0], turn.state.alive[1]
        if r.agent == first:
            return Decision(target=second)
        if r.agent == second:
            return Decision(target=first)
        return Decision(target=None)  # abstain (legal in a vote)

    record = play_game("werewolf", tie, seed=0, n_players=6, options={"max_rounds": 2})
    assert eliminated(record) == []
    tallies = [m for m in record.moves if "vote(s)" in m.step]
    assert tallies and all("Tie at 1 vote(s): nobody is eliminated." in m.step for m in tallies)
    assert len(tallies) == 2  # both days were played: the tie did not end the game
    # seed 0: the doctor protects itself and is the werewolves' pick, so nobody ever dies
    assert record.outcome is not None and (record.outcome.winner, record.outcome.round) == ("draw", 2)


def test_round_limit_is_a_draw_and_illegal_picks_are_fallbacks() -> None:
    def stubborn(turn: Turn) -> Decision:
        r, roles = turn.request, turn.state.roles
        if r.phase == "night_wolves":  # a werewolf picking a werewolf: illegal, no pick
            return Decision(target=next(w for w in wolves(roles) if w != r.agent), text="x")
        if r.phase == "night_seer":
            return Decision(target="Zed")  # no such player
        if r.phase == "day_vote":
            return Decision(target=r.agent)  # oneself: illegal in a vote
        if r.phase == "night_doctor":
            return Decision(target=None)  # a doctor must choose
        return Decision(error="the reply did not match the schema", text="")  # a malformed speech: silence

    record = play_game("werewolf", stubborn, seed=1, n_players=6, options={"max_rounds": 2})
    assert record.outcome is not None and record.outcome.winner == "draw"
    codes = {m.phase: m.violation for m in record.moves}
    assert codes == {"night_wolves": "teammate_target", "night_seer": "no_such_player",
                     "night_doctor": "missing_target", "day_speak": "malformed", "day_vote": "self_target"}
    assert all(m.fallback and m.target is None for m in record.moves)
    assert all("nobody was killed" in m.step for m in record.moves if m.phase == "night_doctor")
    metrics = summarise_games([record], SIDES)
    assert metrics["illegal_rate"]["rate"] == 1.0 and metrics["draws"]["hits"] == 1


def test_dead_targets_are_violations_and_a_malformed_speech_keeps_its_text() -> None:
    def decide(turn: Turn) -> Decision:
        r = turn.request
        dead = [p for p in turn.state.players if p not in turn.state.alive]
        if r.phase == "night_seer" and dead:
            return Decision(target=dead[0])
        if r.phase == "day_speak":
            return Decision(error="the model answered in text instead of calling the schema tool", text="hello all")
        return decider(village_finds_wolves)(turn)

    record = play_game("werewolf", decide, seed=0, n_players=6)
    seer_moves = [m for m in record.moves if m.phase == "night_seer" and m.round > 1]
    assert seer_moves and all(m.violation == "dead_target" for m in seer_moves)
    speeches = [m for m in record.moves if m.phase == "day_speak"]
    assert all(m.violation == "malformed" and m.text == "hello all" for m in speeches)


def test_the_wolves_tie_goes_to_the_earliest_pick_and_votes_need_a_majority() -> None:
    assert night_victim({"W1": "Ava", "W2": "Ben"}) == "Ava"
    assert night_victim({"W1": "Ava", "W2": "Ben", "W3": "Ben"}) == "Ben"
    assert night_victim({}) is None
    assert vote_result({"a": "X", "b": "Y", "c": None}) == (None, 1)
    assert vote_result({"a": "X", "b": "X", "c": "Y"}) == ("X", 2)
    assert vote_result({"a": None}) == (None, 0)


def test_deals_are_seeded_and_checked() -> None:
    game = get_game("werewolf")
    players = ["A", "B", "C", "D", "E", "F", "G", "H"]
    assert game.deal(players, 7).roles == game.deal(players, 7).roles
    assert sorted(game.deal(players[:5], 1).roles.values()) == ["seer", "villager", "villager", "villager", "werewolf"]
    assert sorted(game.deal(players, 1).roles.values()).count("werewolf") == 2
    with pytest.raises(InputError, match="5 to 8 players"):
        game.deal(players[:4], 0)
    with pytest.raises(InputError, match="unknown werewolf options"):
        game.deal(players, 0, {"wolves": 3})
    with pytest.raises(InputError, match="do not fit"):
        game.deal(players[:5], 0, {"werewolves": 3})
    with pytest.raises(InputError, match="unknown game"):
        get_game("chess")


def test_random_baseline_metrics_sit_at_chance() -> None:
    records = [play_game("werewolf", random_decider(i), seed=i, n_players=6) for i in range(60)]
    m = summarise_games(records, SIDES)
    assert m["games"] == 60 and m["illegal_rate"]["n"] == 0
    assert m["wins"]["village"]["hits"] + m["wins"]["werewolves"]["hits"] + m["draws"]["hits"] == 60
    lo, hi = m["vote_accuracy"]["ci95"]
    assert lo <= m["vote_accuracy"]["chance"] <= hi
    assert m["calls_per_game"]["mean"] == 0 and m["turns_per_game"]["mean"] > 10


def _quiet_village(checks: list[str]) -> Callable[[Turn], Decision]:
    """Wolves take the first villager, the seer checks ``checks`` in order, the doctor guards itself, nobody votes."""
    def strategy(seat: str, phase: str, options: list[str], roles: dict[str, str]) -> tuple[str | None, str]:
        if phase == "night_wolves":
            return next(o for o in options if roles[o] == "villager"), ""
        if phase == "night_seer":
            return checks.pop(0) if checks else None, ""
        if phase == "night_doctor":
            return seat, ""
        return None, "" if phase == "day_vote" else "I have nothing to say."
    return decider(strategy)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_seer_learns_the_true_side_of_the_player_it_checks(seed: int) -> None:
    roles = get_game("werewolf").deal(["P1", "P2", "P3", "P4", "P5", "P6"], seed).roles
    wolf = next(p for p, r in roles.items() if r == "werewolf")
    villager = next(p for p, r in roles.items() if r == "doctor")  # the doctor guards itself: it lives
    record = play_game("werewolf", _quiet_village([wolf, villager]), seed=seed, players=list(roles),
                       options={"max_rounds": 2})
    visions = [(m.events["checked"], m.events["is_werewolf"], m.social_step().observations[m.agent])
               for m in record.moves if m.phase == "night_seer" and "checked" in m.events]
    assert visions == [(wolf, True, f"Your vision: {wolf} is a werewolf."),
                       (villager, False, f"Your vision: {villager} is not a werewolf.")]


def test_the_seer_cannot_check_itself() -> None:
    roles = get_game("werewolf").deal(["P1", "P2", "P3", "P4", "P5", "P6"], 0).roles
    seer = next(p for p, r in roles.items() if r == "seer")
    record = play_game("werewolf", _quiet_village([seer]), seed=0, players=list(roles), options={"max_rounds": 1})
    (move,) = [m for m in record.moves if m.phase == "night_seer"]
    assert seer not in move.options
    assert move.violation == "self_target" and move.target != seer and "checked" not in move.events


def test_protection_ends_at_nightfall_also_after_the_doctor_died() -> None:
    """Night 1 the doctor guards a villager and is killed; night 2 that villager has no guard any more."""
    roles = get_game("werewolf").deal(["P1", "P2", "P3", "P4", "P5", "P6"], 0).roles
    doctor = next(p for p, r in roles.items() if r == "doctor")
    guarded = next(p for p, r in roles.items() if r == "villager")

    def strategy(seat: str, phase: str, options: list[str], roles: dict[str, str]) -> tuple[str | None, str]:
        if phase == "night_wolves":
            return (doctor if doctor in options else guarded), ""
        if phase == "night_doctor":
            return guarded, ""
        return None, "" if phase in ("day_vote", "night_seer") else "Hello."

    record = play_game("werewolf", decider(strategy), seed=0, players=list(roles), options={"max_rounds": 2})
    killed = [m.events["killed"] for m in record.moves if "killed" in m.events]
    assert killed == [doctor, guarded]
