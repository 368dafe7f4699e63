"""The typed social state: S3AP steps and worlds, lossless to and from the paper's JSON.

A `SocialStep` is one timestep of the five dimensions (scene, observations, mental states,
actions, dialogue). A `SocialWorld` is the ordered list of steps over a fixed set of agents.
The paper's S3AP JSON comes in two forms, both accepted by `SocialWorld.from_s3ap`:

* the model-facing list form: ``{"observations": ["Sally: <same_as_state />", ...]}``;
* the dict form of appendix A.2: ``{"observations": {"Sally": "<same_as_state />"}}``;

each wrapped as ``{"agents_names": [...], "socialized_context": [...]}`` or given as a bare
list of steps. `to_s3ap()` writes the wrapped dict form. Mental states live in observations
as ``<mental_state>…</mental_state>`` (as in the paper); dialogue, which the paper folds into
actions, is written as an extra ``dialogue`` key so that nothing is lost on a round trip.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swm.s3ap import LAST_ACTION_RE, NONE, SAME_AS_STATE, STATE_RE, agent_key, is_none, split_mental_state

__all__ = [
    "NONE", "SAME_AS_STATE", "Issue", "PerspectiveEntry", "SocialStep", "SocialWorld", "ValidationReport",
    "agent_key", "is_none", "split_mental_state", "unwrap_s3ap",
]


class SocialStep(BaseModel):
    """One timestep of a social world: the scene before actions, and each agent's view and act."""

    model_config = ConfigDict(extra="forbid")

    timestep: str
    scene: str = NONE
    observations: dict[str, str] = Field(default_factory=dict)
    mental_states: dict[str, str] = Field(default_factory=dict)
    actions: dict[str, str] = Field(default_factory=dict)
    dialogue: dict[str, str] = Field(default_factory=dict)

    def observation_of(self, agent: str) -> str:
        """Return the agent's raw observation at this step (``none`` when absent)."""
        return self.observations.get(agent, NONE)

    def action_of(self, agent: str) -> str:
        """Return the agent's action at this step (``none`` when absent)."""
        return self.actions.get(agent, NONE)


class PerspectiveEntry(BaseModel):
    """What one agent took in at one step: its memory M_i^t is the list of these."""

    timestep: str
    observation: str
    mental_state: str = ""


class Issue(BaseModel):
    """One problem found in a parse, with a code a test or a repair prompt can name."""

    code: str
    message: str
    severity: str = "error"  # "error" asks for a repair; "warning" is only reported
    step: int | None = None
    agent: str | None = None

    def __str__(self) -> str:
        where = "" if self.step is None else f"step {self.step}: "
        return f"{where}{self.message}"


class ValidationReport(BaseModel):
    """The structural score of a parse (appendix A.3 step 1) and the critic's rule checks."""

    structural_score: float
    issues: list[Issue] = Field(default_factory=list)
    unknown_agents: list[str] = Field(default_factory=list)

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def feedback(self) -> str:
        """Render the issues as the 'previous attempt had these issues' text of the parse prompt."""
        return "\n".join(f"- {i}" for i in self.issues) or "none"


