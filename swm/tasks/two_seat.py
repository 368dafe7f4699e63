"""Two-seat tasks: one model plays both seats of a short exchange, and code checks the joint outcome.

Mutual friend (`swm.tasks.families.two_seat_task`): seat A (role ``speaker``) and seat B (role
``finder``) each hold one friend list of four names, exactly one shared. A speaks first and
should tell B its friends; B sees its own list and what A said, and must name the shared
friend (``ANSWER: First Last``). Neither can win alone: B cannot know A's list unless A says it,
and A cannot name the friend without B's list. The reward is joint (both seats get it); the
turn-level estimators give each seat its own credit.

Each seat's turn is a `DecisionPrompt` (prompt text, forced reply start, length limit, whether a
newline ends the reply), the same shape as a decision's, so a policy trained on the decision
curriculum (`swm learn`) meets prompts like its own: B's prompt is the mutual-friend decision's
with A's words in place of the partner's list. Seats alternate A, B, A, B…; B's reply starts with
``ANSWER:``, so the first exchange settles the task (``max_turns`` caps it in any case).

`check_two_seat` reads only the finder's answers (the speaker cannot know the friend: an answer
of A's is not the task's), with `swm.tasks.checkers.check_mutual_friend`'s rules (the first answer
decides; naming two or more candidates is a hedge). ``detail["speaker_listed"]`` is the share of
A's list A said (the speaker's own signal).

Scheduling, the same shape: each seat holds four free slots (``Mon 14:00``), exactly one shared.
A tells its slots (prompt ``two_seat_scheduling_speak``, reply starting ``My free slots:``); B sees
its own slots and A's words and names the shared one (``two_seat_scheduling_find``, the scheduling
decision's prompt with A's words in place of the partner's list, reply starting ``SLOT:``). Only
B's answers count and the first decides: an answer is a ``SLOT:`` with text after it on its line,
read to the end of that line; it is right when it names exactly the shared slot, a hedge when it
names two or more slots. Slots are read as `swm.tasks.checkers.slots_in` reads them (``Wed 1pm``
is ``Wed 13:00``, ``12pm`` noon, ``12am`` midnight). ``detail["speaker_listed"]`` is the share of
A's slots A said, however written.

Each family is one row of `swm.tasks.families.TWO_SEAT_SHAPES` (`register_two_seat`): its generator, the
seats' prompts and reply starts, its checker and a right exchange together. A new family is a new row: a
generator, two prompt files and a checker (docs/contributing.md, "Adding a two-seat family").
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from swm.tasks.checkers import Utterance, Verdict, check_mutual_friend, mentions, slots_in
from swm.tasks.decisions import DecisionPrompt
from swm.tasks.families import (
    DAYS,
    HOURS,
    TWO_SEAT,
    TWO_SEAT_SHAPES,
    AgentBrief,
    SeatPrompt,
    Task,
    TwoSeatShape,
    Variant,
    _generator,
    _slot,
    family_row,
    register_two_seat,
    task_id,
    two_seat_families,
    two_seat_task,
)
from swm.tasks.levels import Level, register_level
from swm.tasks.shapes.render import bullets

SPEAKER, FINDER = "speaker", "finder"
SPEAK_PREFILL = "My friends:"
FIND_PREFILL = "ANSWER:"
SLOTS_PREFILL = "My free slots:"
SLOT_PREFILL = "SLOT:"
_SLOT_ANSWER_RE = re.compile(r"SLOT:[ \t]*(\S[^\n]*)")


def shape_of(task: Task) -> TwoSeatShape:
    """Return a two-seat task's shape (its row of `TWO_SEAT_SHAPES`)."""
    if task.level != TWO_SEAT:
        raise ValueError(f"task {task.task_id} is not a two-seat task")
    return TWO_SEAT_SHAPES[task.family]


def seat_of(task: Task, agent: str) -> str:
    """Return the seat's role (``speaker`` or ``finder``)."""
    return task.agent(agent).role


def two_seat_prompt(task: Task, agent: str, said: Sequence[tuple[str, str]]) -> DecisionPrompt:
    """Render ``agent``'s turn of a two-seat task from what was said so far (``(speaker, text)`` per turn)."""
    shape = shape_of(task)
    truth = task.truth
    role = seat_of(task, agent)
    mine = bullets(truth["lists"][0 if role == SPEAKER else 1])
    partner = truth["finder"] if role == SPEAKER else truth["speaker"]
    seat = shape.speak if role == SPEAKER else shape.find
    template = shape.load(seat.template)
    if role == SPEAKER:
        text = template.render(mine=mine, partner=partner)
    else:
        heard = "\n".join(t for who, t in said if who == partner) or "(nothing yet)"
        text = template.render(mine=mine, partner=partner, said=heard)
    return DecisionPrompt(name=template.id, text=text, prefill=seat.prefill, max_tokens=seat.max_tokens)


