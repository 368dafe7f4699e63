"""The lifelong families: one module a family, each registering its `Family` row and its `DecisionShape`.

A family's module holds its episode generator (its row in `FAMILY_ROWS`, with its episode checker), what its decision
adds to the generator's truth, its prompts' values and forced starts, its two-turn first move, code partner and final
state, and names its checkers (`swm.tasks.checkers`): nothing else in swm asks which family a task is. They are
imported here in the order their splits are generated in (a new family goes last, so the pinned splits keep their
tasks); `swm.tasks.families.synthesize`, `swm.tasks.verify.check`, `swm.tasks.decisions` and `swm.tasks.two_turn`
read the rows.
"""

# isort: off
from swm.tasks.shapes import negotiation  # noqa: F401
from swm.tasks.shapes import mutual_friend  # noqa: F401
from swm.tasks.shapes import secret  # noqa: F401
from swm.tasks.shapes import scheduling  # noqa: F401
from swm.tasks.shapes import persuasion  # noqa: F401
# isort: on
