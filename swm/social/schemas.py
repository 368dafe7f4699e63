"""Bounded tool schemas for the world model's foresight and the scoring of simulated futures."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from swm.social.models import MAX_AGENTS, ActionType, Name

Entry = Annotated[str, StringConstraints(max_length=600)]


class PredictedMind(BaseModel):
    """One participant's predicted mental state."""

    model_config = ConfigDict(extra="forbid")

    agent: Name = Field(description="The participant's name.")
    mental_state: Entry = Field(description="Their beliefs, intentions and emotions after this step.")


class PredictedReaction(BaseModel):
    """One participant's predicted reaction."""

    model_config = ConfigDict(extra="forbid")

    agent: Name = Field(description="The participant's name.")
    action_type: ActionType = Field(description="One of: none, speak, non-verbal communication, action, leave.")
    argument: Entry = Field(description="What they say or do.")


class Foresight(BaseModel):
    """The world model's prediction of the next social step after an action."""

    model_config = ConfigDict(extra="forbid")

    mental_states: list[PredictedMind] = Field(max_length=MAX_AGENTS,
                                               description="Each other participant's predicted mental state.")
    reactions: list[PredictedReaction] = Field(max_length=MAX_AGENTS,
                                               description="Each other participant's most likely reaction.")
    next_state: Annotated[str, StringConstraints(max_length=800)] = Field(
        description="One or two sentences: the state of the interaction after these reactions.")


class FutureScore(BaseModel):
    """How far a simulated future advances the acting agent's goal."""

    model_config = ConfigDict(extra="forbid")

    reasoning: Annotated[str, StringConstraints(max_length=1000)] = Field(description="Short reasoning.")
    goal_progress: int = Field(ge=0, le=10, description="Integer from 0 (no progress) to 10 (goal reached).")
