"""Belief gain: a turn signal for the multi-turn mutual-friend task, read off the policy's own model of the partner.

After seat X's message, the partner Y's *belief* is log π(friend | Y's closing prompt) under the policy that sampled
the rollout: the two-seat finder's prompt (`swm.tasks.multi_turn._finder`: Y's own list and what X has disclosed so
far) with ``ANSWER:`` as the reply's start, and the shared friend's ``First Last`` as the reply. X's turn earns

    gain = belief after the message − belief before it

(nats), beside the joint outcome: the turn-level reward of the hierarchical estimator (`RewardConfig.belief`), a
seat's return with the group estimator. The outcome checker still decides success.

**What it pays for: disclosure, not wording.** X's messages enter Y's closing prompt as the people of X's own list
they named (`people_named`, however spelled), each once, in the order first disclosed, as one list in the listed
form (``My friends:`` then one name a line), not as X wrote them. So

* a message that breaks the cap (more than ``cap`` people named) earns 0, and the outcome's penalty stands;
* the partner's own names echoed back, or names on neither list, are not X's to disclose and are left out: a message
  with none of its own earns 0;
* an ``ANSWER:`` is not part of the conversation: a seat's answering message earns 0 (the outcome pays for answers);
* repeating a name (in one message or a later one), phrasing ("the shared friend is …") or instructions to the
  partner earn nothing beyond the names: a message that discloses no one new leaves the prompt as it was, a gain of
  exactly 0.

What is left is the information in a message: naming the friend moves the partner's log-probability of it up, naming
others of one's own list moves it by what they rule out. `belief_gains` computes the gains of a rollout,
`iteration_gains` those of an iteration's rollouts with each distinct state scored once; the shuffled-turn control
(`RewardConfig.belief_shuffle`) permutes them among the iteration's turns.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from swm.tasks.families import Task
from swm.tasks.multi_turn import ANSWER_PREFILL, LIST_PREFILL, _finder, people_named, read_as
from swm.training.trajectory import Rollout

Key = tuple[str, int]  # (rollout id, episode turn)
_ANSWERS = re.compile(r"ANSWER\s*:")  # any answer, named or not (the checker reads only named ones)


def disclosed(task: Task, agent: str, text: str) -> list[str] | None:
    """The people of ``agent``'s own list a message names in full, in the list's order (None: it earns no gain: it
    broke the cap or answers). A first or last name alone counts against the cap but discloses no one: it may be
    two people of the list."""
    if _ANSWERS.search(read_as(text)):
        return None
    named = people_named(text, task)
    if len(named) > int(task.truth["cap"]):
        return None
    own = task.truth["lists"][task.truth["seats"].index(agent)]
    return [name for name in own if name.casefold() in named]  # full names: a first name alone may be two people


def listed(names: Sequence[str]) -> str:
    """A disclosure as the listed form writes it: ``My friends:`` and one numbered name a line."""
    head = LIST_PREFILL.rsplit("1.", 1)[0]
    return head + "\n".join(f"{k}. {name}" for k, name in enumerate(names, start=1))


def belief_prompts(task: Task, said: Sequence[tuple[str, str]]) -> list[tuple[int | None, str, str]]:
    """The closing prompts the gains compare: (the turn of the message it follows, None before any; whose belief;
    the prompt text), per seat, for every message of its partner that can earn a gain.

    The partner's words there are everything the speaker disclosed so far as one list, each person once, in the
    order first disclosed: a message that discloses no one new leaves the prompt as it was (a gain of exactly 0).
    """
    seats = task.truth["seats"]
    out: list[tuple[int | None, str, str]] = []
    for listener in seats:
        speaker = seats[1 - seats.index(listener)]
        known: list[str] = []
        out.append((None, listener, _finder(task, listener, [])[1]))
        for turn, (who, text) in enumerate(said):
            if who != speaker:
                continue
            names = disclosed(task, speaker, text)
            if names is None:
                continue
            known += [n for n in names if n not in known]
            out.append((turn, listener, _finder(task, listener, [(speaker, listed(known))] if known else [])[1]))
    return out


def belief_gains(policy: Any, task: Task, said: Sequence[tuple[str, str]], config: Any = None) -> dict[int, float]:
    """Each message's belief gain (episode turn → nats), under ``policy`` (a `LoraValueModel`) as it is.

    A message that earns none (it broke the cap, answered) gets 0; the partner's log-probability of the friend on
    its closing prompt is computed once per state (the prompts of one listener share their head: one forward).
    """
    return gains_of(policy, [("", task, said)], config)[""]


def gains_of(policy: Any, items: Sequence[tuple[str, Task, Sequence[tuple[str, str]]]],
             config: Any = None) -> dict[str, dict[int, float]]:
    """`belief_gains` of many transcripts at once (key → episode turn → nats), each distinct closing state scored
    once: the G rollouts of a task share their opening states (each listener's prompt before any message) and often
    later ones (the same first names listed), so an iteration forwards each (friend, prompt) once, its rows batched
    and their shared heads forwarded once (`swm.training.ppo.score_rows`)."""
    from swm.training.ppo import Sample, score_rows  # optional: the [train] extra (it imports torch)

    prefill = [int(i) for i in policy.tokenizer(ANSWER_PREFILL, add_special_tokens=False)["input_ids"]]
    index: dict[tuple[str, str], int] = {}
    rows: list[Any] = []
    states = []
    for key, task, said in items:
        prompts = belief_prompts(task, said)
        friend = str(task.truth["friend"])
        ids = [int(i) for i in policy.tokenizer(" " + friend, add_special_tokens=False)["input_ids"]]
        for _, listener, text in prompts:
            if (friend, text) not in index:
                index[(friend, text)] = len(rows)
                rows.append(Sample(role=listener, prompt_ids=[*policy.prompt_ids(text), *prefill], token_ids=ids,
                                   old_logprobs=[], advantages=[0.0] * len(ids), returns=[0.0] * len(ids)))
        states.append((key, task, said, prompts, friend))
    beliefs = [sum(lp) for lp, _ in score_rows(policy, rows, config)] if rows else []
    out: dict[str, dict[int, float]] = {}
    for key, task, said, prompts, friend in states:
        gains = {turn: 0.0 for turn, _ in enumerate(said)}
        before: dict[str, float] = {}
        for turn, listener, text in prompts:
            belief = beliefs[index[(friend, text)]]
            if turn is not None:
                gains[turn] = belief - before[listener]
            before[listener] = belief
        seats = task.truth["seats"]
        out[key] = {turn: gain for turn, gain in gains.items() if said[turn][0] in seats}
    return out


def shuffled(gains: Mapping[Key, float], seed: int) -> dict[Key, float]:
    """The shuffled-turn control: the same gains, permuted among the turns (seeded)."""
    keys = sorted(gains)
    values = [gains[k] for k in keys]
    random.Random(seed).shuffle(values)
    return dict(zip(keys, values, strict=True))


def iteration_gains(policy: Any, rollouts: Sequence[tuple[Rollout, Task]],
                    config: Any = None) -> dict[str, dict[int, float]]:
    """`gains_of` the rollouts' transcripts (rollout id → episode turn → nats): each distinct state scored once."""
    return gains_of(policy, [(r.rollout_id, task, r.transcript()) for r, task in rollouts], config)
