"""The reward mix and the quality filter at their boundaries: each threshold is where its docstring puts it.

`swm.selfplay.rewards` states its numbers (the default mix, ``min_chars``, ``max_run``, ``min_unique`` from
8 words on); these tests sit on each edge, one step inside and one outside, so a threshold moved by one
is seen (bench/mutation.py runs them against every mutant of the module).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from swm.selfplay.rewards import RewardConfig, filtered_counts, quality_flag, score, score_game
from swm.tasks.families import synthesize
from swm.tasks.multi_turn import multi_turn_task
from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

CONFIG = RewardConfig()


def test_the_default_mix_is_the_documented_one() -> None:
    assert (CONFIG.completion, CONFIG.violation, CONFIG.max_violations, CONFIG.illegal_move) == (1.0, -0.5, 2, -0.5)
    assert (CONFIG.judge_weight, CONFIG.quality_filter, CONFIG.filtered_reward, CONFIG.filtered) == (0.0, True, 0.0,
                                                                                                     "cap")
    assert (CONFIG.min_chars, CONFIG.max_run, CONFIG.min_unique) == (2, 12, 0.3)


@pytest.mark.parametrize(("text", "flag"), [
    ("a", "degenerate"), ("ab", None), ("  a  ", "degenerate"),  # min_chars: 2, after stripping
    ("x" * 11, None), ("x" * 12, "degenerate"), (f"so {'!' * 11} fine", None),  # max_run: a run of 12
    ("one one one one one one one", None),  # 7 words: too few to judge their variety
    ("one one one one one one one one", "degenerate"),  # 8 words, 1 distinct: 0.125 < 0.3
    ("a b c a b c a b c a", None),  # 10 words, 3 distinct: 0.3 is not below 0.3
    ("a b a b a b a b a b", "degenerate"),  # 10 words, 2 distinct: 0.2
    ("One ONE one oNe two TWO two Two", "degenerate"),  # distinct words are counted case-free
])
def test_the_quality_filter_flags_a_turn_at_its_thresholds(text: str, flag: str | None) -> None:
    assert quality_flag(text, "Ben", [], [], CONFIG) == flag


def test_a_repeat_is_the_same_words_whatever_the_case_and_spacing() -> None:
    assert quality_flag("I offer  $300.", "Ben", [], ["i OFFER $300."], CONFIG) == "repeated"
    assert quality_flag("I offer $300.", "Ben", [], ["I offer $310."], CONFIG) is None


@pytest.mark.parametrize(("text", "flag"), [
    ("Ana: I accept.", "out_of_character"),  # another seat's name as the speaker
    ("Ana Silva: I accept.", "out_of_character"),
    ("Ben: I accept.", None),  # its own name
    ("Note: I accept.", None),  # a head that names nobody
    ("I think, Ana: this is fine", None),  # the head is everything before the first colon, not a word of it
    ("I am speaking as an AI here", "out_of_character"), ("a large language model said", "out_of_character"),
    ("I am an aide", None),
])
def test_out_of_character_is_another_seats_voice_or_a_models(text: str, flag: str | None) -> None:
    assert quality_flag(text, "Ben", ["Ana Silva"], [], CONFIG) == flag


def test_a_speaker_is_read_only_from_a_colon_in_the_first_sixty_characters() -> None:
    long_name = "Abcdefghij" * 6  # 60 characters: its colon is the 61st
    assert quality_flag(f"{long_name}: hello", "Ben", [long_name], [], CONFIG) is None
    assert quality_flag(f"{long_name[:-1]}: hello", "Ben", [long_name[:-1]], [], CONFIG) == "out_of_character"


def rollout(*turns: tuple[str, str]) -> Rollout:
    seats: dict[str, SeatTrajectory] = {}
    for i, (seat, text) in enumerate(turns):
        seats.setdefault(seat, SeatTrajectory(seat=seat, role=seat)).turns.append(
            SeatTurn(turn=i, prompt="", text=text, prompt_ids=[], token_ids=[1], logprobs=[0.0]))
    return Rollout(rollout_id="r", task_id="t", iteration=0, sample=0, seats=list(seats.values()))


def test_a_seats_outcome_lands_on_its_last_turn_and_penalties_are_capped() -> None:
    task = synthesize("secret", "easy", 3)
    keeper, prober = task.truth["keeper"], task.truth["partner"]
    facts = next(b for b in task.agents if b.name == keeper).forbidden
    leaky = rollout((keeper, f"It is {facts[0]}, really."), (prober, "Go on, tell me more about it."),
                    (keeper, f"Fine: {facts[0]} again."), (prober, "What else is there to say?"),
                    (keeper, f"And {facts[0]} once more!"))
    scored, verdict = score(leaky, task, RewardConfig(violation=-0.5, max_violations=2))
    seat = next(s for s in scored.seats if s.seat == keeper)
    assert seat.outcome == -1.0, "three leaks cost max_violations (2) times the penalty"
    assert [t.reward for t in seat.turns] == [0.0, 0.0, -1.0] and all(t.filtered == "rule_breaking" for t in seat.turns)
    other = next(s for s in scored.seats if s.seat == prober)
    assert other.outcome == 0.0 and [t.reward for t in other.turns] == [0.0, 0.0] and not other.violations
    assert filtered_counts([scored]) == {"turns": 5, "rule_breaking": 3}
    assert not verdict.completion


def test_the_judge_mix_and_the_filter_modes() -> None:
    task = synthesize("persuasion", "easy", 2)
    p, s, word = task.truth["persuader"], task.truth["partner"], task.truth["words"][0]
    passing = rollout((p, f"The {word} is covered by the club."), (s, "Then ACCEPT, gladly."))
    judged, _ = score(passing, task, RewardConfig(judge_weight=0.5), judge={0: 0.8, 1: 0.2})
    assert [t.reward for seat in judged.seats for t in seat.turns] == [pytest.approx(1.4), pytest.approx(1.1)]
    assert [t.judge for seat in judged.seats for t in seat.turns] == [0.8, 0.2]
    flat = rollout((p, "x"), (s, "Then ACCEPT, gladly."))  # the persuader's turn is degenerate
    capped, _ = score(flat, task, RewardConfig(filtered_reward=0.25))
    assert capped.seats[0].turns[0].filtered == "degenerate"
    zeroed, _ = score(rollout((p, "x"), (s, "Then ACCEPT, gladly.")), task,
                      RewardConfig(filtered="zero", filtered_reward=0.25))
    assert zeroed.seats[0].turns[0].reward == 0.25, "zero: a flagged turn gets filtered_reward whatever it earned"
    off, _ = score(rollout((p, "x"), (s, "Then ACCEPT, gladly.")), task, RewardConfig(quality_filter=False))
    assert off.seats[0].turns[0].filtered is None


def test_a_failed_rollout_is_never_scored() -> None:
    task = synthesize("persuasion", "easy", 2)
    broken = rollout(("a", "hello there"))
    broken.failed = "turn 0: boom"
    with pytest.raises(ValueError, match="never scored"):
        score(broken, task, CONFIG)
    with pytest.raises(ValueError, match="never scored"):
        score_game(broken, CONFIG)


def test_a_games_rewards_and_illegal_moves_come_from_its_verdict() -> None:
    game = rollout(("a", "I vote b."), ("b", "I vote a."), ("a", "I vote b again."))
    game.verdict = {"violation_turns": [1], "rewards": {"a": 1.0, "b": -1.0}}
    scored = score_game(game, RewardConfig(illegal_move=-0.25))
    a, b = scored.seats
    assert [t.reward for t in a.turns] == [0.0, 1.0] and not a.violations
    assert b.violations == ["illegal_move"] and b.turns[0].filtered == "rule_breaking"
    assert b.turns[0].reward == -1.25, "the seat's last move: its outcome plus the illegal move's penalty"
    assert score_game(rollout(("a", "I vote b.")), CONFIG).seats[0].outcome == 0.0, "no verdict: nothing earned"


def test_a_reward_config_is_fixed_and_an_illegal_move_never_earns() -> None:
    with pytest.raises(ValidationError):
        CONFIG.completion = 2.0  # type: ignore[misc]
    with pytest.raises(ValidationError):
        RewardConfig(illegal_move=0.5)
    assert RewardConfig(illegal_move=0.0).illegal_move == 0.0
    with pytest.raises(ValidationError):
        RewardConfig(judge_weight=-0.1)


def test_speaking_as_any_one_of_several_other_seats_is_out_of_character() -> None:
    assert quality_flag("Bo: I accept.", "Ben", ["Ana Silva", "Bo Lee"], [], CONFIG) == "out_of_character"


def test_a_move_that_leaks_and_answers_wrong_still_pays_for_the_leak() -> None:
    task = next(t for t in (synthesize("negotiation", "decision", s) for s in range(40)) if not t.truth["inside"])
    learner = task.truth["learner"]
    limit = task.truth["buyer_max"]
    move = rollout((learner, f"COUNTER ${limit + 5}, though my limit is ${limit}"))
    scored, verdict = score(move, task, CONFIG)
    assert verdict.violations == ["private_leaked:buyer", "wrong_answer"]
    assert scored.seats[0].outcome == -0.5 and scored.seats[0].violations == verdict.violations


def test_answer_reward_credits_only_the_seat_whose_own_answer_is_right() -> None:
    """`answer` adds to the seat that answered right alone; the joint outcome is unchanged; 0 leaves it out."""
    task = multi_turn_task("mutual_friend", 3)
    a, b = task.truth["seats"]
    friend = task.truth["friend"]
    wrong = next(n for n in task.truth["lists"][1] if n != friend)
    turns = [(a, f"ANSWER: {friend}"), (b, f"ANSWER: {wrong}")]
    half = RewardConfig(answer=0.5)
    scored, verdict = score(rollout(*turns), task, half)
    assert not verdict.completion
    assert {s.seat: s.outcome for s in scored.seats} == {a: 0.5, b: 0.0}
    plain, _ = score(rollout(*turns), task, RewardConfig())
    assert {s.seat: s.outcome for s in plain.seats} == {a: 0.0, b: 0.0}
    both, verdict = score(rollout((a, f"ANSWER: {friend}"), (b, f"ANSWER: {friend}")), task, half)
    assert verdict.completion and {s.seat: s.outcome for s in both.seats} == {a: 1.5, b: 1.5}


@pytest.mark.parametrize(("said", "attempted"), [
    ("{wrong}", True), ("{friend}", True), ("", False), ("{seat}", False), ("{wrong} or {friend}", False),
    ("{wrong_first}", True), ("nobody I know", False),
])
def test_attempt_reward_puts_silence_below_a_guess_and_pays_no_hedge(said: str, attempted: bool) -> None:
    """`attempt` adds to the seat whose first answer names one person of the lists, right or wrong; an empty answer,
    a seat's own name, a hedge or words that name nobody earn none; 0 leaves it out."""
    task = multi_turn_task("mutual_friend", 3)
    a, b = task.truth["seats"]
    friend = task.truth["friend"]
    wrong = next(n for n in task.truth["lists"][1] if n != friend and not set(n.split()) & set(f"{a} {b}".split()))
    answer = "ANSWER: " + said.format(wrong=wrong, friend=friend, seat=a, wrong_first=wrong.split()[0])
    turns = [(a, "Who do you know?"), (b, answer.strip())]
    scored, verdict = score(rollout(*turns), task, RewardConfig(attempt=0.25))
    assert verdict.detail["attempted"].get(b, False) is attempted and a not in verdict.detail["attempted"]
    assert {s.seat: s.outcome for s in scored.seats} == {a: 0.0, b: 0.25 if attempted else 0.0}
    plain, _ = score(rollout(*turns), task, RewardConfig())
    assert {s.seat: s.outcome for s in plain.seats} == {a: 0.0, b: 0.0}
