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
state the first move led to, and requires the first move (`read_first_move`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from swm import prompts
from swm.tasks.checkers import DECISION_CHECKERS, Utterance, Verdict, mentions, prices_in, slots_in
from swm.tasks.decisions import DecisionPrompt
from swm.tasks.families import DECISION_FAMILIES, TWO_TURN, Task, Variant, decision_task
from swm.tasks.levels import Level, register_level

_FRIENDS_RE = re.compile(r"friend|list|know", re.I)


@dataclass(frozen=True)
class FirstMove:
    """What code reads from the learner's first move."""

    ok: bool  # the move the shape asks for was made
    said: str  # the move as the next prompt restates it
    value: Any = None  # the parsed offer or slot
    leaks: list[str] = field(default_factory=list)  # violation codes of a private fact said


def _bullets(names: Sequence[str]) -> str:
    return "\n".join(f"- {name}" for name in names)


def _money(value: float) -> str:
    return f"${value:g}"


def read_first_move(task: Task, text: str) -> FirstMove:
    """Read the learner's first move: was it the move the shape asks for, and how the next prompt restates it."""
    truth, partner = task.truth, task.truth["partner"]
    if task.family == "mutual_friend":
        mine = truth["lists"][0]
        ok = "ANSWER" not in text and ("?" in text or bool(_FRIENDS_RE.search(text))
                                       or any(mentions(text, name) for name in mine))
        return FirstMove(ok, f"You asked {partner} for their friends." if ok
                         else f"You did not ask {partner} for their friends.")
    if task.family == "negotiation":
        prices = set(prices_in(text))
        limit = truth["buyer_max"]
        offer = next(iter(prices)) if len(prices) == 1 else None
        leaks = ["private_leaked:buyer"] if limit in prices else []
        return FirstMove(offer is not None and offer < limit, "You made no offer." if offer is None
                         else f"You offered {_money(offer)}.", offer, leaks)
    if task.family == "secret":
        asked = mentions(text, truth["cover_word"])
        leaks = ["secret_leaked"] if any(mentions(text, fact) for fact in truth["facts"]) else []
        return FirstMove(asked and not leaks, f"You asked {partner} to {truth['cover']}." if asked
                         else "You did not ask for the favour yet.", None, leaks)
    if task.family == "scheduling":
        named = slots_in(text)
        slot = next(iter(named)) if len(named) == 1 else None
        ok = slot is not None and slot in truth["free"][truth["learner"]]
        return FirstMove(ok, f"You proposed {slot}." if slot else "You proposed no slot.", slot)
    ok = "?" in text
    return FirstMove(ok, f"You asked {partner} what worries them." if ok
                     else f"You did not ask {partner} what worries them.")


def final_truth(task: Task, first: FirstMove) -> dict[str, Any]:
    """Return the truth the final decision is checked against: the family's, with the state the first move led to."""
    truth = dict(task.truth)
    if task.family == "negotiation" and first.value is not None and first.value >= truth["seller_min"]:
        truth.update(offer=first.value, inside=first.value <= truth["buyer_max"])  # the seller took the opener
    return truth


def partner_reply(task: Task, first: FirstMove) -> str:
    """Return the code partner's reply to the first move, from the hidden truth (deterministic)."""
    truth = task.truth
    if task.family == "mutual_friend":
        return f"My friends:\n{_bullets(truth['lists'][1])}" if first.ok else "Nice to meet you!"
    if task.family == "negotiation":
        if first.value is not None and first.value >= truth["seller_min"]:
            return f"ACCEPT {_money(first.value)}."
        opening = "I can't go that low." if first.value is not None else "Make me an offer."
        return f"{opening} I can sell it to you for ${truth['offer']}."
    if task.family == "secret":
        favour = f"Maybe I can help with the {truth['cover_word']}. " if first.ok else ""
        return f"{favour}But you seem busy lately. What are you hiding?"
    if task.family == "scheduling":
        theirs = truth["free"][truth["partner"]]
        if first.value in theirs:
            return f"ACCEPT {first.value}."
        return f"I can't make that. I am free at:\n{_bullets(theirs)}"
    return f"I'm not sure. {truth['worry']}" if first.ok else "I'm not sure."


def _slots_of(task: Task) -> dict[str, Any]:
    """Return the template values both prompts of a family share."""
    truth, family = task.truth, task.family
    if family == "mutual_friend":
        return {"mine": _bullets(truth["lists"][0]), "partner": truth["partner"]}
    if family == "scheduling":
        return {"mine": _bullets(truth["free"][truth["learner"]]), "partner": truth["partner"]}
    if family == "negotiation":
        return {"item": truth["item"], "seller": truth["partner"], "limit": truth["buyer_max"]}
    if family == "secret":
        return {"keeper": truth["learner"], "secret": truth["secret"], "facts": "; ".join(truth["facts"]),
                "partner": truth["partner"], "cover": truth["cover"]}
    return {"partner": truth["partner"], "cause": truth["cause"]}


# the reply's forced start and its length limit, per family: the same for both moves of a shape
_PREFILL = {"mutual_friend": ("", 24), "negotiation": ("OFFER $", 8), "secret": ("", 48),
            "scheduling": ("SLOT:", 12), "persuasion": ("", 24)}
_CLOSE = {"mutual_friend": ("ANSWER:", 24), "negotiation": ("", 16), "secret": ("", 48),
          "scheduling": ("SLOT:", 12), "persuasion": ("", 48)}


def _require(task: Task) -> None:
    if task.level != TWO_TURN:
        raise ValueError(f"task {task.task_id} is not a two-turn task")


def opening_prompt(task: Task) -> DecisionPrompt:
    """Render the prompt of the learner's first move."""
    _require(task)
    template = prompts.load(f"two_turn_{task.family}_open")
    values = _slots_of(task)
    if task.family == "negotiation":
        values["price"] = task.truth["list_price"]
    prefill, tokens = _PREFILL[task.family]
    return DecisionPrompt(name=template.id, text=template.render(**values), prefill=prefill, max_tokens=tokens)


def closing_prompt(task: Task, first: FirstMove) -> DecisionPrompt:
    """Render the prompt of the learner's decision: the first move as code read it and the partner's reply."""
    _require(task)
    template = prompts.load(f"two_turn_{task.family}_close")
    text = template.render(**_slots_of(task), said=first.said, reply=partner_reply(task, first))
    prefill, tokens = _CLOSE[task.family]
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
    decided = DECISION_CHECKERS[task.family](task.model_copy(update={"truth": final_truth(task, first)}),
                                             [turns[at]])
    violations = list(dict.fromkeys([*first.leaks, *decided.violations]))
    where = ([mine[0]] if first.leaks else []) + ([at] if decided.violation_turns else [])
    completion = first.ok and decided.completion and not first.leaks
    return Verdict(completion=completion, violations=violations, evidence=[mine[0], *(at for _ in decided.evidence)],
                   violation_turns=where, resolved_at=at if completion else None,
                   detail={**decided.detail, "first_move": first.ok, "said": first.said,
                           "formatted": first.ok and bool(decided.detail.get("formatted"))})


def _families() -> tuple[str, ...]:
    return DECISION_FAMILIES


def _two_turn(family: str, seed: int, split: str, variant: Variant) -> Task:
    return decision_task(family, seed, split, TWO_TURN, variant)


# the level's row (`swm.tasks.levels`): the learner's move, a code partner's reply, the learner's second move
register_level(Level(name=TWO_TURN, families=_families, generate=_two_turn, check=check_two_turn, play="two-turn",
                     rung=1, summary="the learner's move, a code partner's reply, the learner's second move"))
