"""The two-seat mutual-friend task: generation, splits pinned by digest, the checker, a scripted self-play rollout."""

from __future__ import annotations

from pathlib import Path

import pytest

from swm.errors import InputError
from swm.selfplay.checkpoint import warm_start_adapter
from swm.tasks import multi_turn
from swm.tasks.checkers import Utterance
from swm.tasks.decisions import Stop
from swm.tasks.families import MULTI_TURN, TWO_SEAT, synthesize
from swm.tasks.levels import follow_up
from swm.tasks.verify import check
from swm.training.trajectory import Generation


def says(*lines: tuple[str, str]) -> list[Utterance]:
    return [Utterance(agent=a, text=t) for a, t in lines]


def test_a_two_seat_task_has_a_speaker_a_finder_and_one_shared_friend() -> None:
    t = synthesize("mutual_friend", TWO_SEAT, 3, split="heldout")
    assert t == synthesize("mutual_friend", TWO_SEAT, 3, split="heldout")
    assert t.task_id == "heldout:mutual_friend:two-seat:3" and t.level == TWO_SEAT
    assert [a.role for a in t.agents] == ["speaker", "finder"]
    a, b = t.truth["lists"]
    assert set(a) & set(b) == {t.truth["friend"]} and len(a) == len(b) == 4
    assert (t.truth["speaker"], t.truth["finder"]) == tuple(t.names)
    with pytest.raises(ValueError, match="no two-seat shape"):
        synthesize("negotiation", TWO_SEAT, 0)


def test_only_the_finders_first_answer_counts() -> None:
    t = synthesize("mutual_friend", TWO_SEAT, 1)
    a, b = t.names
    friend, other = t.truth["friend"], next(n for n in t.truth["lists"][1] if n != t.truth["friend"])
    mine = "\n".join(t.truth["lists"][0])
    ok = check(t, says((a, f"My friends:\n{mine}"), (b, f"ANSWER: {friend}")))
    assert ok.passed and ok.resolved_at == 1 and ok.detail["speaker_listed"] == 1.0 and ok.detail["friend_said"]
    # the speaker cannot know the friend: its answer is not the task's, right or wrong
    assert not check(t, says((a, f"ANSWER: {friend}"), (b, "Hmm."))).completion
    assert check(t, says((a, f"ANSWER: {other}"), (b, f"ANSWER: {friend}"))).passed
    wrong = check(t, says((a, "Hi"), (b, f"ANSWER: {other}"), (a, "No."), (b, f"ANSWER: {friend}")))
    assert not wrong.completion and wrong.violations == ["wrong_answer"]
    hedge = check(t, says((a, "Hi"), (b, f"ANSWER: {friend}, {other}")))
    assert not hedge.completion and hedge.violations == ["hedged_answer"]