def ends_at_newline(prompt: DecisionPrompt) -> bool:
    """Whether a newline ends the reply (the finder's one-line answer, a multi-turn message; a list spans lines)."""
    return prompt.one_line or any(seat.ends_line and prompt.prefill == seat.prefill
               for shape in TWO_SEAT_SHAPES.values() for seat in (shape.speak, shape.find))


def check_two_seat(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Run the task's shape's checker (only the finder's answers count; the first decides)."""
    return shape_of(task).check(task, turns)


# --- mutual friend ----------------------------------------------------------------------------------------


def _mutual_friend_task(rng: random.Random, seed: int, split: str, variant: Variant) -> Task:
    """The mutual-friend generator's ``easy`` state: each seat holds four friends, exactly one shared."""
    parts = family_row("mutual_friend").generate(rng, "easy", variant)
    (a, b), lists = [x.name for x in parts["agents"]], parts["truth"]["lists"]
    goals = {"speaker": f"Tell {b} your friends so that {b} can find the one you share.",
             "finder": f"Find the one friend you share with {a} and announce it as 'ANSWER: First Last'."}
    agents = [AgentBrief(name=name, role=role, goal=goals[role], private="Your friends: " + ", ".join(friends) + ".",
                         key_facts=friends[:3])
              for name, role, friends in zip((a, b), (SPEAKER, FINDER), lists, strict=True)]
    return Task(task_id=task_id("mutual_friend", TWO_SEAT, seed, split, variant), family="mutual_friend",
                level=TWO_SEAT, seed=seed, split=split, scenario=parts["scenario"], agents=agents,
                generator=_generator(variant),
                truth={**parts["truth"], "speaker": a, "finder": b})


def check_two_seat_mutual_friend(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the finder's first ``ANSWER:`` names the shared friend and no other candidate.

    `check_mutual_friend`'s rules on the finder's turns only (the speaker's are read as silence).
    ``detail["speaker_listed"]``: the share of the speaker's own friends the speaker said;
    ``detail["friend_said"]``: whether the speaker said the shared friend.
    """
    finder, speaker = task.truth["finder"], task.truth["speaker"]
    theirs = [t if t.agent == finder else Utterance(agent=t.agent, text="") for t in turns]
    verdict = check_mutual_friend(task, theirs)
    spoken = " ".join(t.text for t in turns if t.agent == speaker)
    own = task.truth["lists"][0]
    listed = sum(mentions(spoken, name) for name in own) / len(own)
    return verdict.model_copy(update={"detail": {**verdict.detail, "speaker_listed": listed,
                                                 "friend_said": mentions(spoken, task.truth["friend"])}})


def _mutual_friend_reference(task: Task) -> list[Utterance]:
    truth = task.truth
    return [Utterance(agent=truth["speaker"], text=f"{SPEAK_PREFILL}\n" + "\n".join(truth["lists"][0])),
            Utterance(agent=truth["finder"], text=f"{FIND_PREFILL} {truth['friend']}")]


# --- scheduling -------------------------------------------------------------------------------------------


def _scheduling_task(rng: random.Random, seed: int, split: str, variant: Variant) -> Task:
    """The scheduling generator's ``easy`` state cut to one shared slot: three of each seat's own slots and one of
    the common ones, so each seat holds four slots in week order and exactly one is on both lists."""
    parts = family_row("scheduling").generate(rng, "easy", variant)
    (a, b), free, common = [x.name for x in parts["agents"]], parts["truth"]["free"], parts["truth"]["common"]
    week = [_slot(d, h) for d in DAYS for h in HOURS]
    slot = rng.choice(common)
    lists = [sorted([*rng.sample([s for s in free[name] if s not in common], 3), slot], key=week.index)
             for name in (a, b)]
    goals = {"speaker": f"Tell {b} your free slots so that {b} can find the one you share.",
             "finder": f"Find the one free slot you share with {a} and announce it as 'SLOT: Mon 14:00'."}
    agents = [AgentBrief(name=name, role=role, goal=goals[role],
                         private="You are free only at: " + ", ".join(slots) + ".", key_facts=slots[:3])
              for name, role, slots in zip((a, b), (SPEAKER, FINDER), lists, strict=True)]
    scenario = (f"{a} and {b} must schedule a one-hour meeting this week and share exactly one free slot. Each "
                "knows only their own free slots. Announce the slot as 'SLOT: Mon 14:00'.")
    return Task(task_id=task_id("scheduling", TWO_SEAT, seed, split, variant), family="scheduling", level=TWO_SEAT,
                seed=seed, split=split, scenario=scenario, agents=agents, generator=_generator(variant),
                truth={"slot": slot, "lists": lists, "free": dict(zip((a, b), lists, strict=True)), "speaker": a,
                       "finder": b})


def check_two_seat_scheduling(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the finder's first ``SLOT:`` line names the shared slot and no other slot.

    Each wrong or hedged answer of the finder's is a violation (a failed attempt, `is_attempt`);
    the speaker's ``SLOT:`` lines are not answers. ``detail["formatted"]``: the first answer named
    exactly one slot, right or wrong. ``detail["speaker_listed"]``: the share of the speaker's own
    slots the speaker said (another slot said is not one of them).
    """
    finder, speaker, shared = task.truth["finder"], task.truth["speaker"], task.truth["slot"]
    first: bool | None = None
    formatted = False
    named: list[str] = []
    evidence: list[int] = []
    wrong: list[int] = []
    codes: list[str] = []
    for i, turn in enumerate(turns):
        if turn.agent != finder:
            continue
        for match in _SLOT_ANSWER_RE.finditer(turn.text):
            slots = slots_in(match.group(1))
            right = slots == {shared}
            if first is None:
                first, formatted, named = right, len(slots) == 1, sorted(slots)
                evidence.append(i)
            if not right:
                wrong.append(i)
                code = "hedged_answer" if len(slots) > 1 else "wrong_answer"
                if code not in codes:
                    codes.append(code)
    spoken = slots_in(" ".join(t.text for t in turns if t.agent == speaker))
    own = task.truth["lists"][0]
    return Verdict(completion=bool(first), violations=codes, evidence=evidence, violation_turns=sorted(set(wrong)),
                   resolved_at=evidence[0] if first else None,
                   detail={"answered": first is not None, "formatted": formatted, "slots": named,
                           "speaker_listed": len(spoken & set(own)) / len(own), "slot_said": shared in spoken})


def _scheduling_reference(task: Task) -> list[Utterance]:
    truth = task.truth
    return [Utterance(agent=truth["speaker"], text=f"{SLOTS_PREFILL}\n" + "\n".join(truth["lists"][0])),
            Utterance(agent=truth["finder"], text=f"{SLOT_PREFILL} {truth['slot']}")]


MUTUAL_FRIEND = register_two_seat(TwoSeatShape(
    family="mutual_friend", summary="A tells its friends, B names the shared one", generate=_mutual_friend_task,
    speak=SeatPrompt("two_seat_mutual_friend_speak", SPEAK_PREFILL, 48),
    find=SeatPrompt("two_seat_mutual_friend_find", FIND_PREFILL, 12, ends_line=True),
    check=check_two_seat_mutual_friend, reference=_mutual_friend_reference))
SCHEDULING = register_two_seat(TwoSeatShape(
    family="scheduling", summary="A tells its free slots, B names the shared slot", generate=_scheduling_task,
    speak=SeatPrompt("two_seat_scheduling_speak", SLOTS_PREFILL, 48),
    find=SeatPrompt("two_seat_scheduling_find", SLOT_PREFILL, 12, ends_line=True),
    check=check_two_seat_scheduling, reference=_scheduling_reference))


# the level's row: every registered shape's tasks, prompts and checker (`swm.tasks.levels`)
def two_seat_reference(task: Task) -> list[Utterance]:
    """A right exchange of a two-seat task: its shape's own (`TwoSeatShape.reference`)."""
    return shape_of(task).reference(task)


register_level(Level(name=TWO_SEAT, families=two_seat_families, generate=two_seat_task, check=check_two_seat,
                     play="seats", seat_prompt=two_seat_prompt, rung=2, reference=two_seat_reference,
                     summary="one model plays both seats of a short exchange (" + "; ".join(
                         f"{shape.family}: {shape.summary}" for shape in TWO_SEAT_SHAPES.values()) + ")"))
