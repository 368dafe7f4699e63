"""Bounded tool schemas for the world model's foresight and the scoring of simulated futures."""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model

from swm.social.models import MAX_AGENTS, ActionType, Name

# Tight bounds keep a looping small model's worst case short (grammar-constrained decoding
# stops a string at its maximum length).
Entry = Annotated[str, StringConstraints(max_length=300)]


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
    next_state: Annotated[str, StringConstraints(max_length=300)] = Field(
        description="One or two sentences: the state of the interaction after these reactions.")


@cache
def foresight_for(others: tuple[str, ...]) -> type[BaseModel]:
    """Return a `Foresight` schema whose names are the other participants and whose lists fit them.

    Naming the participants in an enum keeps predictions attached to real agents, and a list
    no longer than the number of others bounds what a looping model can produce.
    """
    if not others:
        return Foresight
    names: Any = Literal[others]  # type: ignore[valid-type]
    mind = create_model("PredictedMind", __config__=ConfigDict(extra="forbid"), __doc__=PredictedMind.__doc__,
                        agent=(names, Field(description="The participant's name.")),
                        mental_state=(Entry, PredictedMind.model_fields["mental_state"]))
    reaction = create_model("PredictedReaction", __config__=ConfigDict(extra="forbid"),
                            __doc__=PredictedReaction.__doc__,
                            agent=(names, Field(description="The participant's name.")),
                            action_type=(ActionType, PredictedReaction.model_fields["action_type"]),
                            argument=(Entry, PredictedReaction.model_fields["argument"]))
    n = len(others)
    return create_model(
        "Foresight", __config__=ConfigDict(extra="forbid"), __doc__=Foresight.__doc__,
        mental_states=(list[mind], Field(max_length=n, description="Each other participant's predicted mental state.")),  # type: ignore[valid-type]
        reactions=(list[reaction], Field(max_length=n, description="Each other participant's most likely reaction.")),  # type: ignore[valid-type]
        next_state=(Annotated[str, StringConstraints(max_length=300)], Foresight.model_fields["next_state"]))


class FutureScore(BaseModel):
    """How far a simulated future advances the acting agent's goal."""

    model_config = ConfigDict(extra="forbid")

    reasoning: Annotated[str, StringConstraints(max_length=300)] = Field(description="Short reasoning.")
    goal_progress: Literal[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10] = Field(
        description="Integer from 0 (no progress) to 10 (goal reached).",
        json_schema_extra={"minimum": 0, "maximum": 10})
