"""Mutual friend's decision and two-turn shape: both lists shown, the one shared friend named (``ANSWER: First Last``);
in two turns, ask for the partner's friends, hear them, then answer."""

from __future__ import annotations

import random
import re
from typing import Any

from swm.tasks.checkers import check_mutual_friend, mentions
from swm.tasks.families import DecisionShape, FirstMove, Task, register_decision_shape
from swm.tasks.shapes.render import bullets

_FRIENDS_RE = re.compile(r"friend|list|know", re.I)


def truth(rng: random.Random, parts: dict[str, Any]) -> dict[str, Any]:
    agents = parts["agents"]
    return {"learner": agents[0].name, "partner": agents[1].name}


def decision_values(task: Task) -> dict[str, Any]:
    mine, theirs = task.truth["lists"][0], task.truth["lists"][1]
    return {"mine": bullets(mine), "partner": task.truth["partner"], "theirs": bullets(theirs)}


def first_move(task: Task, text: str) -> FirstMove:
    partner, mine = task.truth["partner"], task.truth["lists"][0]
    ok = "ANSWER" not in text and ("?" in text or bool(_FRIENDS_RE.search(text))
                                   or any(mentions(text, name) for name in mine))
    return FirstMove(ok, f"You asked {partner} for their friends." if ok
                     else f"You did not ask {partner} for their friends.")


def reply(task: Task, first: FirstMove) -> str:
    return f"My friends:\n{bullets(task.truth['lists'][1])}" if first.ok else "Nice to meet you!"


def values(task: Task) -> dict[str, Any]:
    return {"mine": bullets(task.truth["lists"][0]), "partner": task.truth["partner"]}


SHAPE = register_decision_shape(DecisionShape(
    family="mutual_friend", truth=truth, decision_values=decision_values, decision_reply=("ANSWER:", 24),
    check=check_mutual_friend, first_move=first_move, reply=reply, values=values, opening=("", 24),
    closing=("ANSWER:", 24), answer="ANSWER:"))
