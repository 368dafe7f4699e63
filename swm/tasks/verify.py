"""Route a transcript to its checker: the family's for an episode, the decision's, or two-turn's.

Apart from `swm.tasks.checkers` because the two-turn checker (`swm.tasks.two_turn`) builds on the
decision checkers there.
"""

from __future__ import annotations

from collections.abc import Sequence

from swm.tasks.checkers import CHECKERS, DECISION_CHECKERS, Utterance, Verdict, check_game
from swm.tasks.families import DECISION, MULTI_TURN_LEVELS, TWO_SEAT, TWO_TURN, Task, is_game
from swm.tasks.multi_turn import check_multi_turn
from swm.tasks.two_seat import check_two_seat
from swm.tasks.two_turn import check_two_turn


def check(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Run the task's checker on a transcript (the decision checker for a decision, two-turn's or two-seat's)."""
    if task.level == TWO_TURN:
        return check_two_turn(task, turns)
    if task.level == TWO_SEAT:
        return check_two_seat(task, turns)
    if task.level in MULTI_TURN_LEVELS:
        return check_multi_turn(task, turns)
    if task.level == DECISION:
        return DECISION_CHECKERS[task.family](task, turns)
    if task.family not in CHECKERS and is_game(task.family):  # any registered game: replayed by its moderator
        return check_game(task, turns)
    return CHECKERS[task.family](task, turns)
