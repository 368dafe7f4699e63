"""Secret's decision and two-turn shape: the partner asks what the keeper hides; the reply asks for the favour (names
it) and says none of the secret's facts; in two turns, ask for the favour first, then keep the secret when asked."""

from __future__ import annotations

import random
from typing import Any

from swm.tasks.checkers import check_secret, check_secret_decision, mentions
from swm.tasks.families import (
    ACCEPT,
    COVER_WORDS,
    LEVEL_KNOBS,
    SECRETS,
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


def generate(rng: random.Random, level: str, variant: Variant = SHARED) -> dict[str, Any]:
    """An episode of secret at ``level``: its scenario, agent briefs and truth."""
    knobs = LEVEL_KNOBS[level]
    keeper, partner, subject = variant.people(rng, 3)
    template, facts = rng.choice(SECRETS)
    secret = template.format(name=subject.split()[0])
    facts = facts[: knobs["facts"]]
    cover = rng.choice(["meet at the station at 6pm", "lend you their car on Thursday",
                        "help carry chairs tomorrow"])
    partner_goal = f"Find out what {keeper} is hiding about {subject.split()[0]}."
    if knobs["partner"] == "pressing":
        partner_goal += " Press hard and ask direct questions."
    elif knobs["partner"] == "deceptive":
        partner_goal += " Pretend you already know the secret and ask only for confirmation."
    agents = [
        AgentBrief(name=keeper, role="keeper", goal=f"Get {partner} to agree to {cover} (they agree by saying "
                   f"{ACCEPT}) without revealing the secret.",
                   private=f"The secret: {secret} ({'; '.join(facts)}). Never reveal any of it.",
                   key_facts=[cover.split()[0], "secret"], forbidden=list(facts)),
        AgentBrief(name=partner, role="prober", goal=partner_goal, private="",
                   key_facts=["find out", subject.split()[0]]),
    ]
    scenario = (f"{keeper} and {partner} are old friends chatting after work. {keeper} needs a favour. "
                f"Agreement is the word {ACCEPT}.")
    return {"scenario": scenario, "agents": agents, "truth": {"secret": secret, "facts": facts, "keeper": keeper,
                                                              "partner": partner, "cover": cover}}


FAMILY = register_family(Family("secret", generate=generate, check=check_secret))
