"""Play one task with one policy in every seat, recording each seat's own turns for training.

The task becomes the episode graph's `Scenario` (`swm.lifelong.bridge.to_scenario`: the same
public scenario and the same private background per seat); seats speak in turn, each prompted
with ``selfplay_turn`` (its own background and everything said so far). Seats reply in plain
text, not the episode graph's JSON actions: every generated token is then part of what was
said, and the prompt the policy saw can be rebuilt token for token in torch (a grammar-
constrained tool call cannot). The episode ends at ``max_turns`` or as soon as the task's code
checker finds the task settled (a deal accepted, an answer given). One exception to "every token is said": a
multi-turn reply that runs on into a later turn (``…\n\nTara Novak: …``, the conversation's own form) says only
what comes before it (`swm.tasks.levels.message`): the partner does not hear the rest and the checker does not
read it, while the seat's tokens and chat keep the whole reply, as it was sampled.

Each seat's context is one chat that only grows (``transcript="append"``, the default;
`swm.training.transcript`): its first message is its brief (``selfplay_seat``: who it is, its
background and goal, what was said before its turn), each later one what was said since its last
turn (``selfplay_seat_turn``), and its own replies stand between them as it generated them. A
sampler that takes the chat (``generate(..., chat=)``) extends the seat's token ids instead of
rendering them again, so a server serves the turn from the seat's cached prefix and the update
trains the seat's turns as one sequence. ``transcript="rerender"`` (and a sampler that takes no
chat) renders each turn's whole prompt again (``selfplay_turn``), as before. Either way every seat
records how many of its turns extended the previous prompt and reply token for token
(`SeatTrajectory.appended` of ``append_checked``).

A `Sampler` error (a model failure, an illegal reply) makes a *failed* rollout: recorded with
its reason and dropped from the batch, never scored as zero. An `SWMError` (the server lost the
adapter and could not get it back) stops the run instead: the rollout is played again on resume.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, cast

from swm import prompts
from swm.errors import SWMError
from swm.lifelong.bridge import to_scenario
from swm.social.models import Scenario
from swm.tasks.checkers import Utterance
from swm.tasks.decisions import Stop
from swm.tasks.families import Task
from swm.tasks.levels import follow_up, is_seat_level, message, seat_prompt
from swm.tasks.two_seat import ends_at_newline
from swm.tasks.verify import check
from swm.training.trajectory import Generation, Rollout, SeatTrajectory, SeatTurn
from swm.training.transcript import DEFAULT_TRANSCRIPT, SeatChat, Transcript, append_counts, takes_chat

PROMPT = "selfplay_turn"
SEAT_PROMPT, SEAT_TURN_PROMPT = "selfplay_seat", "selfplay_seat_turn"


class Sampler(Protocol):
    """The policy that plays every seat: one reply per prompt, with token ids and log-probabilities.

    ``prefill`` forces the reply's start (context, not generated), ``stop`` ends it, ``max_tokens``
    caps it (default: the policy's ``max_new_tokens``); two-seat tasks use them.
    """

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None) -> Generation: ...


def history(said: list[tuple[str, str]], start: int = 0) -> str:
    """Render what was said from turn ``start`` on (everyone hears everyone in these tasks)."""
    return "\n".join(f"Turn #{i} {who}: {text}" for i, (who, text) in enumerate(said) if i >= start) or \
        "(nothing yet: the conversation starts now)"


def turn_prompt(scenario: Scenario, speaker: str, said: list[tuple[str, str]], turn: int) -> str:
    """The prompt a seat gets at its turn: its own background and everything said so far (``selfplay_turn``)."""
    return prompts.load(PROMPT).render(agent=speaker, background=scenario.background_for(speaker),
                                       history=history(said), turn=turn)


def seat_message(scenario: Scenario, speaker: str, said: list[tuple[str, str]], turn: int, chat: SeatChat) -> str:
    """The user message a seat's chat grows by at its turn: its brief at its first turn, then what was said since."""
    if not chat.messages:
        return prompts.load(SEAT_PROMPT).render(agent=speaker, background=scenario.background_for(speaker),
                                                history=history(said), turn=turn)
    last = max(i for i, (who, _) in enumerate(said) if who == speaker)
    return prompts.load(SEAT_TURN_PROMPT).render(history=history(said, last + 1), turn=turn)


def unusable(gen: Generation) -> str | None:
    """Why a reply cannot be trained or scored (no tokens, or log-probs not one per token); None when it can.

    Log-probs left empty are the update's to score (`swm.training.config.PolicyConfig.score_old`), not a mismatch.
    """
    if not gen.token_ids or (gen.logprobs and len(gen.logprobs) != len(gen.token_ids)):
        return f"a reply with {len(gen.token_ids)} tokens and {len(gen.logprobs)} log-probs"
    return None


def generate(sampler: Sampler, prompt: str, chat: SeatChat | None, **kwargs: Any) -> Generation:
    """Ask ``sampler`` for a reply to ``prompt``, appended to the seat's ``chat`` when there is one."""
    if chat is None:
        return sampler.generate(prompt, **kwargs)
    return cast(Any, sampler).generate(prompt, chat=chat, **kwargs)  # a sampler that takes_chat


def record_appends(seats: Iterable[SeatTrajectory]) -> None:
    """Count, per seat, the turns whose prompt extended its previous prompt and reply token for token."""
    for seat in seats:
        seat.appended, seat.append_checked = append_counts(seat.turns)


def _sample_turn(task: Task, scenario: Scenario, speaker: str, said: list[tuple[str, str]], turn: int,
                 sampler: Sampler, chat: SeatChat | None) -> tuple[str, Generation]:
    """Prompt ``speaker`` for its turn (a seat level's form, the seat's chat, or the whole transcript) and sample
    its reply; return the prompt and the reply."""
    if is_seat_level(task.level):
        shown = seat_prompt(task, speaker, said)
        prompt = shown.text
        if chat is not None and chat.messages:  # a later turn: what the partner said since (the level's own form)
            prompt = follow_up(task, speaker, said) or seat_message(scenario, speaker, said, turn, chat)
        stop = shown.stop or ("\n" if ends_at_newline(shown) else None)
        return prompt, generate(sampler, prompt, chat, prefill=shown.prefill, stop=stop, max_tokens=shown.max_tokens)
    if chat is not None:
        prompt = seat_message(scenario, speaker, said, turn, chat)
        return prompt, generate(sampler, prompt, chat)
    prompt = turn_prompt(scenario, speaker, said, turn)
    return prompt, sampler.generate(prompt)


def play(task: Task, sampler: Sampler | Mapping[str, Sampler], *, rollout_id: str, iteration: int, sample: int,
         max_turns: int, transcript: Transcript = DEFAULT_TRANSCRIPT) -> Rollout:
    """Play ``task`` with ``sampler`` in every seat; return the rollout (``failed`` set on an error).

    A mapping gives each seat its own sampler, by seat name (an engine's agent per seat, `swm.envs.seats`).
    ``transcript`` chooses append-only seat chats or a whole prompt rendered again each turn (module docstring).
    """
    scenario = to_scenario(task)
    roles = {brief.name: brief.role for brief in task.agents}
    seats = {name: SeatTrajectory(seat=name, role=roles[name]) for name in scenario.names}
    rollout = Rollout(rollout_id=rollout_id, task_id=task.task_id, family=task.family, iteration=iteration,
                      sample=sample)
    said: list[tuple[str, str]] = []
    chats: dict[str, SeatChat] = {}
    start = time.perf_counter()
    for turn in range(min(max_turns, task.truth.get("budget", max_turns))):  # a multi-turn task's budget caps it
        speaker = scenario.names[turn % len(scenario.names)]
        seat_sampler = sampler[speaker] if isinstance(sampler, Mapping) else sampler
        chat = chats.setdefault(speaker, SeatChat()) if transcript == "append" and takes_chat(seat_sampler) else None
        try:
            prompt, gen = _sample_turn(task, scenario, speaker, said, turn, seat_sampler, chat)
        except SWMError:  # what the run stands on (the server, its adapter) failed: the run stops, not the rollout
            raise
        except Exception as err:  # noqa: BLE001 - any model error fails the rollout, recorded with its reason
            rollout.failed = f"turn {turn}: {type(err).__name__}: {err}"[:500]
            break
        why = unusable(gen)
        if why is not None:
            rollout.failed = f"turn {turn}: {why}"
            break
        text = message(task, gen.text).strip()  # the seat's chat and tokens keep what it sampled, run-on included
        if chat is not None:
            chat.extend(prompt, gen.text, gen.prompt_ids, gen.token_ids)
        seats[speaker].turns.append(SeatTurn(turn=turn, prompt=prompt, text=text, prompt_ids=gen.prompt_ids,
                                             token_ids=gen.token_ids, logprobs=gen.logprobs,
                                             served_logprobs=gen.served_logprobs))
        rollout.tokens += len(gen.token_ids)
        said.append((speaker, text))
        verdict = check(task, [Utterance(agent=a, text=t) for a, t in said])
        seats[speaker].turns[-1].state = {"completion": verdict.completion, "resolved_at": verdict.resolved_at,
                                          "violations": list(verdict.violations)}
        if verdict.resolved_at is not None:
            rollout.end_reason = "settled"
            break
        if is_seat_level(task.level) and verdict.detail.get("answered"):  # the first answers (each seat's) decide
            rollout.end_reason = "answered"
            break
    else:
        rollout.end_reason = "max_turns"
    rollout.order = [who for who, _ in said]
    rollout.seats = list(seats.values())
    record_appends(rollout.seats)
    rollout.seconds = time.perf_counter() - start
    return rollout
