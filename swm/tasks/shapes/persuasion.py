"""Persuasion's decision and two-turn shape: the partner states a worry and the reply answers it (speaks to that
objection); in two turns, ask a question first, hear the worry, then answer it."""

from __future__ import annotations

import random
from typing import Any

from swm.tasks.checkers import check_persuasion, check_persuasion_decision
from swm.tasks.families import (
    ACCEPT,
    CAUSES,
    LEVEL_KNOBS,
    OBJECTIONS,
    SHARED,
    STARTER,
    WORRIES,
    AgentBrief,
    DecisionShape,
    Family,
    FirstMove,
    Task,
    Variant,
    register_decision_shape,
    register_family,
)


def truth(rng: random.Random, parts: dict[str, Any]) -> dict[str, Any]:
    state = parts["truth"]
    return {"learner": state["persuader"], "partner": state["partner"], "worry": WORRIES[state["objection"]],
            "cause": parts["scenario"].split(" wants ", 1)[1].split(" to ", 1)[1].split(". ")[0]}


def decision_values(task: Task) -> dict[str, Any]:
    return {"partner": task.truth["partner"], "cause": task.truth["cause"], "worry": task.truth["worry"]}


def first_move(task: Task, text: str) -> FirstMove:
    ok = "?" in text
    partner = task.truth["partner"]
    return FirstMove(ok, f"You asked {partner} what worries them." if ok
                     else f"You did not ask {partner} what worries them.")


def reply(task: Task, first: FirstMove) -> str:
    return f"I'm not sure. {task.truth['worry']}" if first.ok else "I'm not sure."


def values(task: Task) -> dict[str, Any]:
    return {"partner": task.truth["partner"], "cause": task.truth["cause"]}


SHAPE = register_decision_shape(DecisionShape(
    family="persuasion", truth=truth, decision_values=decision_values, decision_reply=("", 48),
    check=check_persuasion_decision, first_move=first_move, reply=reply, values=values, opening=("", 24),
    closing=("", 48)))


def generate(rng: random.Random, level: str, variant: Variant = SHARED) -> dict[str, Any]:
    """An episode of persuasion at ``level``: its scenario, agent briefs and truth."""
    knobs = LEVEL_KNOBS[level]
    persuader, partner = variant.people(rng, 2)
    cause = rng.choice(CAUSES)
    kinds = sorted(OBJECTIONS)
    objection = rng.choice(kinds)
    decoy = rng.choice([k for k in kinds if k != objection])
    words = OBJECTIONS[objection] if level in ("easy", STARTER) else OBJECTIONS[objection][:3]
    partner_goal = (f"Decide whether to {cause}. Your real worry is {objection}. Say {ACCEPT} only once "
                    f"{persuader} has addressed it.")
    if knobs["partner"] == "deceptive":
        partner_goal += f" When asked, claim your worry is {decoy} instead."
    agents = [
        AgentBrief(name=persuader, role="persuader", goal=f"Convince {partner} to {cause}. They agree by "
                   f"saying {ACCEPT}.", private="", key_facts=["convince", cause.split()[-1]]),
        AgentBrief(name=partner, role="skeptic", goal=partner_goal, private=f"Your private objection: {objection}.",
                   key_facts=[objection, *words[:2]]),
    ]
    scenario = f"{persuader} wants {partner} to {cause}. {partner} is hesitant. Agreement is the word {ACCEPT}."
    return {"scenario": scenario, "agents": agents, "truth": {"objection": objection, "words": words,
                                                              "decoy": decoy, "persuader": persuader,
                                                              "partner": partner}}


FAMILY = register_family(Family("persuasion", generate=generate, check=check_persuasion))