class SocialWorld(BaseModel):
    """A sequence of social steps over a fixed, ordered list of agents."""

    model_config = ConfigDict(extra="forbid")

    agents: list[str] = Field(default_factory=list)
    steps: list[SocialStep] = Field(default_factory=list)

    # ---- the paper's JSON -------------------------------------------------------------
    @classmethod
    def from_s3ap(cls, obj: object, agents: Iterable[str] | None = None) -> SocialWorld:
        """Read the paper's S3AP JSON in either form; names are matched to known agents.

        Unknown names are kept as written (so `swm.validation.validate_s3ap` can report them) unless they
        differ from a known agent only in case or spacing, in which case they are normalised.
        """
        names, raw_steps = unwrap_s3ap(obj)
        known = list(agents) if agents is not None else list(names)
        world = cls(agents=list(dict.fromkeys(known)))
        closed = bool(world.agents)  # with names given, unknown names are not added as agents
        for index, raw in enumerate(raw_steps):
            if not isinstance(raw, Mapping):
                raise ValueError(f"step {index} is {type(raw).__name__}, expected an object")
            world.steps.append(world._step_from_raw(index, raw, closed))
        return world

    def _step_from_raw(self, index: int, raw: Mapping[str, object], closed: bool) -> SocialStep:
        observations = self._per_agent(raw.get("observations"), closed)
        actions = self._per_agent(raw.get("actions"), closed)
        dialogue = self._per_agent(raw.get("dialogue"), closed)
        step = SocialStep(
            timestep=str(raw.get("timestep", index)),
            scene=str(raw.get("state", raw.get("scene", NONE))),
            actions=actions,
            dialogue=dialogue,
        )
        for agent, text in observations.items():
            external, mental = split_mental_state(text)
            step.observations[agent] = external if external else NONE
            if mental:
                step.mental_states[agent] = mental
        return step

    def _per_agent(self, value: object, closed: bool) -> dict[str, str]:
        """Read a per-agent field from the dict form or the ``"name: text"`` list form."""
        if value is None:
            return {}
        pairs: list[tuple[str, str]] = []
        if isinstance(value, Mapping):
            pairs = [(str(k), str(v)) for k, v in value.items()]
        elif isinstance(value, list):
            for item in value:
                name, sep, text = str(item).partition(":")
                if not sep:
                    raise ValueError(f"list item {item!r} is not of the form 'agent_name: text'")
                pairs.append((name.strip(), text.strip()))
        else:
            raise ValueError(f"expected an object or a list, got {type(value).__name__}")
        out: dict[str, str] = {}
        for name, text in pairs:
            known = self.resolve_agent(name)
            agent = known or name
            if known is None and not closed:
                self.agents.append(agent)
            out[agent] = f"{out[agent]} {text}".strip() if agent in out else text
        return out

    def resolve_agent(self, name: str) -> str | None:
        """Return the known agent a name refers to (case and spacing ignored), or None."""
        key = agent_key(name)
        for agent in self.agents:
            if agent_key(agent) == key:
                return agent
        return None

    def to_s3ap(self) -> dict[str, Any]:
        """Write the wrapped dict form of appendix A.2 (plus ``dialogue`` where there is any).

        Every agent gets an observation and an action at every step, as the paper's form requires;
        an agent with no entry is written as ``none`` (missing and ``none`` mean the same).
        """
        steps = []
        for step in self.steps:
            observations = {}
            for agent in self._agents_in(step):
                text = step.observations.get(agent, NONE)
                mental = step.mental_states.get(agent)
                if mental:
                    tag = f"<mental_state>{mental}</mental_state>"
                    text = tag if text == NONE else f"{text} {tag}"
                observations[agent] = text
            raw: dict[str, Any] = {
                "timestep": step.timestep,
                "state": step.scene,
                "observations": observations,
                "actions": {a: step.actions.get(a, NONE) for a in self._agents_in(step)},
            }
            if step.dialogue:
                raw["dialogue"] = dict(step.dialogue)
            steps.append(raw)
        return {"agents_names": list(self.agents), "socialized_context": steps}

    def to_model_form(self) -> dict[str, Any]:
        """Write the model-facing list form (``"name: text"`` items), as the parser emits it."""
        out = self.to_s3ap()
        for raw in out["socialized_context"]:
            for key in ("observations", "actions", "dialogue"):
                if key in raw:
                    raw[key] = [f"{a}: {t}" for a, t in raw[key].items()]
        return out

    def _agents_in(self, step: SocialStep) -> list[str]:
        seen = list(self.agents)
        for field in (step.observations, step.mental_states, step.actions):
            seen += [a for a in field if a not in seen]
        return seen

    # ---- tags and perspectives --------------------------------------------------------
    def expand_tags(self) -> SocialWorld:
        """Return a copy with every tag replaced by what it stands for.

        ``<same_as_state />`` becomes the step's scene; ``<same_as_last_action_x />`` the
        previous step's action of agent x (x is the 0-based position in `agents`);
        ``<same_as_last_action />`` every non-none action of the previous step; a bare
        ``none`` observation stays ``none``. Mental states are already separate fields.
        """
        expanded = self.model_copy(deep=True)
        for index, step in enumerate(expanded.steps):
            previous = self.steps[index - 1] if index > 0 else None
            step.scene = self._expand_text(step.scene, step.scene, previous)
            for agent, text in step.observations.items():
                step.observations[agent] = self._expand_text(text, step.scene, previous)
        return expanded

    def _expand_text(self, text: str, scene: str, previous: SocialStep | None) -> str:
        def last_action(match: re.Match[str]) -> str:
            if previous is None:
                return ""
            if match.group(1) is not None:
                position = int(match.group(1))
                if position >= len(self.agents):
                    return match.group(0)  # left as written; validate_s3ap reports it
                agent = self.agents[position]
                action = previous.action_of(agent)
                return "" if is_none(action) else f"{agent}: {action}"
            acted = [f"{a}: {t}" for a, t in previous.actions.items() if not is_none(t)]
            return "; ".join(acted)

        if STATE_RE.search(text) and not STATE_RE.fullmatch(scene.strip() or "x"):
            text = STATE_RE.sub(lambda _m: scene, text)
        text = LAST_ACTION_RE.sub(last_action, text)
        return re.sub(r"\s+", " ", text).strip() or NONE

    def perspective(self, agent: str) -> list[PerspectiveEntry]:
        """Return what the agent observed, step by step: its memory, with tags expanded.

        Steps where it observed ``none`` (and had no mental state) contribute nothing.
        """
        name = self.resolve_agent(agent)
        if name is None:
            raise KeyError(f"unknown agent {agent!r}; known agents: {', '.join(self.agents) or 'none'}")
        memory = []
        for step in self.expand_tags().steps:
            observation = step.observations.get(name, NONE)
            mental = step.mental_states.get(name, "")
            if is_none(observation) and not mental:
                continue
            memory.append(PerspectiveEntry(timestep=step.timestep, observation=observation, mental_state=mental))
        return memory

    def to_text(self) -> str:
        """Render the world as the compact S3AP JSON the QA prompt takes as extra information."""

        return json.dumps(self.to_s3ap(), ensure_ascii=False)


def unwrap_s3ap(obj: object) -> tuple[list[str], list[Any]]:
    """Return (agent names, raw steps) from a wrapped S3AP object, a bare list or a JSON string."""
    if isinstance(obj, str | bytes):
        obj = json.loads(obj)
    if isinstance(obj, SocialWorld):
        return list(obj.agents), obj.to_s3ap()["socialized_context"]
    if isinstance(obj, Mapping):
        if "socialized_context" not in obj:
            if {"timestep", "state"} & set(obj):
                return [], [obj]
            raise ValueError("S3AP object has no 'socialized_context' key")
        names = obj.get("agents_names") or []
        steps = obj["socialized_context"]
        if not isinstance(steps, list):
            raise ValueError("'socialized_context' must be a list of steps")
        return [str(n) for n in names], steps
    if isinstance(obj, list):
        return [], obj
    raise ValueError(f"cannot read S3AP from {type(obj).__name__}")
