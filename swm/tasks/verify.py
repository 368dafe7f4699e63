"""Route a transcript to its checker: its level's row for a generated level, the family's for an episode.

Apart from `swm.tasks.checkers` because the level checkers (`swm.tasks.two_turn`, …) build on the ones there.
"""

from __future__ import annotations

from collections.abc import Sequence

from swm.tasks.checkers import Utterance, Verdict, check_game
from swm.tasks.families import FAMILY_ROWS, Task, is_game, task_families
from swm.tasks.levels import LEVEL_ROWS


def check(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Run the task's checker: its level's (`swm.tasks.levels`: decision, two-turn, two-seat, multi-turn) where the
    level is generated, else its family's row's (an episode, `swm.tasks.families.FAMILY_ROWS`) or its game's
    moderator."""
    if task.level in LEVEL_ROWS:
        return LEVEL_ROWS[task.level].check(task, turns)
    if task.family in FAMILY_ROWS:  # a lifelong family's row names its episode checker
        return FAMILY_ROWS[task.family].check(task, turns)
    if is_game(task.family):  # any registered game: replayed by its moderator
        return check_game(task, turns)
    raise ValueError(f"unknown task family {task.family!r}; families are {', '.join(task_families())}")
