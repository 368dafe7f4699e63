"""Mutual friend's decision and two-turn shape: both lists shown, the one shared friend named (``ANSWER: First Last``);
in two turns, ask for the partner's friends, hear them, then answer."""

from __future__ import annotations

import random
import re
from typing import Any

from swm.tasks.checkers import check_mutual_friend, mentions
from swm.tasks.families import (
    LEVEL_KNOBS,
    NAME_POOLS,
    SHARED,
    AgentBrief,
    DecisionShape,
    Family,
    FirstMove,
    Task,
    Variant,
    register_decision_shape,
    register_family,
)
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


def generate(rng: random.Random, level: str, variant: Variant = SHARED) -> dict[str, Any]:
    """An episode of mutual friend at ``level``: its scenario, agent briefs and truth."""
    knobs = LEVEL_KNOBS[level]
    agents_names = variant.people(rng, knobs["agents"])
    friend = variant.people(rng, 1, set(agents_names))[0]
    taken = set(agents_names) | {friend}
    lists: list[list[str]] = []
    for _ in agents_names:
        size = knobs["list"] if variant.friends is None else rng.randint(*variant.friends)
        others = variant.people(rng, size - 1, taken)
        taken |= set(others)
        lists.append(others)
    if level == "hard":  # a near-duplicate distractor: same first name, another last name, in every list
        first = friend.split()[0]
        twin = f"{first} {rng.choice([x for x in NAME_POOLS[variant.names][1] if x != friend.split()[1]])}"
        for i, friends in enumerate(lists):
            if twin not in friends and i > 0:
                friends[0] = twin
    for friends in lists:
        friends.insert(rng.randrange(len(friends) + 1), friend)
    briefs = [AgentBrief(name=n, role="finder", goal="Find the one friend you have in common with the others and "
                         "announce it as 'ANSWER: First Last'.", private="Your friends: " + ", ".join(f) + ".",
                         key_facts=f[:3]) for n, f in zip(agents_names, lists, strict=True)]
    scenario = (f"{', '.join(agents_names)} meet at a conference and discover they share exactly one friend. "
                "Each knows only their own friend list. Announce the answer as 'ANSWER: First Last'.")
    return {"scenario": scenario, "agents": briefs, "truth": {"friend": friend, "lists": lists}}


FAMILY = register_family(Family("mutual_friend", generate=generate, check=check_mutual_friend))
