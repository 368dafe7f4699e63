"""Scheduling's decision and two-turn shape: both free lists shown, one slot free for both (``SLOT: Mon 14:00``); in
two turns, propose one of your own slots, hear it accepted or the partner's free list, then decide."""

from __future__ import annotations

import random
from typing import Any

from swm.tasks.checkers import check_scheduling, check_scheduling_decision, slots_in
from swm.tasks.families import (
    ACCEPT,
    DAYS,
    HOURS,
    LEVEL_KNOBS,
    SHARED,
    STARTER,
    AgentBrief,
    DecisionShape,
    Family,
    FirstMove,
    Task,
    Variant,
    _slot,
    register_decision_shape,
    register_family,
)
from swm.tasks.shapes.render import bullets


def truth(rng: random.Random, parts: dict[str, Any]) -> dict[str, Any]:
    agents = parts["agents"]
    return {"learner": agents[0].name, "partner": agents[1].name}


def decision_values(task: Task) -> dict[str, Any]:
    free = task.truth["free"]
    return {"mine": bullets(free[task.truth["learner"]]), "partner": task.truth["partner"],
            "theirs": bullets(free[task.truth["partner"]])}


def first_move(task: Task, text: str) -> FirstMove:
    named = slots_in(text)
    slot = next(iter(named)) if len(named) == 1 else None
    ok = slot is not None and slot in task.truth["free"][task.truth["learner"]]
    return FirstMove(ok, f"You proposed {slot}." if slot else "You proposed no slot.", slot)


def reply(task: Task, first: FirstMove) -> str:
    theirs = task.truth["free"][task.truth["partner"]]
    if first.value in theirs:
        return f"ACCEPT {first.value}."
    return "I can't make that. I am free at:\n" + bullets(theirs)


def values(task: Task) -> dict[str, Any]:
    return {"mine": bullets(task.truth["free"][task.truth["learner"]]), "partner": task.truth["partner"]}


SHAPE = register_decision_shape(DecisionShape(
    family="scheduling", truth=truth, decision_values=decision_values, decision_reply=("SLOT:", 12),
    check=check_scheduling_decision, first_move=first_move, reply=reply, values=values, opening=("SLOT:", 12),
    closing=("SLOT:", 12), answer="SLOT:"))


def generate(rng: random.Random, level: str, variant: Variant = SHARED) -> dict[str, Any]:
    """An episode of scheduling at ``level``: its scenario, agent briefs and truth."""
    knobs = LEVEL_KNOBS[level]
    names = variant.people(rng, knobs["agents"])
    every = [_slot(d, h) for d in DAYS for h in HOURS]
    common = rng.sample(every, knobs["common"])
    rest = [s for s in every if s not in common]
    free: list[list[str]] = []
    pool = rest[:]
    rng.shuffle(pool)
    per = 4 if level in ("easy", STARTER) else 6
    for i, _ in enumerate(names):
        own = pool[i * per:(i + 1) * per] + common
        free.append(sorted(own, key=every.index))
    briefs = [AgentBrief(name=n, role="scheduler", goal="Agree on a one-hour meeting slot that you are free for. "
                         f"Propose slots as 'Mon 14:00'; agree with '{ACCEPT} Mon 14:00'.",
                         private="You are free only at: " + ", ".join(f) + ".", key_facts=f[:3])
              for n, f in zip(names, free, strict=True)]
    scenario = (f"{', '.join(names)} must schedule a one-hour project meeting this week. Each has private "
                f"constraints. Everyone must say {ACCEPT} with the same slot.")
    return {"scenario": scenario, "agents": briefs, "truth": {"free": dict(zip(names, free, strict=True)),
                                                              "common": sorted(common, key=every.index)}}


FAMILY = register_family(Family("scheduling", generate=generate, check=check_scheduling))
