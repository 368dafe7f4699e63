"""The multi-turn two-seat task: a conversation that is necessary, checked by code (level ``multi-turn``).

Mutual friend with long lists: seat A (role ``opener``, speaks first) and seat B (role
``responder``) each hold 8–12 friends (`LIST_RANGE`), exactly one shared, and **one message may
name at most three people** (`CAP`), so neither seat can tell its whole list at once: they take
turns, ask about a few names, say which are not theirs, and narrow it down. The pair succeeds when
**both** seats name the shared friend (``ANSWER: First Last``) within the turn budget (`BUDGET`
messages, seats alternating A, B, A, B…). **Horizons** (`HORIZONS`): the same task at 4 and 6 messages with shorter
lists is level ``multi-turn-4`` (4–5 friends a seat) and ``multi-turn-6`` (6–8), the rungs below ``multi-turn`` (8
messages, 8–12 friends); each level's splits are its own (the level is part of the seed string). Everything the task
needs is here: the generator
(`multi_turn_task`, registered into `swm.tasks.families.synthesize`'s table), the seat prompt
(`seat_prompt`, ``prompts/multi_turn_mutual_friend``) and the checker (`check_multi_turn`).

The checker's rules (``truth`` holds the lists, the friend, ``cap`` and ``budget``):

* **people named** in a message (`people_named`): a list name written in full (``Uma Adler``), or
  a list first or last name written alone (``Uma``, ``Adler``), each person once; a first or last
  name also part of a full name in the same message is that person, not another one; the seats' own
  names are not counted. A name counts however it is spelled, since the partner reads it as that name
  (`read_as`, `_words`): ``Ivan-Khan``, ``Ivan_Khan``, ``Ivan2Khan``, ``Ivan's``, full-width letters,
  Cyrillic or Greek look-alike letters, accents, a zero-width character or soft hyphen inside,
  ``I v a n``, ``I.v.a.n``; only the task's names are looked for, so no ordinary word becomes one.
  A message naming more than ``cap`` people breaks the rule
  (``too_many_names``, a violation of the seat that said it) and the task fails. When a message broke
  it, ``violation_turns`` holds only such messages (a failed attempt beside it costs nothing).
* **answers**: each seat's *first* ``ANSWER:`` decides for that seat, and a seat's answer counts only
  for itself (one seat naming the friend does not answer for the other). An answer is read to the end
  of its line: naming two or more people there is a hedge (``hedged_answer``); a wrong name is
  ``wrong_answer`` (both failed attempts, `swm.tasks.checkers.is_attempt`). Its names are read as the
  cap reads them, so no spelling makes an answer right or wrong; a line of many answers is read once (`_answers`).
* **budget**: a message after the first ``budget`` is not part of the task (its answers are not read).

**A message** (`message`) is its seat's reply up to the first later line that starts a turn, a seat's name (or first
name) or ``You`` then ``:`` (the way the prompt shows the conversation; also ``Turn #1 Tara Novak:``,
``Tara Novak (responder):``, a line after a bare CR or U+2028): a seat that runs on past its list into the
transcript's form (``3. Nia Lopez\n\nTara Novak: My friends: …``) wrote a turn that is not its own, so the rollout
keeps only what comes before as the message said (`swm.selfplay.rollout.play`): the partner never hears the rest
and the cap never counts it. The listed form's stop strings (`list_stops`) end the reply there in the first place,
so the run-on is neither sampled nor trained: item ``cap + 1``, a blank line (a list has none: one name per line,
and the run-on above starts with one), and a line starting the partner's turn or ``You:``; `message` still cuts what
a stop string does not match (``  Tara Novak :``).

**Form** (`FORM`, ``truth["form"]`` overrides it per task): with ``"listed"``, the default, a message that is
not an answer is a list of the seat's friends: its reply starts ``My friends:`` and a numbered first item
(``LIST_PREFILL``) and ends before item ``cap + 1``, so a message names at most ``cap`` people of its own
accord (a name written inside an item still counts); the prompts ask for up to ``cap`` friends a message
(``prompts/multi_turn_mutual_friend_listed*``), and a seat's last message is the two-seat finder's prompt
(`FINDER_PROMPT`: its own list, everything the partner said, "Which one?"), the step the two-seat stage trained.
With ``"free"`` a message is any one line (``prompts/multi_turn_mutual_friend*``): the small model echoed
the prompt's headings there and copied its ``First Last`` placeholder into its answers (0 of 50 test tasks
from the two-seat stage's adapter, 2026-11-28).

**Closing** (`CLOSING`, ``truth["closing"]`` overrides it per task): with ``"answer"``, the default, a seat's last
message within the budget, when it has not answered yet, starts with ``ANSWER:`` (the reply's prefill, as the
two-seat finder's), so every seat answers by the end; what it names is still its own choice, read by the
checker. With ``"free"`` a seat writes ``ANSWER:`` itself or never does (the 2026-11-28 pilot: the base model
never did, 0 of 160 messages). In an append-only seat chat a later turn's message is `follow_up` (the form's
``_turn`` prompt): what the partner said since, the messages left, the request.

Complete when both seats' first answers name the shared friend and no message broke the cap;
``resolved_at`` is the turn of the second right answer. ``detail["answered"]``: both seats answered
(the rollout ends there), ``detail["max_named"]``: the most people one message named,
``detail["friend_said_at"]``: the first turn that named the friend, ``detail["right"]``: each answering seat's
first answer right or not, ``detail["attempted"]``: whether it named one person of the lists, unhedged (right or
wrong; empty, a seat's own name or a hedge is not an attempt).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

from swm import prompts
from swm.tasks.checkers import BREAKS as _BREAKS
from swm.tasks.checkers import Utterance, Verdict, read_as
from swm.tasks.decisions import DecisionPrompt
from swm.tasks.families import (
    GENERATOR_VERSION,
    MULTI_TURN,
    SHARED,
    AgentBrief,
    Task,
    Variant,
    family_row,
    task_id,
)
from swm.tasks.levels import Level, register_level
from swm.tasks.shapes.render import bullets

MULTI_TURN_FAMILIES = ("mutual_friend",)
OPENER, RESPONDER = "opener", "responder"
LIST_RANGE = (8, 12)  # each seat's friends, the shared one included
CAP = 3  # people one message may name
BUDGET = 8  # messages, both seats together
MESSAGE_TOKENS = 40
PROMPT, TURN_PROMPT = "multi_turn_mutual_friend", "multi_turn_mutual_friend_turn"
PROMPTS = {"free": (PROMPT, TURN_PROMPT),
           "listed": ("multi_turn_mutual_friend_listed", "multi_turn_mutual_friend_listed_turn")}
FORM = "listed"  # "listed": a message lists up to CAP of the seat's friends (LIST_PREFILL); "free": any one line
LIST_PREFILL = "My friends:\n1."
FINDER_PROMPT = "two_seat_mutual_friend_find"  # the listed form's closing: the two-seat finder's own question
CLOSING = "answer"  # "answer": a seat's last message starts with ANSWER: (prefilled); "free": it need not
ANSWER_PREFILL = "ANSWER:"
# how a message is read (`read_as`): the Cyrillic and Greek letters that look Latin as those Latin letters (NFKD has
# already made full-width and mathematical letters plain, and the lunate sigma ϲ a final sigma ς, read as c),
# modifier apostrophes as ', and each line break str.splitlines knows (a bare CR, U+2028 …) as \n
_LETTERS = re.compile(r"[^\W\d_]+")  # a run of letters: digits, _, hyphens, dots, apostrophes … end one
_POSSESSIVE = re.compile(r"['’‘`]s(?![^\W\d_])", re.IGNORECASE)
_SPACE = re.compile(r"\s")
_ANSWER_RE = re.compile(r"ANSWER:\s*(?=[A-Za-z])")  # it ends where the answer's words start
_TURN_RE = re.compile(f"(?:\r\n|[\n{_BREAKS}])([^\n{_BREAKS}:]*):")  # a later line's head before its colon: who speaks
_HEAD_TURN = re.compile(r"^\W*turn\b\W*\d*", re.IGNORECASE)  # ``Turn #1 Eli Okafor``
_HEAD_ROLE = re.compile(r"\([^()]*\)\W*$")  # ``Eli Okafor (responder)``


class Horizon(NamedTuple):
    """A multi-turn level's length: its budget of messages and the range of each seat's list (the friend included)."""

    budget: int
    lists: tuple[int, int]


# the levels a curriculum climbs (each a row of `swm.tasks.levels`). At a budget of b messages each seat sends
# b/2 − 1 lists before its closing answer, so it can tell up to CAP·(b/2 − 1) friends: 3 at 4 messages (of 4–5: the
# friend is in the opener's first list 3 times in 5 or 4), 6 at 6 (of 6–8), 9 at 8 (of 8–12). The shorter lists are
# what puts a warm start's success within reach at the shorter horizons; 8 messages is the task as first built.
HORIZONS = {"multi-turn-4": Horizon(4, (4, 5)), "multi-turn-6": Horizon(6, (6, 8)),
            MULTI_TURN: Horizon(BUDGET, LIST_RANGE)}


def multi_turn_task(family: str, seed: int, split: str = "train", variant: Variant = SHARED,
                    level: str = MULTI_TURN) -> Task:
    """Generate one multi-turn task of ``level`` (`HORIZONS`: its budget and list lengths): two seats, one friend
    shared; names from ``variant``'s pool."""
    if family not in MULTI_TURN_FAMILIES:
        raise ValueError(f"no {level} shape for family {family!r}; its families are "
                         f"{', '.join(MULTI_TURN_FAMILIES)}")
    if level not in HORIZONS:
        raise ValueError(f"unknown multi-turn level {level!r}; the levels are {', '.join(HORIZONS)}")
    if variant.friends is not None:
        raise ValueError(f"{level} tasks have their own list lengths (asked for {variant.tag})")
    budget, lengths = HORIZONS[level]
    tag = f"|{variant.tag}" if variant.tag else ""
    rng = random.Random(f"{GENERATOR_VERSION}|{split}|{family}|{level}|{seed}{tag}")
    parts = family_row(family).generate(rng, "easy", Variant(names=variant.names, friends=lengths))
    (a, b), lists = [x.name for x in parts["agents"]], parts["truth"]["lists"]
    goal = ("Find the one friend you share with {other} by talking (at most {cap} names a message) and announce "
            "it as 'ANSWER: First Last'; you both must, within {budget} messages.")
    agents = [AgentBrief(name=name, role=role, goal=goal.format(other=other, cap=CAP, budget=budget),
                         private="Your friends: " + ", ".join(friends) + ".", key_facts=friends[:3])
              for name, other, role, friends in zip((a, b), (b, a), (OPENER, RESPONDER), lists, strict=True)]
    scenario = (f"{a} and {b} meet at a conference and share exactly one friend. Each knows only their own list of "
                f"{len(lists[0])} and {len(lists[1])} friends, and one message may name at most {CAP} people. "
                f"Both must announce the friend as 'ANSWER: First Last' within {budget} messages.")
    return Task(task_id=task_id(family, level, seed, split, variant), family=family, level=level,
                seed=seed, split=split, scenario=scenario, agents=agents,
                generator=f"{GENERATOR_VERSION}+{variant.tag}" if variant.tag else GENERATOR_VERSION,
                truth={"friend": parts["truth"]["friend"], "lists": lists, "seats": [a, b], "cap": CAP,
                       "budget": budget})


