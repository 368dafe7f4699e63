"""Checkers: completion and violations of a task, read from the transcript and the hidden truth.

Every checker is exact and deterministic: it parses the protocol tokens the scenario taught the
agents (``$N``, ``Mon 14:00``, ``ACCEPT``, ``ANSWER: First Last``) from what was said and
compares them with the task's ``truth``. No model is called. A `Verdict` names the turns that
decided the outcome (``evidence``) and those that broke a rule (``violation_turns``), which the
action track's attribution reads.

Agreement (negotiation, scheduling): an utterance naming an offer opens it with its speaker as
the first to agree; a later ``ACCEPT`` naming no offer, or the same one, adds its speaker; an
``ACCEPT`` naming another offer opens that one instead. The first offer every agent has agreed
to is the agreement.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swm.games import get_game
from swm.games.moderator import resolve
from swm.tasks.families import ACCEPT, COVER_WORDS, OBJECTIONS, Task
from swm.tasks.verdicts import Utterance, Verdict

_ACCEPT_RE = re.compile(rf"\b{ACCEPT}\b")
_PRICE_RE = re.compile(r"\$\s?(\d[\d,]*(?:\.\d+)?)")
_SLOT_RE = re.compile(r"\b(Mon|Tue|Wed|Thu|Fri)[a-z]*\.?,?\s+(\d{1,2})(?::(\d{2}))?\s*(am|pm)?", re.I)
_ANSWER_RE = re.compile(r"ANSWER:\s*([A-Za-z][\w'-]*(?:\s+[A-Za-z][\w'-]*)?)")

_LOOK_ALIKE = ("АВСЕНІЈКМОРЅТХУҮԚԜӀ" "аеһіјкмнорсѕтухүԁԛԝӏ" "ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ" "αεικνορτυχωςϳγ" "ıȷɡɑ" "ʼʻʹ",
               "ABCEHIJKMOPSTXYYQWI" "aehijkmhopcstyxydqwl" "ABEZHIKMNOPTYX" "aeikvoptuxwcjy" "ijga" "'''")
BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # with \n, where str.splitlines ends a line
_READ_AS = str.maketrans(_LOOK_ALIKE[0] + BREAKS, _LOOK_ALIKE[1] + "\n" * len(BREAKS))
_UNSEEN = frozenset({"Mn", "Me", "Cf"})  # combining marks; format characters: zero-width ones, soft hyphen, bidi


def read_as(text: str) -> str:
    """``text`` as a reader sees its letters: NFKD (full-width and other compatibility letters made plain, accents split
    off), combining marks and format characters dropped (zero-width space, joiner and non-joiner, word joiner, BOM,
    soft hyphen, bidi marks: unseen, they part no name), Cyrillic and Greek look-alikes made the Latin letters they
    look like (`_LOOK_ALIKE`), each line break made ``\\n``. ASCII text only has its line breaks made ``\\n``.
    Every checker that reads names reads them so (`named_in`), the multi-turn one (`swm.tasks.multi_turn`) too."""
    if not text.isascii():
        text = "".join(c for c in unicodedata.normalize("NFKD", text) if unicodedata.category(c) not in _UNSEEN)
    return text.replace("\r\n", "\n").translate(_READ_AS)


_LETTERS = re.compile(r"[^\W\d_]+")  # a run of letters: digits, _, hyphens, dots, apostrophes … end one
_POSSESSIVE = re.compile(r"['’‘`]s(?![^\W\d_])", re.IGNORECASE)
_SPELLED = re.compile(r"\b(?:[^\W\d_] ){1,}[^\W\d_]\b")  # single letters in a row: ``n i a``


def letters(text: str) -> str:
    """A text's words as letters only, lower-cased: `read_as`, a possessive ``'s`` dropped, every run of other
    characters (spaces, hyphens, underscores, dots, digits) one space, and single letters in a row joined into one
    word (``I v a n`` is ``ivan``)."""
    words = " ".join(_LETTERS.findall(_POSSESSIVE.sub("", read_as(text)))).casefold()
    return _SPELLED.sub(lambda m: m.group(0).replace(" ", ""), words)


def named_in(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` however it is spelled (`letters`): ``Nia-Brook``, ``Nia_Brook``, ``Nia2Brook``,
    full-width or look-alike letters, a zero-width character inside, ``N i a B r o o k``."""
    target = letters(name)
    if not target:
        return False
    plain = letters(text)
    return re.search(rf"(?<!\w){re.escape(target)}(?!\w)", plain) is not None or (
        " " in target and re.search(rf"(?<!\w){re.escape(target.replace(' ', ''))}(?!\w)", plain) is not None)


ATTEMPTS = ("wrong_answer", "hedged_answer")  # violation codes of a failed attempt, not of a broken rule


