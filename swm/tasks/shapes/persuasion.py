"""Persuasion's decision and two-turn shape: the partner states a worry and the reply answers it (speaks to that
objection); in two turns, ask a question first, hear the worry, then answer it."""

from __future__ import annotations

import random
from typing import Any

from swm.tasks.checkers import check_persuasion_decision
from swm.tasks.families import WORRIES, DecisionShape, FirstMove, Task, register_decision_shape


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
