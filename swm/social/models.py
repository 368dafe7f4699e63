"""SOTOPIA-compatible episode types: actions, profiles, scenarios, turns and episodes.

`AgentAction` is what an agent does on its turn (SOTOPIA's action types, with optional private
recipients). `Scenario` holds the scenario text and two or more `ScenarioAgent` seats, each with
a public profile, a private goal and a secret (SOTOPIA's ``EnvironmentProfile`` plus
``AgentProfile``). `TurnRecord` and `EpisodeRecord` are the rows the experience store keeps and
the export writes. Only the ``*ForModel`` schemas are sent to a model; their strings and lists
are bounded (see `swm.schemas`).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model, field_validator

from swm.s3ap import check_agent_name

ActionType = Literal["none", "speak", "non-verbal communication", "action", "leave"]
ACTION_TYPES: tuple[str, ...] = ("none", "speak", "non-verbal communication", "action", "leave")
MAX_AGENTS = 8
Name = Annotated[str, StringConstraints(max_length=60)]
Text = Annotated[str, StringConstraints(max_length=600)]


class AgentActionForModel(BaseModel):
    """The action an agent takes on its turn."""

    model_config = ConfigDict(extra="forbid")

    action_type: ActionType = Field(description="One of: none, speak, non-verbal communication, action, leave.")
    argument: Text = Field(description="What is said (speak), or the gesture or action; empty for none/leave.")
    to: list[Name] = Field(default_factory=list, max_length=MAX_AGENTS,
                           description="Names of private recipients; empty means everyone present.")


@cache
def action_schema_for(others: tuple[str, ...]) -> type[BaseModel]:
    """Return `AgentActionForModel` with ``to`` limited to the other participants' names.

    A free-text recipient list lets a small model fill it with invented names up to its bound;
    an enum of the real names (at most one entry each) keeps the reply short and meaningful.
    """
    if not others:
        return AgentActionForModel
    names: Any = Literal[others]  # type: ignore[valid-type]
    fields = AgentActionForModel.model_fields
    model = create_model(
        "AgentActionForModel", __config__=ConfigDict(extra="forbid"),
        action_type=(ActionType, fields["action_type"]), argument=(Text, fields["argument"]),
        to=(list[names], Field(default_factory=list, max_length=len(others),  # type: ignore[valid-type]
                               description=fields["to"].description)))
    model.__doc__ = AgentActionForModel.__doc__
    return model


class AgentAction(BaseModel):
    """One agent's action on one turn (SOTOPIA's ``AgentAction`` plus private recipients)."""

    model_config = ConfigDict(extra="forbid")

    action_type: ActionType = "none"
    argument: str = ""
    to: list[str] = Field(default_factory=list)

    @classmethod
    def from_model(cls, value: AgentActionForModel | Any, known: list[str] | None = None) -> AgentAction:
        """Take a model's action, dropping recipients that name no known agent."""
        to = [n for n in value.to if known is None or n in known]
        return cls(action_type=value.action_type, argument=value.argument.strip(), to=to)

    @property
    def idle(self) -> bool:
        return self.action_type == "none"

    def to_natural_language(self, actor: str) -> str:
        """Render the action as the line others see in the transcript."""
        aside = f" (privately to {', '.join(self.to)})" if self.to else ""
        if self.action_type == "none":
            return f"{actor} did nothing"
        if self.action_type == "speak":
            return f'{actor} said{aside}: "{self.argument}"'
        if self.action_type == "non-verbal communication":
            return f"{actor} [non-verbal{aside}] {self.argument}"
        if self.action_type == "action":
            return f"{actor} [action{aside}] {self.argument}"
        return f"{actor} left the conversation"

    def short(self) -> str:
        """Render as ``type: argument`` (the S3AP action text)."""
        return self.action_type if not self.argument else f"{self.action_type}: {self.argument}"


