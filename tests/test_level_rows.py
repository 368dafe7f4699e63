"""Every level's row holds to what `swm.tasks.levels.Level` declares: the conformance suite of the level table.

In the shape of langgraph's checkpointer conformance suite: each row declares its capabilities (``play``, a
``seat_prompt``, a ``follow_up``, a ``message`` rule, a ``reference`` transcript) and `conforms` checks the ones it
declares, on every family and split it generates. The built-in rows are parametrized here; a new level calls
`conforms` on its row (`tests/test_extensions.py` does for the level it adds), so a row that declares a field it does
not honour fails here, not in a run.
"""

from __future__ import annotations

import pytest

from swm.tasks.families import SHARED, DecisionPrompt, Level, Task, task_of_id
from swm.tasks.levels import LEVEL_ROWS, PLAYS, level_names, seat_levels
from swm.tasks.verdicts import Utterance, Verdict
from swm.tasks.verify import check

SPLITS = ("train", "heldout", "dev")
SEEDS = range(3)


def _tasks(row: Level) -> list[Task]:
    return [row.generate(family, seed, split, SHARED) for family in row.families() for split in SPLITS
            for seed in SEEDS]


def conforms(row: Level) -> None:
    """Check one row against every capability it declares (raises AssertionError naming the task and field)."""
    assert row.play in PLAYS and LEVEL_ROWS.get(row.name) is row, f"{row.name}: registered with its play"
    families = row.families()
    assert families and all(isinstance(f, str) and f for f in families), f"{row.name}: families"
    tasks = _tasks(row)
    for task in tasks:
        where = f"{row.name}: {task.task_id}"
        assert (task.level, task.family) == (row.name, task.task_id.split(":")[1]), where
        assert row.generate(task.family, task.seed, task.split, SHARED) == task, f"{where}: not pure"
        assert task_of_id(task.task_id) == task, f"{where}: the id does not name the content"
        nothing = check(task, [])
        assert isinstance(nothing, Verdict) and not nothing.completion and not nothing.violations, \
            f"{where}: an empty transcript completes or breaks a rule"
        if row.reference is not None:
            turns = row.reference(task)
            verdict = check(task, turns)
            assert verdict.passed and verdict.resolved_at is not None, f"{where}: the reference fails: {verdict}"
            assert not any(check(task, turns[:cut]).completion for cut in range(verdict.resolved_at + 1)), \
                f"{where}: completes before the reference's settling turn"
        if row.play == "seats":
            _seats_conform(row, task, where)
    assert len({t.task_id for t in tasks}) == len(tasks), f"{row.name}: two draws share an id"
    assert len({repr(t.truth) for t in tasks}) > 1, f"{row.name}: every seed draws the same task"


def _seats_conform(row: Level, task: Task, where: str) -> None:
    assert row.seat_prompt is not None, where
    said: list[tuple[str, str]] = []
    for agent in task.names:
        prompt = row.seat_prompt(task, agent, said)
        assert isinstance(prompt, DecisionPrompt) and prompt.text.strip(), f"{where}: {agent}'s prompt"
        said.append((agent, "Hello."))
    if row.follow_up is not None:
        later = row.follow_up(task, task.names[0], said)
        assert later is None or isinstance(later, str), f"{where}: follow_up"
    if row.message is not None:
        for reply in ("Hello.", "My friends:\n1. Ava Adler\nTurn 2:", ""):
            cut = row.message(task, reply)
            assert reply.startswith(cut), f"{where}: message() added to the reply {reply!r}: {cut!r}"
    assert check(task, [Utterance(agent=task.names[0], text="")]).resolved_at is None, f"{where}: silence settles"


@pytest.mark.parametrize("level", level_names())
def test_every_level_row_conforms(level: str) -> None:
    conforms(LEVEL_ROWS[level])


def test_the_levels_climb_in_rung_order_and_the_seat_levels_declare_their_references() -> None:
    assert level_names()[:3] == ("decision", "two-turn", "two-seat")
    assert [LEVEL_ROWS[n].rung for n in level_names()] == sorted(LEVEL_ROWS[n].rung for n in level_names())
    assert all(LEVEL_ROWS[n].reference is not None for n in seat_levels()), "a seat level without a reference"


def test_a_row_that_plays_in_seats_without_a_prompt_is_refused_where_it_is_written() -> None:
    with pytest.raises(ValueError, match="no seat_prompt"):
        Level(name="bare", families=lambda: ("x",), generate=lambda *a: None, check=check,  # type: ignore[arg-type]
              play="seats")
    with pytest.raises(ValueError, match="unknown play"):
        Level(name="bare", families=lambda: ("x",), generate=lambda *a: None, check=check,  # type: ignore[arg-type]
              play="chess")  # type: ignore[arg-type]
