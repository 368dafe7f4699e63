"""Self-play rollouts of Werewolf with a scripted sampler: seats keep their own moves, ±1 per role, illegal moves."""

from __future__ import annotations

import re

import pytest

from swm.selfplay.game_rollout import parse_choice, play_game_rollout
from swm.selfplay.rewards import RewardConfig, score_game
from swm.training.trajectory import Generation


class FirstOption:
    """Names the first legal option (or says a line); ``bad`` replies to choices with no name at all."""

    def __init__(self, bad: bool = False) -> None:
        self.bad = bad
        self.calls = 0

    def generate(self, prompt: str) -> Generation:
        self.calls += 1
        found = re.search(r"one of ([^.]*?)(?: or none to abstain)?\.", prompt.split("The moderator asks you")[-1])
        if "field `target`" in prompt and found:
            text = "I pick nobody at all" if self.bad else f"I choose {found.group(1).split(', ')[0]}"
        else:
            text = f"I am innocent, trust me ({self.calls})."
        return Generation(text=text, prompt_ids=[1, 2], token_ids=[5, 6, 7], logprobs=[-0.5, -0.5, -0.5])


def play(sampler: FirstOption, illegal: str = "drop"):  # type: ignore[no-untyped-def]
    return play_game_rollout("werewolf", sampler, seed=3, players=5, options={"max_rounds": 2}, rollout_id="w/g0",
                             task_id="werewolf:train:3", iteration=0, sample=0, illegal=illegal)  # type: ignore[arg-type]


def test_a_game_rollout_keeps_each_seats_moves_and_rewards_the_winning_side() -> None:
    rollout = play(FirstOption())
    assert rollout.failed is None and rollout.verdict is not None and rollout.verdict["winner"] is not None
    roles = {s.role for s in rollout.seats}
    assert "werewolf" in roles and "seer" in roles
    for seat in rollout.seats:
        assert all(rollout.order[t.turn] == seat.seat for t in seat.turns), "a seat holds only its own moves"
    scored = score_game(rollout, RewardConfig())
    rewards = rollout.verdict["rewards"]
    for seat in scored.seats:
        if seat.turns:
            assert seat.turns[-1].reward == rewards[seat.seat] and all(t.reward == 0 for t in seat.turns[:-1])
    if rollout.verdict["winner"] != "draw":
        assert {s.outcome for s in scored.seats} == {1.0, -1.0}


def test_an_illegal_move_drops_the_rollout_or_is_filtered() -> None:
    dropped = play(FirstOption(bad=True))
    assert dropped.failed is not None and dropped.failed.startswith("illegal move at turn")
    with pytest.raises(ValueError, match="never scored"):
        score_game(dropped, RewardConfig())
    kept = score_game(play(FirstOption(bad=True), illegal="filter"), RewardConfig(illegal_move=0.0))
    flagged = [t for s in kept.seats for t in s.turns if t.filtered == "rule_breaking"]
    assert flagged and all(t.reward == 0.0 for t in flagged)  # with no legality signal, an illegal move earns 0


def test_parse_choice_reads_the_first_named_option() -> None:
    options = ["Ava", "Ben", "Cara Diaz"]
    assert parse_choice("I think cara is lying, not Ben", options, False) == "Cara Diaz"
    assert parse_choice("nobody", options, False) is None
    assert parse_choice("none of them", options, True) == "none"
