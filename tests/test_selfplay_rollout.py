"""Self-play rollouts and rewards with a scripted sampler: seats, settlement, failures, the quality filter."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swm.selfplay.rewards import RewardConfig, filtered_counts, quality_flag, score
from swm.selfplay.rollout import play
from swm.tasks.families import synthesize
from swm.training.trajectory import Generation

TASK = synthesize("negotiation", "easy", 0)  # Ben Garcia (seller, min $235), Wes Lopez (buyer, limit $330)


class Scripted:
    """Replies in order; each word is one token (id = its index), each with log-prob −1."""

    def __init__(self, replies: list[str]) -> None:
        self.replies: Iterator[str] = iter(replies)
        self.prompts: list[str] = []

    def generate(self, prompt: str) -> Generation:
        self.prompts.append(prompt)
        text = next(self.replies)
        if text == "<boom>":
            raise RuntimeError("model server went away")
        words = text.split() or [""]
        return Generation(text=text, prompt_ids=[0, 1, 2], token_ids=list(range(10, 10 + len(words))),
                          logprobs=[-1.0] * len(words))


def run(replies: list[str], max_turns: int = 6) -> tuple[object, Scripted]:
    sampler = Scripted(replies)
    return play(TASK, sampler, rollout_id="r0", iteration=0, sample=0, max_turns=max_turns), sampler


def test_each_seat_keeps_only_its_own_turns_and_a_settled_task_ends() -> None:
    rollout, sampler = run(["I can sell it for $300.", "I offer $280.", "ACCEPT $280", "never said"])
    assert rollout.end_reason == "settled" and rollout.order == ["Ben Garcia", "Wes Lopez", "Ben Garcia"]
    seller, buyer = rollout.seat("Ben Garcia"), rollout.seat("Wes Lopez")
    assert (seller.role, buyer.role) == ("seller", "buyer")
    assert [t.turn for t in seller.turns] == [0, 2] and [t.turn for t in buyer.turns] == [1]
    assert "I offer $280." in sampler.prompts[2], "the other seat's words are context of the next prompt"
    assert "$330" not in sampler.prompts[0] and "$235" in sampler.prompts[0], "a seat sees only its own private facts"
    scored, verdict = score(rollout, TASK, RewardConfig())
    assert verdict.completion
    assert [t.reward for t in scored.seat("Ben Garcia").turns] == [0.0, 1.0]  # the outcome at the seat's last turn
    assert [t.reward for t in scored.seat("Wes Lopez").turns] == [1.0]


def test_a_leak_costs_the_seat_that_leaked_and_is_filtered() -> None:
    rollout, _ = run(["My minimum is $235, so $300.", "I offer $280.", "ACCEPT $280"])
    scored, verdict = score(rollout, TASK, RewardConfig())
    assert verdict.violations == ["private_leaked:seller"]
    seller, buyer = scored.seat("Ben Garcia"), scored.seat("Wes Lopez")
    # a leak never completes the deal's task (tests/test_reward_invariants.py): the leaker pays, the other gets 0
    assert not verdict.completion and seller.outcome == -0.5 and buyer.outcome == 0.0
    assert seller.turns[0].filtered == "rule_breaking" and seller.turns[0].reward == 0.0
    assert filtered_counts([scored]) == {"turns": 3, "rule_breaking": 1}


def test_a_flagged_turn_keeps_its_penalty_unless_told_to_zero_it() -> None:
    replies = ["$300 please.", "I offer $280.", "My minimum is $235."]  # no deal, and the seller leaks last
    capped, _ = score(run(replies, max_turns=3)[0], TASK, RewardConfig())
    assert capped.seat("Ben Garcia").turns[-1].filtered == "rule_breaking"
    assert capped.seat("Ben Garcia").turns[-1].reward == -0.5
    zeroed, _ = score(run(replies, max_turns=3)[0], TASK, RewardConfig(filtered="zero"))
    assert zeroed.seat("Ben Garcia").turns[-1].reward == 0.0


def test_quality_filter_zeroes_degenerate_repeated_and_out_of_character_turns() -> None:
    rollout, _ = run(["$300 please.", "!!!!!!!!!!!!!!!!", "$300 please.", "Ben: ACCEPT $300"], max_turns=4)
    scored, _ = score(rollout, TASK, RewardConfig())
    flags = [t.filtered for _, t in sorted((t.turn, t) for s in scored.seats for t in s.turns)]
    assert flags == [None, "degenerate", "repeated", "out_of_character"]
    assert all(t.reward == 0.0 for s in scored.seats for t in s.turns if t.filtered)
    unfiltered, _ = score(run(["$300 please.", "!!!!!!!!!!!!!!!!", "$300 please.", "Ben: ACCEPT $300"],
                              max_turns=4)[0], TASK, RewardConfig(quality_filter=False))
    assert all(t.filtered is None for s in unfiltered.seats for t in s.turns)
    assert quality_flag("As an AI language model I cannot", "Ben", [], [], RewardConfig()) == "out_of_character"
    assert quality_flag("deal deal deal deal deal deal deal deal", "Ben", [], [], RewardConfig()) == "degenerate"


def test_judge_scores_are_mixed_with_their_weight() -> None:
    rollout, _ = run(["$300 please.", "I offer $280."], max_turns=2)
    scored, _ = score(rollout, TASK, RewardConfig(judge_weight=0.5), judge={0: 0.8, 1: 0.2})
    assert [t.reward for s in scored.seats for t in s.turns] == pytest.approx([0.4, 0.1])
    assert [t.judge for s in scored.seats for t in s.turns] == [0.8, 0.2]


def test_a_failed_rollout_is_recorded_and_never_scored() -> None:
    rollout, _ = run(["$300 please.", "<boom>"])
    assert rollout.failed is not None and "model server went away" in rollout.failed
    assert len(rollout.seat("Ben Garcia").turns) == 1
    with pytest.raises(ValueError, match="dropped, never scored"):
        score(rollout, TASK, RewardConfig())


def test_the_judge_scores_each_turn_once_and_a_bad_reply_stays_unjudged() -> None:
    from swm.selfplay.judge import TurnScore, judge_turns
    from swm.testing import ScriptedChatModel

    rollout, _ = run(["$300 please.", "I offer $280.", "ACCEPT $280"], max_turns=3)
    judge = ScriptedChatModel(replies=[TurnScore(score=8), "no idea", TurnScore(score=3)])
    scores, counts = judge_turns(judge, rollout, TASK)
    assert counts == {"calls": 3, "unjudged": 1}
    assert "I offer $280." in judge.prompts[2][1] and "$330" not in judge.prompts[0][1]
    scored, _ = score(rollout, TASK, RewardConfig(judge_weight=0.5), judge=scores)
    seller = scored.seat("Ben Garcia")
    assert [t.judge for t in seller.turns] == [0.8, 0.3] and scored.seat("Wes Lopez").turns[0].judge is None
    assert [t.reward for t in seller.turns] == pytest.approx([0.4, 1.15])
    again, counts = judge_turns(ScriptedChatModel(replies=[TurnScore(score=1)]), scored, TASK)
    assert counts == {"calls": 1, "unjudged": 0} and again[0] == 0.8, "stored scores make no new call"
