"""Generated episode cells (100 tasks a cell, pinned by digest) beside the frozen ones, and the starter level."""

from __future__ import annotations

import pytest

from swm.lifelong.jobs import eval_split, training_tasks
from swm.lifelong.plan import LifelongPlan
from swm.tasks.checkers import Utterance
from swm.tasks.families import FAMILIES, STARTER, synthesize, turn_limit
from swm.tasks.splits import decision_digest, frozen, split_tasks
from swm.tasks.verify import check

PER_CELL = 100
# (level, family) -> (test, dev) digests of the first 100 tasks a cell: a change that moves them fails here
PINS = {
    ("easy", "negotiation"): ("789e59519a880c62", "ccacb702a941ab79"),
    ("easy", "mutual_friend"): ("23223e022be84385", "6a67c014ef286119"),
    ("easy", "secret"): ("0a331e2513d80276", "a348fca0bc69edfd"),
    ("easy", "scheduling"): ("55823c7db1535968", "78deb6650272aa23"),
    ("easy", "persuasion"): ("bfcdf62a47de62da", "21545db20879b95c"),
    (STARTER, "negotiation"): ("0f7eafbed386cba7", "036cc35cc75916b2"),
    (STARTER, "mutual_friend"): ("999662f7114f8e37", "f583ca0d06a524a2"),
    (STARTER, "secret"): ("ada89086b87f8c6e", "dd8d5283938b6ddd"),
    (STARTER, "scheduling"): ("bd4c6a2ccbf21cc3", "964d0664da4fea8a"),
    (STARTER, "persuasion"): ("7b1c8a95e302fb10", "fd9a34946c5726f6"),
}


@pytest.mark.parametrize(("level", "family"), sorted(PINS))
def test_the_generated_episode_cells_are_pinned_by_digest(level: str, family: str) -> None:
    test, dev = PINS[(level, family)]
    assert decision_digest("test", family, PER_CELL, level=level) == test
    assert decision_digest("dev", family, PER_CELL, level=level) == dev


def test_generated_cells_hold_as_many_as_asked_hold_the_frozen_ones_and_keep_dev_apart() -> None:
    test = split_tasks("test", ["easy"], FAMILIES, PER_CELL, episodes="generated")
    dev = split_tasks("dev", ["easy"], FAMILIES, PER_CELL, episodes="generated")
    assert len(test) == len(dev) == PER_CELL * len(FAMILIES)
    assert len(split_tasks("test", ["easy"], FAMILIES, PER_CELL)) == 4 * len(FAMILIES)  # frozen: 4 a cell
    assert all(t in test for t in frozen("test") if t.level == "easy")  # the frozen cell is the first four
    content = [{(t.family, t.scenario, repr(t.truth)) for t in s} for s in (test, dev)]
    assert not content[0] & content[1] and not {t.task_id for t in test} & {t.task_id for t in dev}
    plan = LifelongPlan(levels=["easy"], families=["secret"], heldout_per_cell=PER_CELL, dev_per_cell=PER_CELL,
                        episode_split="generated")
    assert [t.task_id for t in eval_split(plan, "test")] == [t.task_id for t in test if t.family == "secret"]
    trained = {(t.scenario, repr(t.truth)) for t in training_tasks(plan.model_copy(update={"episodes_per_level": 200}),
                                                                   1)}
    assert not trained & {(t.scenario, repr(t.truth)) for t in test}


def test_the_starter_level_is_shorter_and_drops_negotiations_no_leak_rule() -> None:
    assert turn_limit(STARTER, 8) == 4 and turn_limit("easy", 8) == 8 and turn_limit(STARTER, 3) == 3
    easy, start = synthesize("negotiation", "easy", 5), synthesize("negotiation", STARTER, 5)
    assert all(a.forbidden for a in easy.agents) and not any(a.forbidden for a in start.agents)
    for task, passes in ((start, True), (easy, False)):  # saying the private limit breaks no rule at starter
        seller, buyer = task.names
        low = task.truth["seller_min"]
        said = [Utterance(agent=seller, text=f"My minimum is ${low}, so ${low} it is."),
                Utterance(agent=buyer, text=f"ACCEPT ${low}")]
        verdict = check(task, said)  # at easy the seller said its minimum: a leak, which never completes
        assert verdict.passed is passes and verdict.completion is passes and verdict.resolved_at == 1
    # always generated, never read from the frozen files; every family has a starter task
    assert len(split_tasks("test", [STARTER], FAMILIES, 6)) == 6 * len(FAMILIES)
    assert synthesize("werewolf", STARTER, 0).level == STARTER
    assert len(synthesize("mutual_friend", STARTER, 0).truth["lists"][0]) == 3
