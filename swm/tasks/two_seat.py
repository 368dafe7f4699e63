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
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from swm import prompts
from swm.tasks.checkers import Utterance, Verdict, check_mutual_friend, mentions, slots_in
from swm.tasks.decisions import DecisionPrompt, _bullets
from swm.tasks.families import MULTI_TURN, TWO_SEAT, Task
from swm.tasks.multi_turn import seat_prompt as multi_turn_prompt

SPEAKER, FINDER = "speaker", "finder"
SPEAK_PREFILL = "My friends:"
FIND_PREFILL = "ANSWER:"
SLOTS_PREFILL = "My free slots:"
SLOT_PREFILL = "SLOT:"
_SLOT_ANSWER_RE = re.compile(r"SLOT:[ \t]*(\S[^\n]*)")


def _require(task: Task) -> None:
    if task.level not in (TWO_SEAT, MULTI_TURN):
        raise ValueError(f"task {task.task_id} is not a two-seat task")


def seat_of(task: Task, agent: str) -> str:
    """Return the seat's role (``speaker`` or ``finder``)."""
    return task.agent(agent).role


def seat_prompt(task: Task, agent: str, said: Sequence[tuple[str, str]]) -> DecisionPrompt:
    """Render ``agent``'s next turn from what was said so far (``(speaker, text)`` per turn; multi-turn too)."""
    _require(task)
    if task.level == MULTI_TURN:
        return multi_turn_prompt(task, agent, said)
    truth = task.truth
    role = seat_of(task, agent)
    mine = truth["lists"][0 if role == SPEAKER else 1]
    partner = truth["finder"] if role == SPEAKER else truth["speaker"]
    if task.family == "scheduling":
        return _scheduling_prompt(role, mine, partner, said)
    if role == SPEAKER:
        text = prompts.load("two_seat_mutual_friend_speak").render(mine=_bullets(mine), partner=partner)
        return DecisionPrompt(name="two_seat_mutual_friend_speak", text=text, prefill=SPEAK_PREFILL, max_tokens=48)
    heard = "\n".join(t for who, t in said if who == partner) or "(nothing yet)"
    template = prompts.load("two_seat_mutual_friend_find")
    text = template.render(mine=_bullets(mine), partner=partner, said=heard)
    return DecisionPrompt(name=template.id, text=text, prefill=FIND_PREFILL, max_tokens=12)


def _scheduling_prompt(role: str, mine: list[str], partner: str, said: Sequence[tuple[str, str]]) -> DecisionPrompt:
    if role == SPEAKER:
        template = prompts.load("two_seat_scheduling_speak")
        return DecisionPrompt(name=template.id, text=template.render(mine=_bullets(mine), partner=partner),
                              prefill=SLOTS_PREFILL, max_tokens=48)
    heard = "\n".join(t for who, t in said if who == partner) or "(nothing yet)"
    template = prompts.load("two_seat_scheduling_find")
    return DecisionPrompt(name=template.id, text=template.render(mine=_bullets(mine), partner=partner, said=heard),
                          prefill=SLOT_PREFILL, max_tokens=12)


def ends_at_newline(prompt: DecisionPrompt) -> bool:
    """Whether a newline ends the reply (the finder's one-line answer, a multi-turn message; a list spans lines)."""
    return prompt.one_line or prompt.prefill in (FIND_PREFILL, SLOT_PREFILL)


def check_two_seat(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the finder's first answer names the shared friend (slot) and no other candidate."""
    if task.level != TWO_SEAT:
        raise ValueError(f"task {task.task_id} is not a two-seat task")
    if task.family == "scheduling":
        return check_two_seat_scheduling(task, turns)
    finder, speaker = task.truth["finder"], task.truth["speaker"]
    theirs = [t if t.agent == finder else Utterance(agent=t.agent, text="") for t in turns]
    verdict = check_mutual_friend(task, theirs)
    spoken = " ".join(t.text for t in turns if t.agent == speaker)
    own = task.truth["lists"][0]
    listed = sum(mentions(spoken, name) for name in own) / len(own)
    return verdict.model_copy(update={"detail": {**verdict.detail, "speaker_listed": listed,
                                                 "friend_said": mentions(spoken, task.truth["friend"])}})


def check_two_seat_scheduling(task: Task, turns: Sequence[Utterance]) -> Verdict:
    """Complete when the finder's first ``SLOT:`` line names the shared slot and no other slot.

    Each wrong or hedged answer of the finder's is a violation (a failed attempt, `is_attempt`);
    the speaker's ``SLOT:`` lines are not answers. ``detail["formatted"]``: the first answer named
    exactly one slot, right or wrong.
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
