"""The multi-turn task's horizons: 4 and 6 messages with shorter lists below the 8-message level, each with its own
pinned splits, and a scripted conversation that succeeds within the shortest budget."""

from __future__ import annotations

import pytest
from test_two_seat import Scripted

from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.rewards import RewardConfig, score
from swm.selfplay.rollout import play
from swm.tasks.families import (
    MULTI_TURN,
    Variant,
    level_families,
    synthesize,
    task_of_id,
)
from swm.tasks.levels import seat_levels
from swm.tasks.multi_turn import ANSWER_PREFILL, CAP, HORIZONS, LIST_PREFILL
from swm.tasks.splits import decision_digest, split_tasks

# each horizon's splits' first tasks, pinned: a change to the generator that moves them fails here
DIGESTS = {("multi-turn-4", "test"): "8fa29fa242336cea", ("multi-turn-4", "dev"): "c90424a1daa1ed90",
           ("multi-turn-6", "test"): "3ec9ea23081d5c1a", ("multi-turn-6", "dev"): "aa8157fc9c49f106"}


def test_each_horizon_is_a_level_with_its_budget_and_its_list_lengths() -> None:
    assert seat_levels()[-3:] == tuple(HORIZONS) == ("multi-turn-4", "multi-turn-6", MULTI_TURN)
    assert {level: (h.budget, h.lists) for level, h in HORIZONS.items()} == {
        "multi-turn-4": (4, (4, 5)), "multi-turn-6": (6, (6, 8)), MULTI_TURN: (8, (8, 12))}
    for level, (budget, (low, high)) in HORIZONS.items():
        assert level_families(level) == ("mutual_friend",)
        tasks = [synthesize("mutual_friend", level, seed, variant=Variant(names="train")) for seed in range(60)]
        assert {len(names) for t in tasks for names in t.truth["lists"]} == set(range(low, high + 1))
        assert all((t.truth["budget"], t.truth["cap"], t.level) == (budget, CAP, level) for t in tasks)
        assert all(set(t.truth["lists"][0]) & set(t.truth["lists"][1]) == {t.truth["friend"]} for t in tasks)
        assert all(t == task_of_id(t.task_id) and t.task_id.split(":")[2] == level for t in tasks[:5])
        assert f"within {budget} messages" in tasks[0].scenario
    with pytest.raises(ValueError, match="no multi-turn-4 shape"):
        synthesize("negotiation", "multi-turn-4", 0)


@pytest.mark.parametrize(("level", "split"), sorted(DIGESTS))
def test_each_horizons_splits_are_pinned_by_digest(level: str, split: str) -> None:
    assert decision_digest(split, "mutual_friend", 200 if split == "test" else 100, level=level) == DIGESTS[
        (level, split)]


@pytest.mark.parametrize("level", tuple(HORIZONS))
def test_each_horizons_splits_are_disjoint_from_each_other_and_from_training(level: str) -> None:
    test = split_tasks("test", [level], ["mutual_friend"], 200)
    dev = split_tasks("dev", [level], ["mutual_friend"], 100)
    train = SelfPlayPlan(family="mutual_friend", level=level, tasks_per_iteration=50).training_tasks(0)
    content = [{(t.truth["friend"], tuple(map(tuple, t.truth["lists"]))) for t in s} for s in (test, dev, train)]
    assert len(content[0]) == 200 and not content[0] & content[1] and not content[2] & (content[0] | content[1])
    others = [lv for lv in HORIZONS if lv != level]  # no task is another horizon's
    assert not content[0] & {(t.truth["friend"], tuple(map(tuple, t.truth["lists"])))
                             for lv in others for t in split_tasks("test", [lv], ["mutual_friend"], 200)}


def test_at_four_messages_each_seat_lists_once_then_answers_and_the_pair_can_succeed() -> None:
    t = synthesize("mutual_friend", "multi-turn-4", 7, variant=Variant(names="train"))
    a, b, friend = *t.names, t.truth["friend"]
    heard = [friend, *[n for n in t.truth["lists"][0] if n != friend][:CAP - 1]]
    replies = [" " + "\n2. ".join(heard), f" {friend}", f" {friend}", f" {friend}"]
    sampler = Scripted(replies)
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=20)
    assert rollout.order == [a, b, a, b] and [pre for _, pre, _, _ in sampler.calls] == [LIST_PREFILL] * 2 + [
        ANSWER_PREFILL] * 2
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.passed and verdict.resolved_at == 3 and [s.turns[-1].reward for s in scored.seats] == [1.0, 1.0]
    silent = play(t, Scripted([" Uma Adler"] * 2 + [" Uma Adler"] * 2), rollout_id="s", iteration=0, sample=0,
                  max_turns=20)
    assert len(silent.order) == 4 and not score(silent, t, RewardConfig())[1].passed  # the budget ends it at 4
