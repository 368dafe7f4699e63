"""Secret's decision and two-turn shape: the partner asks what the keeper hides; the reply asks for the favour (names
it) and says none of the secret's facts; in two turns, ask for the favour first, then keep the secret when asked."""

from __future__ import annotations

import random
from typing import Any

from swm.tasks.checkers import check_secret_decision, mentions
from swm.tasks.families import COVER_WORDS, DecisionShape, FirstMove, Task, register_decision_shape


def truth(rng: random.Random, parts: dict[str, Any]) -> dict[str, Any]:
    state = parts["truth"]
    return {"learner": state["keeper"], "partner": state["partner"], "cover_word": COVER_WORDS[state["cover"]]}


def values(task: Task) -> dict[str, Any]:
    t = task.truth
    return {"keeper": t["learner"], "secret": t["secret"], "facts": "; ".join(t["facts"]), "partner": t["partner"],
            "cover": t["cover"]}


def first_move(task: Task, text: str) -> FirstMove:
    asked = mentions(text, task.truth["cover_word"])
    leaks = ["secret_leaked"] if any(mentions(text, fact) for fact in task.truth["facts"]) else []
    return FirstMove(asked and not leaks, f"You asked {task.truth['partner']} to {task.truth['cover']}." if asked
                     else "You did not ask for the favour yet.", None, leaks)


def reply(task: Task, first: FirstMove) -> str:
    favour = f"Maybe I can help with the {task.truth['cover_word']}. " if first.ok else ""
    return f"{favour}But you seem busy lately. What are you hiding?"


SHAPE = register_decision_shape(DecisionShape(
    family="secret", truth=truth, decision_values=values, decision_reply=("", 48), check=check_secret_decision,
    first_move=first_move, reply=reply, values=values, opening=("", 48), closing=("", 48)))
