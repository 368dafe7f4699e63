"""Every two-seat shape (`TWO_SEAT_SHAPES`): splits pinned by digest and disjoint, both seats played by one policy.

Parametrised over the table, so a new shape is checked here once its digests are pinned in `DIGESTS` (a
change to a generator that moves a split fails here: a new benchmark version). Each family's own rules
(how an answer reads, what a hedge is) stay in its file (tests/test_two_seat.py, tests/test_two_seat_scheduling.py).
"""

from __future__ import annotations

import pytest
from test_two_seat import Scripted

from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.rewards import RewardConfig, score
from swm.selfplay.rollout import play
from swm.tasks.families import TWO_SEAT, TWO_SEAT_SHAPES, Task, synthesize
from swm.tasks.levels import seat_prompt
from swm.tasks.splits import decision_digest, split_tasks

# the splits' first tasks, pinned per family: names from the eval pool (training from the train pool) since
# 2026-11-28, and the shared pool's, which the results measured before then used (docs/results/selfplay.md's
# split 096c322ab04ba0eb)
DIGESTS = {
    "mutual_friend": {("test", 200): "22b4ce58c1e70cfb", ("dev", 100): "131bf68c331564ef"},
    "scheduling": {("test", 200): "88f0b5f37b9077ef", ("dev", 100): "40f23208be4ea854"},
}
SHARED_DIGESTS = {
    "mutual_friend": {("test", 200): "096c322ab04ba0eb", ("dev", 100): "ae02860eecf4ad20"},
    "scheduling": {("test", 200): "5ee951f73eaf4185", ("dev", 100): "703593def4c5add4"},
}
# each seat's reply budget (speaker, finder), pinned as the digests are: a change is a new benchmark version
LIMITS = {"mutual_friend": (48, 12), "scheduling": (48, 12)}
TEST_TASKS = 200
PINNED = [(family, split, n) for family, pins in DIGESTS.items() for split, n in sorted(pins)]


def test_every_shape_has_pinned_splits_and_reply_budgets() -> None:
    assert set(DIGESTS) == set(TWO_SEAT_SHAPES) == set(LIMITS)
    for family, (speak, find) in LIMITS.items():
        shape = TWO_SEAT_SHAPES[family]
        assert (shape.speak.max_tokens, shape.find.max_tokens) == (speak, find)
        assert not shape.speak.ends_line and shape.find.ends_line, "the speaker's list spans lines, the answer not"


@pytest.mark.parametrize("family", list(TWO_SEAT_SHAPES))
def test_each_seat_is_told_its_partner_and_the_finder_hears_only_the_speaker(family: str) -> None:
    t = synthesize(family, TWO_SEAT, 5)
    a, b = t.names
    speak, find = seat_prompt(t, a, []), seat_prompt(t, b, [])
    assert b in speak.text and a not in speak.text and a in find.text and "(nothing yet)" in find.text
    heard = seat_prompt(t, b, [(a, "said by the speaker"), (b, "said by the finder")]).text
    assert "said by the speaker" in heard and "said by the finder" not in heard and "(nothing yet)" not in heard


@pytest.mark.parametrize(("family", "split", "n"), PINNED)
def test_the_splits_are_pinned_by_digest(family: str, split: str, n: int) -> None:
    assert decision_digest(split, family, n, level=TWO_SEAT) == DIGESTS[family][(split, n)]
    assert decision_digest(split, family, n, level=TWO_SEAT, names="shared") == SHARED_DIGESTS[family][(split, n)]