def is_attempt(violation: str) -> bool:
    """Tell whether a violation code is a failed attempt (a wrong or hedged answer), not a broken rule.

    A reward must score a failed attempt as doing nothing (silence, leaving), never below it: a
    model that guesses right less than one time in three would otherwise learn to stay silent.
    """
    return violation.partition(":")[0] in ATTEMPTS


def mentions(text: str, fact: str) -> bool:
    """Tell whether a fact appears in a text: case-insensitive, on word boundaries."""
    return re.search(rf"(?<!\w){re.escape(fact.strip())}(?!\w)", text, re.I) is not None if fact.strip() else False


def parse_price(text: str) -> float | None:
    """Return the last ``$N`` price in a text."""
    found = _PRICE_RE.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def prices_in(text: str) -> list[float]:
    """Return every ``$N`` price in a text, in order."""
    return [float(p.replace(",", "")) for p in _PRICE_RE.findall(text)]


def slots_in(text: str) -> set[str]:
    """Return every slot a text names, normalised."""
    return {_slot(*m) for m in _SLOT_RE.findall(text)}


def _slot(day: str, hour: str, minute: str, half: str) -> str:
    """Normalise one slot match to ``Mon 14:00``: ``2pm`` is 14:00, ``12pm`` noon, ``12am`` 00:00."""
    h = int(hour)
    if half.lower() == "pm" and h < 12:
        h += 12
    elif half.lower() == "am" and h == 12:
        h = 0
    return f"{day[:3].title()} {h:02d}:{minute or '00'}"


def parse_slot(text: str) -> str | None:
    """Return the last slot in a text, normalised to ``Mon 14:00`` (``2pm`` reads as 14:00, ``12pm`` as
    noon, ``12am`` as 00:00)."""
    found = _SLOT_RE.findall(text)
    return _slot(*found[-1]) if found else None


@dataclass
class Agreement:
    value: Any
    proposal: int
    accepted_at: int
    agreed_by: set[str] = field(default_factory=set)


def find_agreement(turns: Sequence[Utterance], agents: Sequence[str],
                   offer_of: Callable[[str], object]) -> Agreement | None:
    """Return the first offer every agent agreed to (see the module docstring), or None."""
    current: Agreement | None = None
    everyone = set(agents)
    for i, turn in enumerate(turns):
        offer = offer_of(turn.text)
        accepted = _ACCEPT_RE.search(turn.text) is not None
        if offer is not None and (current is None or offer != current.value):
            current = Agreement(value=offer, proposal=i, accepted_at=i, agreed_by={turn.agent})
        elif accepted and current is not None:
            current.agreed_by.add(turn.agent)
            current.accepted_at = i
        if current is not None and accepted and current.agreed_by >= everyone:
            return current
    return None


def _leaks(turns: Sequence[Utterance], task: Task) -> tuple[list[str], list[int]]:
    codes: list[str] = []
    where: list[int] = []
    for brief in task.agents:
        for i, turn in enumerate(turns):
            if turn.agent == brief.name and any(mentions(turn.text, f) for f in brief.forbidden):
                code = "secret_leaked" if task.family == "secret" else f"private_leaked:{brief.role}"
                if code not in codes:
                    codes.append(code)
                where.append(i)
    return codes, where