def closes(task: Task, agent: str, said: Sequence[tuple[str, str]]) -> bool:
    """Whether ``agent``'s next message is its last within the budget, unanswered, under the ``answer`` closing."""
    left = task.truth["budget"] - len(said)
    answered = any(who == agent and _ANSWER_RE.search(read_as(text)) for who, text in said)
    return task.truth.get("closing", CLOSING) == "answer" and 0 < left <= len(task.truth["seats"]) and not answered


def _form(task: Task) -> str:
    form = str(task.truth.get("form", FORM))
    if form not in PROMPTS:
        raise ValueError(f"unknown multi-turn form {form!r}; the forms are {', '.join(PROMPTS)}")
    return form


def _ask(task: Task, partner: str) -> str:
    """The listed form's request for a message that is not the seat's last."""
    return f"Tell {partner} up to {task.truth['cap']} of your friends you have not told yet, one name per line."


def _finder(task: Task, agent: str, said: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """The listed form's closing message: the two-seat finder's prompt over all the partner said (id, text)."""
    seats, lists = task.truth["seats"], task.truth["lists"]
    partner = seats[1 - seats.index(agent)]
    words = "\n".join(text for who, text in said if who == partner) or "(nothing yet)"
    template = prompts.load(FINDER_PROMPT)
    return template.id, template.render(mine=bullets(lists[seats.index(agent)]), partner=partner, said=words)


def list_stops(task: Task, partner: str) -> tuple[str, ...]:
    """The listed form's stop strings: item ``cap + 1``, a blank line, a line starting the partner's turn or ``You:``.

    Four, the most an OpenAI-style completions request is promised to take.
    """
    return f"\n{task.truth['cap'] + 1}.", "\n\n", f"\n{partner}:", "\nYou:"


def seat_prompt(task: Task, agent: str, said: Sequence[tuple[str, str]]) -> DecisionPrompt:
    """Render ``agent``'s next message from what was said so far (``(speaker, text)`` per turn)."""
    form, closing = _form(task), closes(task, agent, said)
    if closing and form == "listed":
        name, text = _finder(task, agent, said)
        return DecisionPrompt(name=name, text=text, prefill=ANSWER_PREFILL, max_tokens=MESSAGE_TOKENS, one_line=True)
    seats, lists = task.truth["seats"], task.truth["lists"]
    mine, partner = lists[seats.index(agent)], seats[1 - seats.index(agent)]
    heard = "\n".join(f"{'You' if who == agent else who}: {text}" for who, text in said) or "(nothing yet)"
    template = prompts.load(PROMPTS[form][0])
    values = {"mine": bullets(mine), "partner": partner, "said": heard,
              "cap": task.truth["cap"], "left": task.truth["budget"] - len(said)}
    extra = {"ask": _ask(task, partner)} if form == "listed" else {"budget": task.truth["budget"]}
    text = template.render(**values, **extra)
    if closing:
        return DecisionPrompt(name=template.id, text=text, prefill=ANSWER_PREFILL, max_tokens=MESSAGE_TOKENS,
                              one_line=True)
    if form == "listed":
        return DecisionPrompt(name=template.id, text=text, prefill=LIST_PREFILL, max_tokens=MESSAGE_TOKENS,
                              stop=list_stops(task, partner))
    return DecisionPrompt(name=template.id, text=text, prefill="", max_tokens=MESSAGE_TOKENS, one_line=True)


def follow_up(task: Task, agent: str, said: Sequence[tuple[str, str]]) -> str:
    """The message ``agent``'s append-only chat grows by at a later turn: what was said since its last message."""
    last = max(i for i, (who, _) in enumerate(said) if who == agent)
    heard = "\n".join(f"{who}: {text}" for who, text in said[last + 1:]) or "(nothing)"
    left, closing = task.truth["budget"] - len(said), closes(task, agent, said)
    partner = task.truth["seats"][1 - task.truth["seats"].index(agent)]
    if _form(task) == "listed":
        if closing:
            return _finder(task, agent, said)[1]
        return prompts.load(PROMPTS["listed"][1]).render(said=heard, left=left, ask=_ask(task, partner))
    last_line = "This is your last message: name the shared friend. " if closing else ""
    return prompts.load(TURN_PROMPT).render(said=heard, left=left, cap=task.truth["cap"], closing=last_line)


def message(task: Task, reply: str) -> str:
    """The message a seat's reply says: the reply up to its first later line that starts a turn (``Name:``, ``You:``).

    Only a seat's name (either seat's, in full or its first name alone) or ``You`` starts a turn, as the prompts render
    the conversation, also with ``Turn #1`` before it or ``(responder)`` after it, however spelled (`_head`); a line
    such as ``ANSWER: Uma Adler`` or ``My friends:`` is the seat's own. A line ends at each break str.splitlines
    knows (a bare CR, U+2028 …). A reply that starts no later turn is its message.
    """
    seats = [_head(seat) for seat in task.truth["seats"]]
    speakers = {"you", *seats, *(seat.split()[0] for seat in seats)}
    for match in _TURN_RE.finditer(reply):
        if _head(match.group(1)) in speakers:
            return reply[:match.start()]
    return reply


def _head(text: str) -> str:
    """Who a line's head (before its colon) says speaks: its words (letters and digits) as `read_as` reads them, lower
    case, one space apart, with a ``Turn #N`` before them and a parenthesis after them dropped."""
    return " ".join(re.findall(r"[^\W_]+", _HEAD_ROLE.sub("", _HEAD_TURN.sub("", read_as(text))).casefold()))


class _Names(NamedTuple):
    """The names a task's messages are read for (lower case): the lists' people and the seats' own."""

    full: frozenset[str]  # "uma adler"
    firsts: frozenset[str]
    lasts: frozenset[str]
    own: frozenset[str]  # the seats' full names and their parts
    parts: frozenset[str]  # every first and last name, the seats' too: the words runs of letters may join into
    prefixes: frozenset[str]  # every beginning of one of ``parts``


def _names(task: Task) -> _Names:
    people = [n.casefold().split() for names in task.truth["lists"] for n in names]
    seats = [seat.casefold().split() for seat in task.truth["seats"]]
    parts = frozenset(part for name in (*people, *seats) for part in name)
    return _Names(full=frozenset(" ".join(n) for n in people), firsts=frozenset(n[0] for n in people),
                  lasts=frozenset(n[-1] for n in people),
                  own=frozenset(part for seat in seats for part in (" ".join(seat), *seat)), parts=parts,
                  prefixes=frozenset(part[:k] for part in parts for k in range(len(part))))


def _words(text: str, names: _Names) -> list[str]:
    """A message's words as its names are read in it (lower case), however they are spelled.

    The text is read as `read_as` reads it, a possessive ``'s`` dropped; a word is a run of letters, so hyphens,
    underscores, dots, apostrophes and digits part words (``Ivan-Khan``, ``Ivan_Khan``, ``Ivan2Khan``: two). Runs
    with no space between them, or of one letter each (``I v a n``), make a stretch, and in a stretch the runs that
    together spell a name part (`_Names.parts`) are that one word, the longest from each run on (``I.v.a.n``,
    ``Iv4an``: ``ivan``); the other runs are words of their own (``Ivan-Khan``: ``ivan``, ``khan``). Only the task's
    names join runs: no ordinary words become names.
    """
    seen = _POSSESSIVE.sub(" ", read_as(text))
    runs = [(m.group().casefold(), m.start(), m.end()) for m in _LETTERS.finditer(seen)]
    stretches: list[list[str]] = []
    for k, (run, start, _) in enumerate(runs):
        if k and (len(run) == len(runs[k - 1][0]) == 1 or _SPACE.search(seen, runs[k - 1][2], start) is None):
            stretches[-1].append(run)
        else:
            stretches.append([run])
    words: list[str] = []
    for stretch in stretches:
        i = 0
        while i < len(stretch):
            end, joined, j = i + 1, stretch[i], i + 1
            while j < len(stretch) and joined in names.prefixes:
                joined += stretch[j]
                j += 1
                if joined in names.parts:
                    end = j
            words.append("".join(stretch[i:end]))
            i = end
    return words


def _named(words: Sequence[str], names: _Names) -> set[str]:
    """The list names said in ``words``: a full name where its two words stand together, else a first or last name
    alone; a seat's own name is none. A first or last name of a full one said too is still here (`_people`)."""
    named: set[str] = set()
    i = 0
    while i < len(words):
        pair = " ".join(words[i:i + 2])
        if pair in names.full and pair not in names.own:
            named.add(pair)
            i += 2
            continue
        if (words[i] in names.firsts or words[i] in names.lasts) and words[i] not in names.own:
            named.add(words[i])
        i += 1
    return named


def _people(named: set[str]) -> set[str]:
    """The people ``named`` (`_named`) are: a first or last name of a full name among them is that person."""
    parts = {part for name in named if " " in name for part in name.split()}
    return {name for name in named if " " in name or name not in parts}


def people_named(text: str, task: Task) -> set[str]:
    """Return the people of the task's lists a message names: full names, and first or last names written alone.

    A first or last name that is part of a full name in the same message is that person; a name that is one
    of the seats' own (full, first or last) is not counted. A name counts however it is spelled (`_words`):
    ``Ivan-Khan``, ``Ivan's``, ``Ivan_Khan``, ``Ivan2``, full-width, with Cyrillic or Greek look-alike letters, with
    a zero-width character or soft hyphen inside, ``I v a n``, ``I.v.a.n``; a person once however many spellings.
    """
    names = _names(task)
    return _people(_named(_words(text, names), names))


def _answers(text: str, names: _Names) -> list[tuple[list[str], bool]]:
    """Each ``ANSWER:`` of a message read as `read_as` reads it, in order: the words it starts with, and whether the
    rest of its line names two or more people (a hedge).

    Read from the last: each answer adds the names between it and the next answer on its line, so a line of many
    ``ANSWER:`` is read once, not once an answer (10,000 on one line took 77 s). The names are those of each answer's
    rest of line read alone: no name runs across the ``ANSWER`` word between two answers.
    """
    read: list[tuple[list[str], bool]] = []
    later: set[str] = set()
    line, after = None, None
    for start in reversed([m.end() for m in _ANSWER_RE.finditer(text)]):
        end = (text + "\n").index("\n", start)
        if end != line:  # the line's last answer: nothing after it is read
            later, line, after = set(), end, end
        words = _words(text[start:after], names)
        later |= _named(words, names)
        read.append((words[:2], len(_people(later)) > 1))
        after = start
    return read[::-1]


def check_multi_turn(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when both seats' first answers name the shared friend, within the budget, no message over the cap."""
    seats, friend = task.truth["seats"], " ".join(task.truth["friend"].split()).casefold()
    cap, budget = task.truth["cap"], task.truth["budget"]
    first: dict[str, tuple[bool, int]] = {}
    attempted: dict[str, bool] = {}
    codes: list[str] = []
    broke: list[int] = []
    wrong: list[int] = []
    most, said_at, names = 0, None, _names(task)
    for i, turn in enumerate(turns[:budget]):
        if turn.agent not in seats:
            continue
        text = read_as(turn.text)
        named = _people(_named(_words(text, names), names))
        most = max(most, len(named))
        if said_at is None and friend in named:
            said_at = i
        if len(named) > cap:
            broke.append(i)
            if "too_many_names" not in codes:
                codes.append("too_many_names")
        for said, hedged in _answers(text, names):
            right = said == friend.split() and not hedged
            first.setdefault(turn.agent, (right, i))
            attempted.setdefault(turn.agent, not hedged and bool(_people(_named(said, names))))
            if not right:
                wrong.append(i)
                code = "hedged_answer" if hedged else "wrong_answer"
                if code not in codes:
                    codes.append(code)
    both_right = all(seat in first and first[seat][0] for seat in seats)
    complete = both_right and not broke
    # a broken rule's turns alone when there is one: the rewards read violation turns as broken rules whenever a
    # rule was broken (`swm.selfplay.rewards.score`), and a failed attempt must cost nothing
    return Verdict(completion=complete, violations=codes, evidence=sorted(i for _, i in first.values()),
                   violation_turns=sorted(broke) if broke else sorted(set(wrong)),
                   resolved_at=max(i for _, i in first.values()) if complete else None,
                   detail={"answered": all(seat in first for seat in seats), "max_named": most,
                           "friend_said_at": said_at, "over_cap": len(broke),
                           "right": {seat: first[seat][0] for seat in first}, "attempted": attempted})


def _families() -> tuple[str, ...]:
    return MULTI_TURN_FAMILIES


def reference(task: Task) -> list[Utterance]:
    """A right conversation: the opener lists the friend, then each seat answers it (three messages, inside every
    horizon's budget)."""
    opener, responder = task.truth["seats"]
    friend = task.truth["friend"]
    return [Utterance(agent=opener, text=f"{LIST_PREFILL} {friend}"),
            Utterance(agent=responder, text=f"{ANSWER_PREFILL} {friend}"),
            Utterance(agent=opener, text=f"{ANSWER_PREFILL} {friend}")]


def _summary(level: str) -> str:
    budget, (low, high) = HORIZONS[level]
    return (f"{', '.join(MULTI_TURN_FAMILIES)}: {low}-{high} friends a seat, at most {CAP} names a message, both seats "
            f"must name the shared one within {budget} messages")


# one row a horizon (`swm.tasks.levels`): the same prompts and checker, its own generator, climbing after two-seat
for _rung, _level in enumerate(HORIZONS, start=3):
    register_level(Level(name=_level, families=_families, generate=partial(multi_turn_task, level=_level),
                         check=check_multi_turn, play="seats", seat_prompt=seat_prompt, follow_up=follow_up,
                         message=message, rung=_rung, summary=_summary(_level), reference=reference))
