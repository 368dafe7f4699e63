"""Per-turn judge scores for the self-play reward mix (``RewardConfig.judge_weight``).

One call per turn to the context's ``judge`` model (prompt ``selfplay_judge``): the scenario,
the speaker's private goal, the conversation before the turn and the turn, each fenced as data;
the reply is a bounded `TurnScore` (0..10), used as ``score / 10``. A reply that does not fit
leaves the turn unjudged (no judge term, counted in ``unjudged``), never a silent 0. Scores are
stored on the turns, so scoring a rollout again makes no new call.
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field

from swm import prompts
from swm.llm import call_model
from swm.selfplay.rollout import history
from swm.tasks.families import Task
from swm.training.trajectory import Rollout


class TurnScore(BaseModel):
    """The judge's rating of one turn."""

    model_config = ConfigDict(extra="forbid")

    reasoning: str = Field("", max_length=600)
    score: int = Field(ge=0, le=10, description="0 harmful or nonsense .. 10 the best possible turn")


def judge_turns(model: BaseChatModel, rollout: Rollout, task: Task) -> tuple[dict[int, float], dict[str, int]]:
    """Return {turn index: score in [0, 1]} for every turn of a task rollout, and call counts."""
    template = prompts.load("selfplay_judge")
    goals = {b.name: b.goal for b in task.agents}
    said = rollout.transcript()
    scores: dict[int, float] = {}
    counts = {"calls": 0, "unjudged": 0}
    for seat, turn in sorted(((s.seat, t) for s in rollout.seats for t in s.turns), key=lambda st: st[1].turn):
        if turn.judge is not None:
            scores[turn.turn] = turn.judge
            continue
        text = template.render(agent=seat, scenario=task.scenario, goal=goals.get(seat, ""),
                               history=history(said[:turn.turn]), turn=turn.text)
        reply = call_model(model, text, TurnScore)
        counts["calls"] += 1
        if reply.value is None:
            counts["unjudged"] += 1
            continue
        scores[turn.turn] = reply.value.score / 10
    return scores, counts
