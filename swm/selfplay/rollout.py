"""Play one task with one policy in every seat, recording each seat's own turns for training.

The task becomes the episode graph's `Scenario` (`swm.lifelong.bridge.to_scenario`: the same
public scenario and the same private background per seat); seats speak in turn, each prompted
with ``selfplay_turn`` (its own background and everything said so far). Seats reply in plain
text, not the episode graph's JSON actions: every generated token is then part of what was
said, and the prompt the policy saw can be rebuilt token for token in torch (a grammar-
constrained tool call cannot). The episode ends at ``max_turns`` or as soon as the task's code
checker finds the task settled (a deal accepted, an answer given).

A `Sampler` error (a model failure, an illegal reply) makes a *failed* rollout: recorded with
its reason and dropped from the batch, never scored as zero. An `SWMError` (the server lost the
adapter and could not get it back) stops the run instead: the rollout is played again on resume.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol

from swm import prompts
from swm.errors import SWMError
from swm.lifelong.bridge import to_scenario
from swm.social.models import Scenario
from swm.tasks.checkers import Utterance
from swm.tasks.families import SEAT_LEVELS, Task
from swm.tasks.two_seat import ends_at_newline, seat_prompt
from swm.tasks.verify import check
from swm.training.trajectory import Generation, Rollout, SeatTrajectory, SeatTurn

PROMPT = "selfplay_turn"


class Sampler(Protocol):
    """The policy that plays every seat: one reply per prompt, with token ids and log-probabilities.

    ``prefill`` forces the reply's start (context, not generated), ``stop`` ends it, ``max_tokens``
    caps it (default: the policy's ``max_new_tokens``); two-seat tasks use them.
    """

    def generate(self, prompt: str, prefill: str = "", stop: str | None = None,
                 max_tokens: int | None = None) -> Generation: ...


def history(said: list[tuple[str, str]]) -> str:
    """Render what was said so far (everyone hears everyone in these tasks)."""
    return "\n".join(f"Turn #{i} {who}: {text}" for i, (who, text) in enumerate(said)) or \
        "(nothing yet: the conversation starts now)"


def turn_prompt(scenario: Scenario, speaker: str, said: list[tuple[str, str]], turn: int) -> str:
    """The prompt a seat gets at its turn: its own background and everything said so far (``selfplay_turn``)."""
    return prompts.load(PROMPT).render(agent=speaker, background=scenario.background_for(speaker),
                                       history=history(said), turn=turn)


def play(task: Task, sampler: Sampler | Mapping[str, Sampler], *, rollout_id: str, iteration: int, sample: int,
         max_turns: int) -> Rollout:
    """Play ``task`` with ``sampler`` in every seat; return the rollout (``failed`` set on an error).

    A mapping gives each seat its own sampler, by seat name (an engine's agent per seat, `swm.envs.seats`).
    """
    scenario = to_scenario(task)
    roles = {brief.name: brief.role for brief in task.agents}
    seats = {name: SeatTrajectory(seat=name, role=roles[name]) for name in scenario.names}
    rollout = Rollout(rollout_id=rollout_id, task_id=task.task_id, family=task.family, iteration=iteration,
                      sample=sample)
    said: list[tuple[str, str]] = []
    start = time.perf_counter()
    for turn in range(min(max_turns, task.truth.get("budget", max_turns))):  # a multi-turn task's budget caps it
        speaker = scenario.names[turn % len(scenario.names)]
        seat_sampler = sampler[speaker] if isinstance(sampler, Mapping) else sampler
        try:
            if task.level in SEAT_LEVELS:
                shown = seat_prompt(task, speaker, said)
                prompt = shown.text
                gen = seat_sampler.generate(prompt, prefill=shown.prefill,
                                            stop="\n" if ends_at_newline(shown) else None, max_tokens=shown.max_tokens)
            else:
                prompt = turn_prompt(scenario, speaker, said, turn)
                gen = seat_sampler.generate(prompt)
        except SWMError:  # what the run stands on (the server, its adapter) failed: the run stops, not the rollout
            raise
        except Exception as err:  # noqa: BLE001 - any model error fails the rollout, recorded with its reason
            rollout.failed = f"turn {turn}: {type(err).__name__}: {err}"[:500]
            break
        if len(gen.token_ids) != len(gen.logprobs) or not gen.token_ids:
            rollout.failed = f"turn {turn}: a reply with {len(gen.token_ids)} tokens and {len(gen.logprobs)} log-probs"
            break
        text = gen.text.strip()
        seats[speaker].turns.append(SeatTurn(turn=turn, prompt=prompt, text=text, prompt_ids=gen.prompt_ids,
                                             token_ids=gen.token_ids, logprobs=gen.logprobs))
        rollout.tokens += len(gen.token_ids)
        said.append((speaker, text))
        verdict = check(task, [Utterance(agent=a, text=t) for a, t in said])
        if verdict.resolved_at is not None:
            rollout.end_reason = "settled"
            break
        if task.level in SEAT_LEVELS and verdict.detail.get("answered"):  # the first answers (each seat's) decide
            rollout.end_reason = "answered"
            break
    else:
        rollout.end_reason = "max_turns"
    rollout.order = [who for who, _ in said]
    rollout.seats = list(seats.values())
    rollout.seconds = time.perf_counter() - start
    return rollout