@pytest.mark.parametrize("family", list(TWO_SEAT_SHAPES))
def test_training_and_test_names_come_from_disjoint_pools(family: str) -> None:
    def people(tasks: list[Task]) -> set[str]:  # the seats, and mutual friend's lists (scheduling's hold slots)
        listed = [x for t in tasks if family == "mutual_friend" for names in t.truth["lists"] for x in names]
        return {*listed, *(n for t in tasks for n in t.names)}

    test = split_tasks("test", [TWO_SEAT], [family], TEST_TASKS)
    train = [t for i in range(8) for t in SelfPlayPlan(family=family, level=TWO_SEAT,
                                                        tasks_per_iteration=25).training_tasks(i)]
    assert people(train) and not people(train) & people(test)
    shared = SelfPlayPlan(family=family, level=TWO_SEAT, tasks_per_iteration=25, names="shared")
    assert people([t for i in range(8) for t in shared.training_tasks(i)]) & people(
        split_tasks("test", [TWO_SEAT], [family], TEST_TASKS, names="shared"))  # the pool before the split


@pytest.mark.parametrize("family", list(DIGESTS))
def test_the_splits_are_disjoint_and_the_test_split_is_large_enough(family: str) -> None:
    test = split_tasks("test", [TWO_SEAT], [family], TEST_TASKS)
    dev = split_tasks("dev", [TWO_SEAT], [family], 100)
    train = [t for i in range(12) for t in SelfPlayPlan(family=family, level=TWO_SEAT,
                                                         tasks_per_iteration=25).training_tasks(i)]
    assert len({t.task_id for t in test}) == TEST_TASKS
    content = [{(t.names[0], t.names[1], tuple(map(tuple, t.truth["lists"]))) for t in split}
               for split in (test, dev, train)]
    assert not content[0] & content[1] and not content[0] & content[2] and not content[1] & content[2]
    plan = SelfPlayPlan(family=family, level=TWO_SEAT, eval_tasks=TEST_TASKS)
    assert [t.task_id for t in plan.evaluation_tasks()] == [t.task_id for t in test]


@pytest.mark.parametrize("family", list(TWO_SEAT_SHAPES))
def test_a_task_has_a_speaker_a_finder_and_exactly_one_shared_item(family: str) -> None:
    for seed in range(20):
        t = synthesize(family, TWO_SEAT, seed, split="heldout")
        a, b = t.truth["lists"]
        assert len(set(a) & set(b)) == 1 and (t.truth["speaker"], t.truth["finder"]) == tuple(t.names)
        assert [x.role for x in t.agents] == ["speaker", "finder"] and t.task_id == f"heldout:{family}:two-seat:{seed}"
        assert all(x in t.agents[0].private for x in a) and not any(x in t.agents[0].private for x in set(b) - set(a))
    assert synthesize(family, TWO_SEAT, 3) == synthesize(family, TWO_SEAT, 3)


@pytest.mark.parametrize("family", list(TWO_SEAT_SHAPES))
def test_one_policy_plays_both_seats_and_both_get_the_joint_reward(family: str) -> None:
    shape = TWO_SEAT_SHAPES[family]
    t = synthesize(family, TWO_SEAT, 2)
    a, b = t.names
    said, answer = (turn.text for turn in shape.reference(t))
    replies = [said.removeprefix(shape.speak.prefill), answer.removeprefix(shape.find.prefill), "never said"]
    sampler = Scripted(replies)
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=4)
    assert rollout.end_reason == "settled" and rollout.order == [a, b]
    (p0, pre0, stop0, cap0), (p1, pre1, stop1, cap1) = sampler.calls
    assert (pre0, stop0, cap0) == (shape.speak.prefill, None, shape.speak.max_tokens)
    assert (pre1, stop1, cap1) == (shape.find.prefill, "\n", shape.find.max_tokens)
    assert p0 == seat_prompt(t, a, []).text and p1 == seat_prompt(t, b, [(a, said)]).text
    assert seat_prompt(t, a, []).name == f"{shape.speak.template}@v1"
    own, theirs = t.truth["lists"]
    assert all(x in p0 for x in own) and not any(x in p0 for x in set(theirs) - set(own))
    assert all(x in p1 for x in theirs)
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.passed and verdict.detail.get("speaker_listed", 1.0) == 1.0, "the reference lists A's own items"
    assert [s.role for s in scored.seats] == ["speaker", "finder"]
    assert [s.turns[-1].reward for s in scored.seats] == [1.0, 1.0]
