"""Play one two-turn task: the learner's first move, the code partner's reply, the learner's decision; check it.

Both learner moves are sampled as a decision's move is (`swm.lifelong.decision_play.sample_move`:
the embedded server continues the prompt's prefill; any other model gets the prompt as one chat
message), each with its own prompt and a seed of the task, the sample and the turn, so every
policy draws with the same seeds. The partner's turn is code (`swm.tasks.two_turn.partner_reply`)
and costs no call. The record holds three turns: the learner's opener (index 0, with its
prompt), the partner's reply (1, no prompt) and the learner's decision (2, with its prompt).
"""

from __future__ import annotations

from typing import Any

from swm.context import ModelContext
from swm.lifelong.decision_play import draw_mode, sample_move, sampling_seed
from swm.lifelong.records import ActedTurn, EpisodeRecord, digest
from swm.tasks import Task, check
from swm.tasks.decisions import DecisionPrompt
from swm.tasks.two_turn import closing_prompt, opening_prompt, partner_reply, read_first_move
from swm.usage import CallStats, add_stats


def _seed(task_id: str, sample: int, turn: int) -> int:
    """Return the sampling seed of one learner turn (turn 0's is the decision level's seed of the sample)."""
    return sampling_seed(task_id, sample) if turn == 0 else int(digest(task_id, sample, turn, size=8), 16)


def _act(ctx: ModelContext, task: Task, shown: DecisionPrompt, index: int, sample: int,
         siblings: int = 1) -> tuple[ActedTurn, CallStats]:
    learner = str(task.truth["learner"])
    text, stats = sample_move(ctx, shown, temperature=ctx.temperature, seed=_seed(task.task_id, sample, index),
                              siblings=siblings)
    return ActedTurn(index=index, agent=learner, text=text, prompt=shown.text,
                     state_key=digest(task.task_id, learner, shown.text)), stats


def play_two_turn(task: Task, ctx: ModelContext, *, episode_id: str, sample: int, siblings: int = 1,
                  **provenance: Any) -> tuple[EpisodeRecord, dict[str, CallStats]]:
    """Play one two-turn task under the context's ``agent`` model; return its checked record and usage.

    ``siblings``: how many samples of the task are played at once; their openers share one prompt
    (`swm.lifelong.decision_play.sample_move`), their closing prompts differ.
    """
    opening = opening_prompt(task)
    opener, first_stats = _act(ctx, task, opening, 0, sample, siblings)
    first = read_first_move(task, opener.text)
    reply = ActedTurn(index=1, agent=str(task.truth["partner"]), text=partner_reply(task, first))
    closing = closing_prompt(task, first)
    decision, second_stats = _act(ctx, task, closing, 2, sample)
    turns = [opener, reply, decision]
    record = EpisodeRecord(task_id=task.task_id, family=task.family, level=task.level, turns=turns,
                           verdict=check(task, turns), episode_id=episode_id, source_episode=episode_id,
                           models={"agent": ctx.spec_for("agent")},
                           prompts={"open": opening.name, "close": closing.name}, draw=draw_mode(ctx), **provenance)
    return record, {"decision": add_stats(first_stats, second_stats)}
