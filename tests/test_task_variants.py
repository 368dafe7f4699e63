"""The generator's switches: name pools (training and evaluation disjoint by default) and longer friend lists."""

from __future__ import annotations

import re

import pytest

from swm.lifelong.jobs import shift_tasks, training_tasks
from swm.lifelong.plan import LifelongPlan
from swm.tasks.families import (
    DECISION,
    FIRST,
    LAST,
    NAME_POOLS,
    TWO_SEAT,
    TWO_TURN,
    Task,
    Variant,
    decision_families,
    synthesize,
    task_of_id,
    variant_for,
)
from swm.tasks.splits import decision_digest, split_tasks

# the shifted test cells, pinned as the standard splits are (tests/test_lifelong_decisions.py, test_two_turn.py)
SHIFT_PINS = {("unseen-names", DECISION): "1b74aa64c07c18bd", ("long-lists", DECISION): "8ff2127f50767b5d"}
# the two-seat splits of the results before 2026-11-28 (the shared pool), still drawn with names="shared"
TWO_SEAT_PINS = {("test", 200): "096c322ab04ba0eb", ("dev", 100): "ae02860eecf4ad20"}
NAME = re.compile(r"\b([A-Z][a-z]+) ([A-Z][a-z]+)\b")


def people(task: Task) -> set[str]:
    """Every full name a task shows or hides: its seats and, for mutual friend, every friend list."""
    found = set(task.names)
    for friends in task.truth.get("lists", []):
        found |= set(friends)
    return found


def test_the_pools_are_disjoint_and_the_unseen_pool_is_new() -> None:
    (train_first, train_last), (eval_first, eval_last) = NAME_POOLS["train"], NAME_POOLS["eval"]
    assert not set(train_first) & set(eval_first) and not set(train_last) & set(eval_last)
    assert set(train_first) | set(eval_first) == set(FIRST) and set(train_last) | set(eval_last) == set(LAST)
    unseen_first, unseen_last = NAME_POOLS["unseen"]
    assert not set(unseen_first) & set(FIRST) and not set(unseen_last) & set(LAST)
    assert "Nia" in eval_first  # the base model's favourite answer is a test name, never a training one


@pytest.mark.parametrize("level", [DECISION, TWO_TURN])
def test_training_and_test_names_never_meet_by_default(level: str) -> None:
    plan = LifelongPlan(levels=[level], families=list(decision_families()), episodes_per_level=100, samples_per_task=1,
                        cycles=1)
    train = {n for t in training_tasks(plan, 1) for n in people(t)}
    test = {n for t in split_tasks("test", [level], decision_families(), 40) for n in people(t)}
    dev = {n for t in split_tasks("dev", [level], decision_families(), 40) for n in people(t)}
    first = {n.split()[0] for n in train}
    assert train and test and not train & (test | dev) and not first & {n.split()[0] for n in test | dev}
    shared = LifelongPlan(levels=[level], families=list(decision_families()), episodes_per_level=100,
                          samples_per_task=1, cycles=1, names="shared")
    before = {n for t in training_tasks(shared, 1) for n in people(t)}
    assert before & {n for t in split_tasks("test", [level], decision_families(), 40, names="shared")
                     for n in people(t)}  # one shared pool: names met, as in the runs before the switch


def test_a_variant_is_named_in_the_id_and_the_id_gives_the_task_back() -> None:
    plain = synthesize("mutual_friend", DECISION, 3, split="heldout")
    assert plain.task_id == "heldout:mutual_friend:decision:3" and plain.generator == "tasks@v1"
    assert task_of_id(plain.task_id) == plain
    long = Variant(names="eval", friends=(8, 10))
    task = synthesize("mutual_friend", DECISION, 3, split="heldout", variant=long)
    assert task.task_id == "heldout:mutual_friend:decision:3:names=eval,friends=8-10"
    assert task.generator == "tasks@v1+names=eval,friends=8-10" and task_of_id(task.task_id) == task
    assert Variant.parse(long.tag) == long and Variant.parse("") == Variant()
    for level in ("easy", TWO_TURN):
        other = synthesize("secret", level, 1, variant=Variant(names="unseen"))
        assert task_of_id(other.task_id) == other and other.task_id.endswith(":names=unseen")
    with pytest.raises(ValueError, match="four names a list"):
        synthesize("mutual_friend", TWO_SEAT, 0, variant=long)
    with pytest.raises(ValueError, match="unknown name pool"):
        Variant(names="nope")


def test_long_lists_hold_8_to_10_names_with_one_friend_shared() -> None:
    tasks = split_tasks("test", [DECISION, TWO_TURN], ["mutual_friend"], 60, shift="long-lists")
    assert len(tasks) == 120 and all(t.task_id.endswith(":names=eval,friends=8-10") for t in tasks)
    lengths = {len(friends) for t in tasks for friends in t.truth["lists"]}
    assert lengths == {8, 9, 10}
    for t in tasks:
        mine, theirs = t.truth["lists"]
        assert set(mine) & set(theirs) == {t.truth["friend"]}
        assert {n.split()[0] for n in people(t)} <= set(NAME_POOLS["eval"][0])  # the test pool, longer lists


def test_unseen_names_come_from_no_other_pool() -> None:
    tasks = split_tasks("test", [DECISION], decision_families(), 20, shift="unseen-names")
    assert {t.family for t in tasks} == set(decision_families())
    shown = {n for t in tasks for n in people(t)}
    assert {n.split()[0] for n in shown} <= set(NAME_POOLS["unseen"][0])
    # the long-lists shift is mutual friend's alone, and no shift has episode cells
    assert {t.family for t in split_tasks("test", [DECISION], decision_families(), 2, shift="long-lists")} == {
        "mutual_friend"}
    assert split_tasks("test", ["easy"], decision_families(), 2, shift="unseen-names") == []


def test_the_shifted_cells_are_pinned_and_the_shared_two_seat_splits_did_not_move() -> None:
    for (shift, level), want in SHIFT_PINS.items():
        assert decision_digest("test", "mutual_friend", 200, level, shift=shift) == want
    for (split, n), want in TWO_SEAT_PINS.items():  # the disjoint pools' are pinned in test_two_seat.py
        assert decision_digest(split, "mutual_friend", n, level=TWO_SEAT, names="shared") == want
    assert variant_for(TWO_SEAT, "heldout") == Variant(names="eval") and variant_for("easy", "train") == Variant()
    assert variant_for(TWO_SEAT, "heldout", names="shared") == Variant()


def test_the_plan_holds_the_switches_and_an_old_stored_plan_goes_on_as_it_began() -> None:
    plan = LifelongPlan(levels=[DECISION], families=["mutual_friend"], eval_shifts=["unseen-names", "long-lists"],
                        shift_per_cell=3, heldout_per_cell=5)
    assert plan.names == "disjoint" and plan.balance and plan.balance_share == 0.15
    shifted = shift_tasks(plan)
    assert [t.task_id.rsplit(":", 1)[1] for t in shifted] == ["names=unseen"] * 3 + ["names=eval,friends=8-10"] * 3
    stored = plan.model_dump(mode="json")
    assert LifelongPlan.model_validate(stored) == plan
    for key in ("names", "balance", "balance_share", "eval_shifts", "shift_per_cell"):
        stored.pop(key)  # as a checkpoint written before the switches holds it
    old = LifelongPlan.model_validate(stored)
    assert (old.names, old.balance) == ("shared", False)
    with pytest.raises(ValueError, match="two different arms"):
        LifelongPlan(keep="wrong", gating=False)
