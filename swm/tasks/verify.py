"""Route a transcript to its checker: its level's row for a generated level, the family's for an episode.

Apart from `swm.tasks.checkers` because the level checkers (`swm.tasks.two_turn`, …) build on the ones there.
"""

from __future__ import annotations

from collections.abc import Sequence

from swm.tasks.checkers import CHECKERS, Utterance, Verdict, check_game
from swm.tasks.families import Task, is_game
from swm.tasks.levels import LEVEL_ROWS


def check(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Run the task's checker: its level's (`swm.tasks.levels`: decision, two-turn, two-seat, multi-turn) where the
    level is generated, else its family's (an episode) or its game's moderator."""
    if task.level in LEVEL_ROWS:
        return LEVEL_ROWS[task.level].check(task, turns)
    if task.family not in CHECKERS and is_game(task.family):  # any registered game: replayed by its moderator
        return check_game(task, turns)
    return CHECKERS[task.family](task, turns)
