"""The records the loop passes between phases: finished episodes, their turns, preference pairs.

An `EpisodeRecord` is what `collect` writes once per episode, converted from the episode
graph's output (`swm.lifelong.bridge`); the pair builders and checkers read only these, so they
can be tested on hand-made records. A `PreferencePair` carries the context the gate needs to
judge it on its own (the speaker's private strings, goal, previous utterance, whether the task
was already settled) so that gating never has to reopen the episode.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swm.tasks.checkers import Utterance, Verdict
from swm.tasks.families import Task
from swm.tasks.verify import check

TRACKS = ("action", "perception")


def digest(*parts: Any, size: int = 16) -> str:
    """Return a short stable hash of JSON-able parts."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:size]


class Prediction(BaseModel):
    """A world-model prediction, made at one turn, of another agent's goal and mental state."""

    model_config = ConfigDict(extra="forbid")

    about: str
    goal: str = ""
    mental_state: str = ""

    def text(self) -> str:
        return " ".join(x for x in (self.goal, self.mental_state) if x).strip()


class ActedTurn(Utterance):
    """One acted turn: who acted, what was done (what the checker reads), and what the agent considered and predicted.

    Episodes and games record their turns as these (`swm.lifelong.bridge`, `swm.lifelong.game_bridge`).
    """

    index: int
    state_key: str = ""  # equal keys mean the same task, speaker, policy and history
    prompt: str = ""  # the agent's view at this state, as the export's prompt
    alternatives: list[str] = Field(default_factory=list)  # other candidates sampled at this state
    predictions: list[Prediction] = Field(default_factory=list)


class EpisodeRecord(BaseModel):
    """A finished episode with its provenance and verified outcome."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str
    run_id: str = ""
    cycle: int = 0
    phase: str = "collect"  # collect | dev | test (the evaluation splits)
    task_id: str
    family: str
    level: str
    seed: int = 0  # the sample index of this task within the cycle
    seat: str = "all"  # the learner's seat; "all" in self-play
    policy_version: str = "p0"
    models: dict[str, str] = Field(default_factory=dict)
    prompts: dict[str, str] = Field(default_factory=dict)
    draw: str | None = None  # how the embedded engine drew its seeded moves (`swm.serving.draws`); None: no such draw
    source_episode: str | None = None  # the episode graph's own id, when it has one
    turns: list[ActedTurn] = Field(default_factory=list)
    verdict: Verdict
    judge_goal: float | None = None
    error: str | None = None

    def transcript(self) -> list[Utterance]:
        return list(self.turns)


def checked_record(task: Task, turns: list[ActedTurn], **provenance: Any) -> EpisodeRecord:
    """Return the `EpisodeRecord` of a task's turns with the task's checker's verdict."""
    return EpisodeRecord(task_id=task.task_id, family=task.family, level=task.level, turns=turns,
                         verdict=check(task, turns), **provenance)


class PreferencePair(BaseModel):
    """Two candidates at the same state, chosen over rejected, with what the gate needs."""

    model_config = ConfigDict(extra="forbid")

    pair_id: str = ""
    track: str  # action | perception
    source: str  # same_state | alternative | multi_prediction
    cycle: int = 0
    task_id: str
    family: str
    level: str
    agent: str
    turn: int
    state_key: str
    chosen_state_key: str = ""
    rejected_state_key: str = ""
    prompt: str
    chosen: str
    rejected: str
    chosen_score: float
    rejected_score: float
    chosen_action_type: str = "speak"
    rejected_action_type: str = "speak"
    chosen_episode: str = ""
    rejected_episode: str = ""
    judge_scores: list[float] | None = None  # two judge samples, where a judge scored the pair
    context: dict[str, Any] = Field(default_factory=dict)  # private, goal, previous, resolved_before, about

    @property
    def margin(self) -> float:
        return round(self.chosen_score - self.rejected_score, 6)

    def with_id(self) -> PreferencePair:
        return self.model_copy(update={"pair_id": digest(self.track, self.state_key, self.chosen, self.rejected)})
