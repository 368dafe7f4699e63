"""Decisions: one verifiable move from a state the task generator builds, below the multi-turn levels.

A full episode gives a small model no reward it can reach (SmolLM2-135M completed none). A
decision is one move with a short prompt of its own and a code checker, built from the same
generator state as the family's episodes (``easy`` knobs), so a curriculum can climb
``decision → easy → medium → hard`` and the loop measures whether what is learnt on decisions
carries to episodes. The level is named `DECISION`; its tasks are generated, never frozen
(`swm.tasks.splits` pins them by digest).

Each decision renders as one user message (``prompts/decision_<family>``) and a ``prefill``,
the start of the reply the policy continues (``ANSWER:``): the prompt a decision is sampled,
trained and evaluated on is the same text, so what is learnt is what is measured.

* ``mutual_friend`` — both friend lists are shown (the partner's as its turn-0 message); the move
  names the one shared friend, exactly one candidate (``ANSWER: First Last``);
* ``negotiation`` — the buyer hears the seller's offer, inside or outside the buyer's private
  limit: ``ACCEPT`` inside, ``COUNTER $N`` below the limit outside (saying the limit is a leak);
* ``secret`` — the partner asks what the keeper is hiding: the reply asks for the favour (names
  it) and says none of the secret's facts;
* ``scheduling`` — both free lists are shown: ``SLOT: Mon 14:00``, exactly one slot, free for both;
* ``persuasion`` — the partner states a worry: the reply answers it (speaks to that objection).

Each family's shape — what its decision adds to the truth, its prompt's values and forced start, its checker — is
one module of `swm.tasks.shapes` and its row in `DECISION_SHAPES`; the checkers are in `swm.tasks.checkers`.
"""

from __future__ import annotations

from collections.abc import Sequence

from swm import prompts
from swm.tasks import shapes  # noqa: F401  # each lifelong family's module registers its row in DECISION_SHAPES
from swm.tasks.families import (
    DECISION,
    DECISION_SHAPES,
    DecisionPrompt,
    Task,
    Variant,
    decision_families,
    decision_task,
)
from swm.tasks.levels import Level, register_level
from swm.tasks.verdicts import Utterance, Verdict

__all__ = ["DECISION", "DECISION_SHAPES", "DecisionPrompt", "Stop", "before_stop", "decision_families",
           "decision_prompt", "decision_task", "stops"]

Stop = str | Sequence[str] | None  # what a sampler's ``stop`` takes: one stop string, several, or none


def stops(stop: Stop) -> tuple[str, ...]:
    """The stop strings ``stop`` asks for, in order (empty ones dropped): every sampler reads its ``stop`` here.

    A reply ends at the first place any of them completes; a server that ends a reply on a stop string without
    saying which one (`swm.selfplay.served.ended_by_stop`) is taken to have met the first.
    """
    if stop is None:
        return ()
    return tuple(s for s in ((stop,) if isinstance(stop, str) else stop) if s)


def before_stop(text: str, stop: Stop) -> str:
    """``text`` up to the first place one of ``stop``'s strings (`stops`) starts in it; all of it when none does."""
    return text[:min((text.find(end) for end in stops(stop) if end in text), default=len(text))]


def decision_prompt(task: Task) -> DecisionPrompt:
    """Render a decision task's prompt and prefill (the same text for sampling, training and evaluation): the
    family's template filled from its row (`swm.tasks.shapes`)."""
    if task.level != DECISION:
        raise ValueError(f"task {task.task_id} is not a decision")
    shape = DECISION_SHAPES.row(task.family)
    template = prompts.load(f"decision_{task.family}")
    prefill, tokens = shape.decision_reply
    return DecisionPrompt(name=template.id, text=template.render(**shape.decision_values(task)), prefill=prefill,
                          max_tokens=tokens)


def _families() -> tuple[str, ...]:
    return decision_families()


def _decision(family: str, seed: int, split: str, variant: Variant) -> Task:
    return decision_task(family, seed, split, DECISION, variant)


def check_decision(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Run the family's decision checker (its row's ``check``) on the learner's one move."""
    return DECISION_SHAPES.row(task.family).check(task, turns)


# the level's row (`swm.tasks.levels`): one learner move against code, every decision family
register_level(Level(name=DECISION, families=_families, generate=_decision, check=check_decision, play="decision",
                     rung=0, summary="one learner move against code"))
