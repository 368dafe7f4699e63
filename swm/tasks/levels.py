"""Levels as rows: each generated level's generator, families, checker, how it is played and, for a level one model
plays in every seat, its seats' prompts, follow-ups and messages, in one `Level` of `LEVEL_ROWS`.

A level's module registers its row (`register_level`): decisions (`swm.tasks.decisions`), two-turn exchanges with a
code partner (`swm.tasks.two_turn`), two-seat exchanges (`swm.tasks.two_seat`) and the multi-turn conversation at
each horizon (`swm.tasks.multi_turn`); `swm.tasks` imports them all. Everything that used to ask "which level is
this?" reads the row instead: `synthesize` and `level_families` (`swm.tasks.families`), `swm.tasks.check`, the
name policy (`variant_for`), the split builder, the self-play rollout and its served prompts, the seats env and the
CLI's ``--level`` (`seat_levels`, read when asked). A new level is its module and its row, nothing else
(`tests/test_levels.py` adds one in a test file and plays it).

The episode levels (``easy``, ``medium``, ``hard``, ``starter``) have no row: their tasks are the families'
(`swm.tasks.families.FAMILY_ROWS`: each row's generator and checker), played by the episode graph.

`Level` and `LEVEL_ROWS` are defined in `swm.tasks.families` beside the task model that reads them, and named here.
"""

from __future__ import annotations

from swm.tasks.families import (
    LEVEL_ROWS,
    PLAYS,
    DecisionPrompt,
    Level,
    Play,
    Said,
    Task,
    level_names,
    play_of,
    register_level,
)

# the row, its table and its fields live beside the task model (`swm.tasks.families`), which reads them; this module
# is where a caller finds them and what is asked of a level's row
__all__ = ["LEVEL_ROWS", "PLAYS", "Level", "Play", "Said", "follow_up", "is_seat_level", "level_names", "level_row",
           "message", "play_of", "register_level", "seat_levels", "seat_prompt"]


def level_row(level: str) -> Level:
    """Return a generated level's row, or fail naming the levels there are."""
    return LEVEL_ROWS.row(level)


def seat_levels() -> tuple[str, ...]:
    """Return the levels one model plays in every seat (two-seat, the multi-turn horizons, …), by ``rung``."""
    return tuple(name for name in level_names() if LEVEL_ROWS[name].play == "seats")


def is_seat_level(level: str) -> bool:
    """Whether one model plays every seat of ``level`` with the level's own prompts."""
    return play_of(level) == "seats"


def seat_prompt(task: Task, agent: str, said: Said) -> DecisionPrompt:
    """Render ``agent``'s next turn of a seat level's task from what was said so far (its row's ``seat_prompt``)."""
    row = level_row(task.level)
    if row.seat_prompt is None:
        raise ValueError(f"task {task.task_id} is not played in seats (level {task.level!r})")
    return row.seat_prompt(task, agent, said)


def follow_up(task: Task, agent: str, said: Said) -> str | None:
    """A later turn's message in ``agent``'s append-only chat where the level has its own, else None."""
    row = LEVEL_ROWS.get(task.level)
    return row.follow_up(task, agent, said) if row is not None and row.follow_up is not None else None


def message(task: Task, reply: str) -> str:
    """What a seat's reply says: cut by the level's own rule where it has one (multi-turn), else the whole reply."""
    row = LEVEL_ROWS.get(task.level)
    return row.message(task, reply) if row is not None and row.message is not None else reply
