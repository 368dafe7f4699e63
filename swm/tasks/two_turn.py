"""Two-turn tasks: the learner's first move, a reply from a code partner, then the learner's verifiable decision.

The rung between a single decision and a full episode (``decision → two-turn → easy …``). A
two-turn task is the family's ``easy`` state (`swm.tasks.families.decision_task` with level
``two-turn``, its own seeds). The partner is deterministic code that replies from the
generator's hidden truth, so an exchange is cheap, reproducible and checkable: the same first
move always meets the same reply. No model plays the partner.

Each learner move has a short prompt of its own (``prompts/two_turn_<family>_open`` and
``..._close``), in the decision prompts' style. The second prompt restates the exchange in swm's
words: the first move as code read it (``said``: "You offered $300.") and the partner's reply
(``reply``). The learner's raw text never enters a prompt, so the prompt stays short, needs no
fence, and samples whose first moves mean the same meet at the same state (the same prompt).

* ``mutual_friend`` — ask for (or share) friends; the partner lists theirs; ``ANSWER: First Last``;
* ``negotiation`` — open with ``OFFER $N`` below the limit; the seller accepts an opener at or above
  their minimum, else names a price inside or outside the limit; ``ACCEPT`` or ``COUNTER $N``;
* ``secret`` — ask for the favour (name it), leaking nothing; the partner asks what is hidden;
  reply keeping the secret and asking again;
* ``scheduling`` — propose one of your own slots; the partner accepts a slot free for them, else
  lists their free slots; ``SLOT: Mon 14:00`` free for both;
* ``persuasion`` — ask a question; the partner states a worry; answer that worry.

The checker (`check_two_turn`) reuses the family's decision checker on the final move, from the
state the first move led to, and requires the first move (`read_first_move`). What differs by family — the first
move's reading, the partner, the prompts' values and forced starts — is the family's row in `DECISION_SHAPES`
(its module in `swm.tasks.shapes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swm import prompts
from swm.tasks.checkers import Utterance, Verdict
from swm.tasks.decisions import DecisionPrompt
from swm.tasks.families import (
    DECISION_SHAPES,
    TWO_TURN,
    FirstMove,
    Task,
    Variant,
    decision_families,
    decision_task,
)
from swm.tasks.levels import Level, register_level

__all__ = ["FirstMove", "check_two_turn", "closing_prompt", "final_truth", "opening_prompt", "partner_reply",
           "read_first_move"]

def read_first_move(task: Task, text: str) -> FirstMove:
    """Read the learner's first move: was it the move the shape asks for, and how the next prompt restates it."""
    return DECISION_SHAPES.row(task.family).first_move(task, text)


def final_truth(task: Task, first: FirstMove) -> dict[str, Any]:
    """Return the truth the final decision is checked against: the family's, with the state the first move led to."""
    shape = DECISION_SHAPES.row(task.family)
    return shape.final_truth(task, first) if shape.final_truth is not None else dict(task.truth)


def partner_reply(task: Task, first: FirstMove) -> str:
    """Return the code partner's reply to the first move, from the hidden truth (deterministic)."""
    return DECISION_SHAPES.row(task.family).reply(task, first)


def _require(task: Task) -> None:
    if task.level != TWO_TURN:
        raise ValueError(f"task {task.task_id} is not a two-turn task")


def opening_prompt(task: Task) -> DecisionPrompt:
    """Render the prompt of the learner's first move."""
    _require(task)
    shape = DECISION_SHAPES.row(task.family)
    template = prompts.load(f"two_turn_{task.family}_open")
    values = {**shape.values(task), **(shape.opening_values(task) if shape.opening_values else {})}
    prefill, tokens = shape.opening
    return DecisionPrompt(name=template.id, text=template.render(**values), prefill=prefill, max_tokens=tokens)


def closing_prompt(task: Task, first: FirstMove) -> DecisionPrompt:
    """Render the prompt of the learner's decision: the first move as code read it and the partner's reply."""
    _require(task)
    shape = DECISION_SHAPES.row(task.family)
    template = prompts.load(f"two_turn_{task.family}_close")
    text = template.render(**shape.values(task), said=first.said, reply=partner_reply(task, first))
    prefill, tokens = shape.closing
    return DecisionPrompt(name=template.id, text=text, prefill=prefill, max_tokens=tokens)


def check_two_turn(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the first move is the one the shape asks for and the final decision passes its family's checker.

    The learner's first turn is the first move, its second the decision; the partner's turn is
    not read (the code partner's reply follows from the first move). A private fact said in the
    first move is a violation, as in the decision.
    """
    learner = task.truth["learner"]
    mine = [i for i, t in enumerate(turns) if t.agent == learner]
    if not mine:
        return Verdict(completion=False, detail={"first_move": False, "formatted": False, "answered": False})
    first = read_first_move(task, turns[mine[0]].text)
    if len(mine) < 2:
        return Verdict(completion=False, violations=first.leaks, violation_turns=[mine[0]] if first.leaks else [],
                       detail={"first_move": first.ok, "formatted": False, "answered": False})
    at = mine[1]
    decided = DECISION_SHAPES.row(task.family).check(task.model_copy(update={"truth": final_truth(task, first)}),
                                                     [turns[at]])
    violations = list(dict.fromkeys([*first.leaks, *decided.violations]))
    where = ([mine[0]] if first.leaks else []) + ([at] if decided.violation_turns else [])
    completion = first.ok and decided.completion and not first.leaks
    return Verdict(completion=completion, violations=violations, evidence=[mine[0], *(at for _ in decided.evidence)],
                   violation_turns=where, resolved_at=at if completion else None,
                   detail={**decided.detail, "first_move": first.ok, "said": first.said,
                           "formatted": first.ok and bool(decided.detail.get("formatted"))})


def _families() -> tuple[str, ...]:
    return decision_families()


def _two_turn(family: str, seed: int, split: str, variant: Variant) -> Task:
    return decision_task(family, seed, split, TWO_TURN, variant)


# the level's row (`swm.tasks.levels`): the learner's move, a code partner's reply, the learner's second move
register_level(Level(name=TWO_TURN, families=_families, generate=_two_turn, check=check_two_turn, play="two-turn",
                     rung=1, summary="the learner's move, a code partner's reply, the learner's second move"))