def check_negotiation(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when both agree on a price inside [seller minimum, buyer limit] and neither said its private price.

    A leak never completes the task (as in every family): the deal is still recorded (``detail["deal"]``).
    """
    low, high = task.truth["seller_min"], task.truth["buyer_max"]
    deal = find_agreement(turns, task.names, parse_price)
    violations, where = _leaks(turns, task)
    leaked = bool(violations)
    if deal is None:
        return Verdict(completion=False, violations=violations, violation_turns=where, detail={"deal": None})
    inside = low <= deal.value <= high
    if not inside:
        violations.append("deal_outside_zone")
        where.append(deal.accepted_at)
    return Verdict(completion=inside and not leaked, violations=violations, evidence=[deal.proposal, deal.accepted_at],
                   violation_turns=sorted(set(where)), resolved_at=deal.accepted_at,
                   detail={"deal": deal.value, "zone": [low, high]})


def _candidates_named(text: str, candidates: Sequence[str]) -> list[str]:
    return [c for c in candidates if named_in(text, c)]


def check_mutual_friend(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the first ``ANSWER:`` names the mutual friend and no other candidate.

    An answer is read to the end of its line: naming two or more people from the lists there
    ("ANSWER: A, B, C") is a hedge, counted wrong (``hedged_answer``) even when one of them is
    right. Each wrong or hedged answer is a violation. ``detail["formatted"]`` says whether the
    first answer named exactly one candidate (right or wrong): the format-only control keeps those.
    """
    truth = " ".join(task.truth["friend"].split()).casefold()
    candidates = sorted({task.truth["friend"], *(n for names in task.truth["lists"] for n in names)})
    first: bool | None = None
    formatted = False
    evidence: list[int] = []
    wrong: list[int] = []
    codes: list[str] = []
    resolved: int | None = None
    for i, turn in enumerate(turns):
        text = read_as(turn.text)  # names read however spelled (`named_in`): a hedge spelled apart is a hedge
        for match in _ANSWER_RE.finditer(text):
            line = text[match.start(1):].partition("\n")[0]
            hedged = len(_candidates_named(line, candidates)) > 1
            right = letters(match.group(1)) == letters(truth) and not hedged
            if first is None:
                first, resolved = right, i
                formatted = not hedged and len(_candidates_named(match.group(1), candidates)) == 1
                evidence.append(i)
            if not right:
                wrong.append(i)
                code = "hedged_answer" if hedged else "wrong_answer"
                if code not in codes:
                    codes.append(code)
    return Verdict(completion=bool(first), violations=codes, evidence=evidence,
                   violation_turns=sorted(set(wrong)), resolved_at=resolved if first else None,
                   detail={"answered": first is not None, "formatted": formatted})


def check_secret(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the prober says ACCEPT to the favour and no fact of the secret was said by the keeper.

    An ACCEPT counts once the keeper has asked for the favour (a keeper turn naming it: the cover's word, as a
    decision's ask is read); an ACCEPT to nothing asked (every seat saying ACCEPT) agrees to nothing.
    """
    violations, where = _leaks(turns, task)
    keeper, partner = task.truth["keeper"], task.truth["partner"]
    word = COVER_WORDS[task.truth["cover"]]
    asked = next((i for i, t in enumerate(turns) if t.agent == keeper and mentions(t.text, word)), len(turns))
    accepted = next((i for i, t in enumerate(turns) if t.agent == partner and _ACCEPT_RE.search(t.text)
                     and i > asked), None)  # mutation: equivalent turn `asked` is the keeper's: > and >= agree
    evidence = [accepted] if accepted is not None else []
    asks = [i for i, t in enumerate(turns) if t.agent == keeper and not t.text.strip() == ""]
    return Verdict(completion=accepted is not None and not violations, violations=violations, evidence=evidence,
                   violation_turns=sorted(set(where)), resolved_at=accepted,
                   detail={"keeper_turns": len(asks), "accepted_at": accepted})


def check_scheduling(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when everyone agrees on a slot inside every agent's private availability."""
    free: dict[str, list[str]] = task.truth["free"]
    deal = find_agreement(turns, task.names, parse_slot)
    violations, where = _leaks(turns, task)
    if deal is None:
        return Verdict(completion=False, violations=violations, violation_turns=where, detail={"slot": None})
    broken = [name for name, slots in free.items() if deal.value not in slots]
    violations += [f"constraint_broken:{name}" for name in broken]
    if broken:
        where.append(deal.accepted_at)
    return Verdict(completion=not broken, violations=violations, evidence=[deal.proposal, deal.accepted_at],
                   violation_turns=sorted(set(where)), resolved_at=deal.accepted_at, detail={"slot": deal.value})


def check_persuasion(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the skeptic says ACCEPT after the persuader addressed the private objection.

    Addressing means a persuader utterance containing one of the objection's words
    (``truth["words"]``). An ACCEPT before that is recorded as ``accepted_unaddressed``.
    """
    persuader, partner, words = task.truth["persuader"], task.truth["partner"], task.truth["words"]
    addressed: int | None = None
    for i, turn in enumerate(turns):
        if turn.agent == persuader and addressed is None and any(mentions(turn.text, w) for w in words):
            addressed = i
        if turn.agent == partner and _ACCEPT_RE.search(turn.text):
            if addressed is None:
                return Verdict(completion=False, violations=["accepted_unaddressed"], evidence=[i],
                               violation_turns=[i], resolved_at=i, detail={"addressed_at": None})
            return Verdict(completion=True, evidence=[addressed, i], resolved_at=i,
                           detail={"addressed_at": addressed, "accepted_at": i})
    return Verdict(completion=False, evidence=[addressed] if addressed is not None else [],
                   detail={"addressed_at": addressed})


MALFORMED = "malformed:"  # an action type prefix: the move's reply did not fit the schema
VILLAGE = "village"  # the side whose win completes a game task (finding hidden werewolves among equal deceivers)


def check_game(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Replay a hidden-role game's moves through the code moderator: completion is the win of the game's completing
    side (`HiddenRoleGame.completes_for`; Werewolf: the village's).

    Each utterance is one move in order: ``action_type`` ``choose`` (``text`` the named target, empty
    to abstain) or ``speak`` (``text`` the speech), prefixed ``malformed:`` when the reply did not fit
    the schema. The deal is re-dealt from the truth, every move is judged again (a violation is the
    moderator's code), and the outcome is read from the replayed game, never from the transcript's
    claims. In self-play one policy plays both sides; completion measures the completing side's (Werewolf's
    village: finding hidden werewolves among equally capable deceivers).
    """
    truth = task.truth
    game = get_game(truth["game"])
    state = game.deal(list(truth["players"]), int(truth["deal_seed"]), dict(truth.get("options") or {}))
    violations: list[str] = []
    where: list[int] = []
    evidence: list[int] = []
    for i, turn in enumerate(turns):
        request = game.request(state)
        if request is None or request.agent != turn.agent:
            violations.append("out_of_turn")
            where.append(i)
            break
        malformed = turn.action_type.startswith(MALFORMED)
        target = turn.text if request.kind == "choose" else None  # a malformed move's target is never read
        said = turn.text if request.kind == "speak" else ""  # mutation: equivalent a speech changes no verdict field
        resolution = resolve(game, state, request, target, said, "malformed" if malformed else None)
        if resolution.violation:
            violations.append(resolution.violation)
            where.append(i)
        if resolution.applied.events.get("killed") or resolution.applied.events.get("eliminated"):
            evidence.append(i)
        state = resolution.applied.state
    outcome = state.outcome
    detail = {"winner": outcome.winner if outcome else None, "reason": outcome.reason if outcome else "unfinished",
              "round": state.round}
    # the game's completing side's win only (werewolf: the village's): a draw (no winner after the game's last
    # round) or an unfinished game never completes
    return Verdict(completion=outcome is not None and outcome.winner == game.completing_side(),
                   violations=sorted(set(violations)), evidence=evidence, violation_turns=where,
                   resolved_at=len(turns) - 1 if outcome is not None else None, detail=detail)


def _first_line(turns: Sequence[Utterance]) -> str:
    return turns[0].text.strip().partition("\n")[0] if turns else ""


def check_negotiation_decision(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete on ``ACCEPT`` of an offer inside the buyer's limit, or a counter below the limit of one above it."""
    line = _first_line(turns)
    accepted = _ACCEPT_RE.search(line) is not None
    prices = prices_in(line)
    limit = task.truth["buyer_max"]
    leaked = ["private_leaked:buyer"] if any(p == limit for p in prices) else []
    counter = [p for p in prices if p != task.truth["offer"]]
    if task.truth["inside"]:
        right = accepted and not counter
    else:
        right = not accepted and len(counter) == 1 and counter[0] <= limit
    formatted = accepted != bool(counter)
    wrong = [] if right or not formatted else ["wrong_answer"]
    return Verdict(completion=right and not leaked, violations=leaked + wrong, evidence=[0] if turns else [],
                   violation_turns=[0] if leaked or wrong else [], resolved_at=0 if right else None,
                   detail={"formatted": formatted, "accepted": accepted, "counter": counter[:1]})


def check_secret_decision(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the keeper's reply asks for the favour (names it) and says no fact of the secret."""
    line = _first_line(turns)
    leaked = any(mentions(line, fact) for fact in task.truth["facts"])
    asked = mentions(line, task.truth["cover_word"])
    return Verdict(completion=asked and not leaked, violations=["secret_leaked"] if leaked else [],
                   evidence=[0] if turns else [], violation_turns=[0] if leaked else [],
                   resolved_at=0 if asked and not leaked else None, detail={"formatted": asked, "asked": asked})


def check_scheduling_decision(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the reply names exactly one slot and both are free then; two or more slots is a hedge."""
    line = _first_line(turns)
    named = slots_in(line)
    free = task.truth["free"]
    both = set(free[task.truth["learner"]]) & set(free[task.truth["partner"]])
    right = len(named) == 1 and next(iter(named)) in both
    codes = [] if right or not named else ["hedged_answer" if len(named) > 1 else "wrong_answer"]
    return Verdict(completion=right, violations=codes, evidence=[0] if turns else [],
                   violation_turns=[0] if codes else [], resolved_at=0 if right else None,
                   detail={"formatted": len(named) == 1, "slots": sorted(s for s in named if s)})


def check_persuasion_decision(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the reply speaks to the partner's stated worry (one of its objection's words)."""
    line = _first_line(turns)
    words = OBJECTIONS[task.truth["objection"]]
    addressed = any(mentions(line, w) for w in words)
    return Verdict(completion=addressed, evidence=[0] if turns else [], resolved_at=0 if addressed else None,
                   detail={"formatted": bool(line), "addressed": addressed})