class Scripted:
    """Replies in order, one token a word; records each prompt and its prefill."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = iter(replies)
        self.calls: list[tuple[str, str, Stop, int | None]] = []

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None) -> Generation:
        self.calls.append((prompt, prefill, stop, max_tokens))
        text = next(self.replies)
        words = text.split() or [""]
        return Generation(text=prefill + text, prompt_ids=[0, 1], token_ids=list(range(10, 10 + len(words))),
                          logprobs=[-1.0] * len(words))


def test_warm_start_finds_the_adapter(tmp_path: Path) -> None:
    learn = tmp_path / "learn"
    one = learn / "adapters" / "p1"
    one.mkdir(parents=True)
    (one / "adapter_config.json").write_text("{}")
    assert warm_start_adapter(one) == one and warm_start_adapter(learn) == one
    (learn / "adapters" / "p2").mkdir()
    (learn / "adapters" / "p2" / "adapter_config.json").write_text("{}")
    with pytest.raises(InputError, match="holds 2 adapters"):
        warm_start_adapter(learn)
    run = tmp_path / "sp"
    (run / "checkpoints" / "iter-0003" / "adapter").mkdir(parents=True)
    (run / "checkpoints" / "iter-0003" / "adapter" / "adapter_config.json").write_text("{}")
    (run / "checkpoints" / "LATEST").write_text("3")
    assert warm_start_adapter(run) == run / "checkpoints" / "iter-0003" / "adapter"
    with pytest.raises(InputError, match="no adapter"):
        warm_start_adapter(tmp_path / "nothing")


def test_the_shuffled_control_moves_joint_rewards_together() -> None:
    """The control permutes whole rollouts' rewards: every seat of a rollout gets one other rollout's, jointly."""
    from swm.selfplay.loop import shuffle_rewards
    from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

    def rollout(i: int, reward: float) -> Rollout:
        seats = [SeatTrajectory(seat=s, role=role, outcome=reward + k,
                                turns=[SeatTurn(turn=k, prompt="", text="x", prompt_ids=[], token_ids=[1],
                                                logprobs=[0.0], reward=reward + k)])
                 for k, (s, role) in enumerate((("A", "speaker"), ("B", "finder")))]
        return Rollout(rollout_id=f"r{i:02d}", task_id="t", iteration=0, sample=i, seats=seats)

    rollouts = [rollout(i, float(i)) for i in range(12)]
    shuffle_rewards(rollouts, 3)
    pairs = [(r.seats[0].turns[0].reward, r.seats[1].turns[0].reward) for r in rollouts]
    assert all(b == a + 1 for a, b in pairs), "a rollout's seats keep one rollout's joint reward"
    assert sorted(a for a, _ in pairs) == [float(i) for i in range(12)]
    assert [a for a, _ in pairs] != [float(i) for i in range(12)]
    again = [rollout(i, float(i)) for i in range(12)]
    shuffle_rewards(again, 3)
    assert [(r.seats[0].turns[0].reward, r.seats[1].turns[0].reward) for r in again] == pairs  # seeded


def test_the_turn_scoped_control_leaves_no_part_of_a_reward_with_its_turn() -> None:
    """At turn scope every turn's whole reward is permuted among all the iteration's turns: a turn the quality filter
    flagged (its reward capped at 0) gets the others' rewards as often as any turn, where the rollout scope left
    every flagged turn but the last its cap (the control that learned to answer nothing)."""
    from swm.selfplay.loop import shuffle_rewards, shuffle_turn_rewards
    from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

    def rollout(i: int) -> Rollout:
        seats = []
        for k, (s, role) in enumerate((("A", "speaker"), ("B", "finder"))):
            turns = []
            for n in range(3):
                flagged = (i + n) % 2 == 0
                turns.append(SeatTurn(turn=2 * n + k, prompt="", text="x", prompt_ids=[], token_ids=[1],
                                      logprobs=[0.0], reward=-0.5 if flagged else 0.1 * (i + n + 1),
                                      filtered="copied" if flagged else None))
            seats.append(SeatTrajectory(seat=s, role=role, outcome=0.0, turns=turns))
        return Rollout(rollout_id=f"r{i:02d}", task_id="t", iteration=0, sample=i, seats=seats)

    def rewards(rs: list[Rollout]) -> list[tuple[str | None, float]]:
        return [(t.filtered, t.reward) for r in rs for s in r.seats for t in s.turns]

    before = rewards([rollout(i) for i in range(8)])
    by_turn = [rollout(i) for i in range(8)]
    shuffle_turn_rewards(by_turn, 5)
    after = rewards(by_turn)
    assert sorted(v for _, v in after) == sorted(v for _, v in before), "the same rewards, redistributed"
    flagged = [v for f, v in after if f]
    assert sum(v > 0 for v in flagged) >= len(flagged) // 4, "flagged turns are paid as others are"
    again = [rollout(i) for i in range(8)]
    shuffle_turn_rewards(again, 5)
    assert rewards(again) == after, "seeded"
    by_rollout = [rollout(i) for i in range(8)]
    shuffle_rewards(by_rollout, 5)
    kept = [t.reward for r in by_rollout for s in r.seats for t in s.turns[:-1] if t.filtered]
    assert kept and all(v == -0.5 for v in kept), "the rollout scope leaves a flagged turn its cap"


def test_only_the_multi_turn_level_has_its_own_follow_up_in_a_seat_chat() -> None:
    two, many = synthesize("mutual_friend", TWO_SEAT, 1), synthesize("mutual_friend", MULTI_TURN, 1)
    a, b = two.names
    assert follow_up(two, a, [(a, "Hi."), (b, "Hello.")]) is None  # the rollout sends its generic seat message
    a, b = many.names
    said = [(a, "Hi."), (b, "Hello.")]
    assert follow_up(many, a, said) == multi_turn.follow_up(many, a, said) and "Hello." in follow_up(many, a, said)
