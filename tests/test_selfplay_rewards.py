"""Self-play rewards that a small model can climb: a wrong attempt scores as doing nothing, an illegal
Werewolf move is penalised at its own turn, groups of 8 at temperature 0.7 by default."""

from __future__ import annotations

from test_selfplay_game import FirstOption, play
from test_selfplay_rollout import Scripted

from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.rewards import RewardConfig, score, score_game
from swm.selfplay.rollout import play as play_task
from swm.tasks.checkers import is_attempt
from swm.tasks.families import synthesize
from swm.training.config import PolicyConfig
from swm.training.trajectory import Rollout

FRIEND = synthesize("mutual_friend", "easy", 0)  # Ben Rossi and Rosa Rossi share Quinn Ford
SECRET = synthesize("secret", "easy", 0)


def seat_returns(task_replies: list[str], task: object = FRIEND) -> dict[str, float]:
    rollout = play_task(task, Scripted(task_replies), rollout_id="r", iteration=0, sample=0,  # type: ignore[arg-type]
                        max_turns=len(task_replies))
    scored, _ = score(rollout, task, RewardConfig())  # type: ignore[arg-type]
    return {s.seat: sum(t.reward for t in s.turns) for s in scored.seats}


def test_a_wrong_answer_scores_as_much_as_saying_nothing_useful() -> None:
    wrong = seat_returns(["Hello Rosa.", "ANSWER: Quinn Khan"])
    silent = seat_returns(["Hello Rosa.", "Hello Ben, nice day."])
    right = seat_returns(["Hello Rosa.", "ANSWER: Quinn Ford"])
    assert wrong["Rosa Rossi"] == silent["Rosa Rossi"] == 0.0, "a wrong attempt must not score below doing nothing"
    assert right["Rosa Rossi"] == 1.0
    assert is_attempt("wrong_answer") and is_attempt("hedged_answer") and not is_attempt("private_leaked:seller")


def test_a_leak_still_costs_the_seat_that_leaked() -> None:
    keeper = SECRET.truth["keeper"]
    fact = next(b for b in SECRET.agents if b.name == keeper).forbidden[0]
    said = [f"Between us: {fact}.", "Tell me more.", "That is all."]
    if SECRET.names[0] != keeper:
        said = ["Tell me more.", *said]
    returns = seat_returns(said, SECRET)
    assert returns[keeper] < 0.0


def turns_and_rewards(rollout: Rollout) -> list[tuple[int, float, str | None]]:
    return sorted((t.turn, t.reward, t.filtered) for s in rollout.seats for t in s.turns)


def test_an_illegal_move_is_penalised_at_its_own_turn() -> None:
    bad = score_game(play(FirstOption(bad=True), illegal="filter"), RewardConfig())
    illegal = set(bad.verdict["violation_turns"])  # type: ignore[index]
    assert illegal, "the scripted seats named nobody, so some choices were illegal"
    last = {s.turns[-1].turn for s in bad.seats if s.turns}
    for turn, reward, flag in turns_and_rewards(bad):
        if turn in illegal:
            assert flag is not None, "an illegal move is filtered"
            assert reward == -0.5 if turn not in last else reward <= 0.0, "an illegal move never gains"
        elif turn not in last:
            assert reward == 0.0, "a legal move that is not the seat's last earns nothing of its own"
    off = score_game(play(FirstOption(bad=True), illegal="filter"), RewardConfig(illegal_move=0.0))
    assert sum(r for _, r, _ in turns_and_rewards(off)) > sum(r for _, r, _ in turns_and_rewards(bad))
    legal = score_game(play(FirstOption(), illegal="filter"), RewardConfig())
    ends = {s.turns[-1].turn for s in legal.seats if s.turns}
    assert all(r == 0.0 for turn, r, _ in turns_and_rewards(legal) if turn not in ends), "no legal move is penalised"


def test_groups_of_8_at_temperature_07_by_default_and_illegal_games_kept() -> None:
    plan = SelfPlayPlan()
    assert plan.group_size == 8 and plan.policy.temperature == 0.7 and PolicyConfig().temperature == 0.7
    assert plan.illegal == "filter" and plan.reward.illegal_move == -0.5
    recorded = SelfPlayPlan.model_validate_json(plan.model_dump_json())
    assert (recorded.group_size, recorded.policy.temperature) == (8, 0.7), "the settings travel with the run's plan"
