"""Verifiable social tasks: the families and their generator, code checkers, and the frozen dev and test splits.

`families` synthesises a task (public scenario, private goals, hidden truth) from (family, level,
seed); `checkers` read a transcript and the truth, never a judge; `splits` loads the frozen
evaluation splits shipped in ``data/``; `two_seat` and `multi_turn` are the tasks one model plays in
every seat (self-play); each generated level's prompts and checker are in its module, its row in
`levels`. The lifelong loop and self-play both draw on them.
"""

# each generated level's module registers its row with swm.tasks.levels (synthesize, check and self-play read them)
from swm.tasks import decisions, multi_turn, two_seat, two_turn  # noqa: F401
from swm.tasks.checkers import Utterance, Verdict
from swm.tasks.families import FAMILIES, GAME_FAMILIES, LEVELS, TASK_FAMILIES, AgentBrief, Task, synthesize
from swm.tasks.verify import check

__all__ = ["FAMILIES", "GAME_FAMILIES", "LEVELS", "TASK_FAMILIES", "AgentBrief", "Task", "Utterance", "Verdict",
           "check", "synthesize"]
