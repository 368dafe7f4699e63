"""Verifiable social tasks: the families and their generator, code checkers, and the frozen dev and test splits.

`families` synthesises a task (public scenario, private goals, hidden truth) from (family, level,
seed); `checkers` read a transcript and the truth, never a judge; `splits` loads the frozen
evaluation splits shipped in ``data/``; `two_seat` and `multi_turn` are the tasks one model plays in
every seat (self-play), each level's prompts and checker in its module. The lifelong loop and self-play
both draw on them.
"""

from swm.tasks import multi_turn  # noqa: F401 - registers the multi-turn level's generator with synthesize
from swm.tasks.checkers import Utterance, Verdict
from swm.tasks.families import FAMILIES, GAME_FAMILIES, LEVELS, TASK_FAMILIES, AgentBrief, Task, synthesize
from swm.tasks.verify import check

__all__ = ["FAMILIES", "GAME_FAMILIES", "LEVELS", "TASK_FAMILIES", "AgentBrief", "Task", "Utterance", "Verdict",
           "check", "synthesize"]
