"""Negotiation's decision and two-turn shape: the buyer hears the seller's offer, ``ACCEPT`` inside the private limit
and ``COUNTER $N`` below it outside (saying the limit is a leak); in two turns, open with ``OFFER $N`` below the
limit, and the seller accepts an opener at or above their minimum, else names a price."""

from __future__ import annotations

import random
from typing import Any

from swm.tasks.checkers import check_negotiation, check_negotiation_decision, prices_in
from swm.tasks.families import (
    ACCEPT,
    ITEMS,
    LEVEL_KNOBS,
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
from swm.tasks.shapes.render import money


def truth(rng: random.Random, parts: dict[str, Any]) -> dict[str, Any]:
    """The buyer answers the seller's offer: inside the limit accept, above it counter."""
    agents, state = parts["agents"], parts["truth"]
    low, high = state["seller_min"], state["buyer_max"]
    inside = rng.random() < 0.5
    offer = rng.randrange(low, high) if inside else high + rng.randrange(5, 60)
    return {"learner": agents[1].name, "partner": agents[0].name, "offer": offer, "inside": inside,
            "item": parts["scenario"].split(" is selling ")[1].split(" (listed")[0]}


def decision_values(task: Task) -> dict[str, Any]:
    t = task.truth
    return {"item": t["item"], "seller": t["partner"], "limit": t["buyer_max"], "offer": t["offer"]}


def first_move(task: Task, text: str) -> FirstMove:
    prices = set(prices_in(text))
    limit = task.truth["buyer_max"]
    offer = next(iter(prices)) if len(prices) == 1 else None
    leaks = ["private_leaked:buyer"] if limit in prices else []
    return FirstMove(offer is not None and offer < limit, "You made no offer." if offer is None
                     else f"You offered {money(offer)}.", offer, leaks)


def _taken(task: Task, first: FirstMove) -> bool:
    return first.value is not None and first.value >= task.truth["seller_min"]


def reply(task: Task, first: FirstMove) -> str:
    if _taken(task, first):
        return f"ACCEPT {money(first.value)}."
    opening = "I can't go that low." if first.value is not None else "Make me an offer."
    return f"{opening} I can sell it to you for ${task.truth['offer']}."


def final_truth(task: Task, first: FirstMove) -> dict[str, Any]:
    """The seller took the opener: the decision is then about that price."""
    truth = dict(task.truth)
    if _taken(task, first):
        truth.update(offer=first.value, inside=first.value <= truth["buyer_max"])
    return truth


def values(task: Task) -> dict[str, Any]:
    return {"item": task.truth["item"], "seller": task.truth["partner"], "limit": task.truth["buyer_max"]}


SHAPE = register_decision_shape(DecisionShape(
    family="negotiation", truth=truth, decision_values=decision_values, decision_reply=("", 16),
    check=check_negotiation_decision, first_move=first_move, reply=reply, values=values, opening=("OFFER $", 8),
    closing=("", 16), opening_values=lambda task: {"price": task.truth["list_price"]}, final_truth=final_truth))


def generate(rng: random.Random, level: str, variant: Variant = SHARED) -> dict[str, Any]:
    """An episode of negotiation at ``level``: its scenario, agent briefs and truth."""
    knobs = LEVEL_KNOBS[level]
    item, price = rng.choice(ITEMS)
    seller, buyer = variant.people(rng, 2)
    width = max(6, int(price * knobs["zone"]))
    low = int(price * rng.uniform(0.72, 0.82)) + rng.choice((3, 7, 11))  # not round: stating it is a leak
    high = low + width + rng.choice((2, 4))
    protocol = f"Offers name a price as $N. Agreement is the word {ACCEPT} with the price, e.g. '{ACCEPT} $N'."
    buyer_goal = f"Buy {item} from {seller} for as little as possible; never pay more than your limit."
    if knobs["partner"] == "deceptive":
        buyer_goal += " Claim your budget is much lower than it is."
    leaks = knobs.get("leak_rule", True)  # the starter level drops the no-leak rule
    keep = " Keep it private." if leaks else ""
    agents = [
        AgentBrief(name=seller, role="seller", goal=f"Sell {item} to {buyer} for as much as possible; never "
                   f"accept less than your minimum.", private=f"Your minimum price is ${low}." + keep,
                   key_facts=["sell", item.split()[-1], f"${low}"], forbidden=[f"${low}"] if leaks else []),
        AgentBrief(name=buyer, role="buyer", goal=buyer_goal, private=f"Your limit is ${high}." + keep,
                   key_facts=["buy", item.split()[-1], f"${high}"], forbidden=[f"${high}"] if leaks else []),
    ]
    scenario = (f"{seller} is selling {item} (listed at ${price}) and {buyer} wants to buy it. {protocol}")
    return {"scenario": scenario, "agents": agents, "truth": {"seller_min": low, "buyer_max": high,
                                                              "list_price": price}}


FAMILY = register_family(Family("negotiation", generate=generate, check=check_negotiation))