class AgentProfile(BaseModel):
    """A SOTOPIA agent profile (``AgentProfile`` field names); unknown fields are kept in ``extra``."""

    model_config = ConfigDict(extra="ignore")

    first_name: str = ""
    last_name: str = ""
    age: int | None = None
    occupation: str = ""
    gender: str = ""
    gender_pronoun: str = ""
    public_info: str = ""
    big_five: str = ""
    moral_values: list[str] = Field(default_factory=list)
    schwartz_personal_values: list[str] = Field(default_factory=list)
    personality_and_values: str = ""
    decision_making_style: str = ""
    secret: str = ""
    mbti: str = ""

    @field_validator("moral_values", "schwartz_personal_values", mode="before")
    @classmethod
    def _listify(cls, value: object) -> Any:
        return [value] if isinstance(value, str) else value or []

    @field_validator("age", mode="before")
    @classmethod
    def _age(cls, value: Any) -> Any:
        try:
            return int(value) if value not in (None, "") else None
        except (TypeError, ValueError):
            return None

    @property
    def full_name(self) -> str:
        return f"{self.first_name} {self.last_name}".strip()

    def public_text(self, name: str) -> str:
        """What anyone in the scene may know: never the secret, never the personality notes."""
        bits = [b for b in (f"{self.age}-year-old" if self.age else "", self.gender.lower(),
                            self.occupation.lower()) if b]
        text = f"{name}" + (f" is a {' '.join(bits)}" if bits else "")
        pronoun = f" ({self.gender_pronoun})" if self.gender_pronoun else ""
        public = f" {self.public_info}" if self.public_info else ""
        return f"{text}{pronoun}.{public}".strip()

    def private_text(self, name: str) -> str:
        """What only the agent itself knows about itself: personality, values and secret."""
        parts = [self.public_text(name)]
        if self.personality_and_values:
            parts.append(f"Personality and values: {self.personality_and_values}")
        if self.decision_making_style:
            parts.append(f"Decision-making style: {self.decision_making_style}")
        if self.secret:
            parts.append(f"Your secret: {self.secret}")
        return " ".join(parts)


class ScenarioAgent(BaseModel):
    """One seat of a scenario: who plays it and its private goal."""

    model_config = ConfigDict(extra="ignore")

    name: str
    goal: str
    profile: AgentProfile = Field(default_factory=AgentProfile)
    agent_id: str | None = None

    @field_validator("name", mode="before")
    @classmethod
    def _valid_name(cls, name: Any) -> str:
        return check_agent_name(name.strip() if isinstance(name, str) else name)

    @property
    def secret(self) -> str:
        return self.profile.secret


class Scenario(BaseModel):
    """A social task: the shared scenario text, the relationship, and two or more seats."""

    model_config = ConfigDict(extra="ignore")

    id: str
    scenario: str
    agents: list[ScenarioAgent] = Field(min_length=2)
    relationship: str = "stranger"
    codename: str = ""
    hard: bool = False
    source: str = ""
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("agents")
    @classmethod
    def _unique_names(cls, agents: list[ScenarioAgent]) -> list[ScenarioAgent]:
        names = [a.name for a in agents]
        if len(set(names)) != len(names):
            raise ValueError(f"agent names must be unique, got {names}")
        return agents

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.agents]

    def seat(self, name: str) -> ScenarioAgent:
        for agent in self.agents:
            if agent.name == name:
                return agent
        raise KeyError(f"no agent {name!r} in scenario {self.id}; agents: {', '.join(self.names)}")

    def background_for(self, name: str) -> str:
        """Render what agent ``name`` knows before the first turn: its goal, never another's.

        Others appear with their public profile only; their goals are 'unknown' (as in SOTOPIA)
        and their secrets never appear. The relationship profiles' free-text pair background is
        left out on purpose: in the SOTOPIA data it often mentions one side's secret.
        """
        me = self.seat(name)
        others = [a for a in self.agents if a.name != name]
        lines = [f"Scenario: {self.scenario}",
                 f"Relationship between you and {', '.join(o.name for o in others)}: "
                 f"{self.relationship.replace('_', ' ')}.",
                 f"About you: {me.profile.private_text(name)}",
                 *[f"Participant: {o.profile.public_text(o.name)} Their goal: unknown." for o in others],
                 f"Your goal: {me.goal}"]
        return "\n".join(lines)


class TurnRecord(BaseModel):
    """One turn as stored and exported: who acted, how it was decided, and what it cost."""

    episode_id: str
    turn: int
    agent: str
    policy: str
    action: AgentAction
    intended: AgentAction | None = None
    prediction: str | None = None  # the world model's predicted S3AP step, as JSON text
    candidates: str | None = None  # look-ahead candidates with their scores, as JSON text
    fallback: str | None = None  # why the agent acted on its intended action (or salvaged text)
    notes: str | None = None  # recorded problems that did not change the action (a failed sample, ...)
    step: str  # the SocialStep appended this turn, as JSON text
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    prompts: dict[str, str] = Field(default_factory=dict)
    models: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TurnRecord:
        data = dict(row)
        for key in ("action", "intended", "prompts", "models"):
            if isinstance(data.get(key), str):
                data[key] = json.loads(data[key])
        data.pop("created", None)
        return cls.model_validate(data)
