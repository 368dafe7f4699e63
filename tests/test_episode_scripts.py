"""Scripted replies for social-episode tests (helpers; the one test checks the script itself)."""

from __future__ import annotations

import itertools
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model

from swm.social.judgement import DIMENSIONS
from swm.social.models import AgentActionForModel, AgentProfile, Scenario, ScenarioAgent
from swm.social.schemas import Foresight, FutureScore, PredictedMind, PredictedReaction
from swm.testing import ScriptedChatModel

GOALS = {"Ann": "GOAL-ANN-7f3 sell the lamp for 40", "Bob": "GOAL-BOB-9k2 buy the lamp for 20",
         "Cy": "GOAL-CY-1q8 keep the peace"}
SECRETS = {"Ann": "SECRET-ANN-x1 the lamp is broken", "Bob": "SECRET-BOB-y2 has 100 dollars",
           "Cy": "SECRET-CY-z3 owns the shop"}


def scenario(n: int = 2, sid: str = "test-lamp") -> Scenario:
    names = list(GOALS)[:n]
    return Scenario(id=sid, scenario="A lamp is for sale at a flea market.", relationship="stranger",
                    agents=[ScenarioAgent(name=a, goal=GOALS[a], profile=AgentProfile(
                        first_name=a, age=30, occupation="trader", public_info=f"{a} likes lamps.",
                        secret=SECRETS[a])) for a in names])


_Loose = create_model("SotopiaEvaluation", __config__=ConfigDict(extra="allow"))


def loose(**args: Any) -> BaseModel:
    """A reply object carrying any arguments (out of range, missing); `ScriptedChatModel` wraps it.

    (An AIMessage is itself a pydantic model, so the scripted model would wrap it again.)
    """
    return _Loose(**args)


def evaluation(*, drop: tuple[str, ...] = (), **override: Any) -> BaseModel:
    args: dict[str, Any] = {}
    for name, (low, high) in DIMENSIONS.items():
        args[f"{name}_reasoning"] = f"why {name}"
        args[name] = (low + high) // 2
    args.update(override)
    return loose(**{k: v for k, v in args.items() if k not in drop})


def env_response(agents: int = 2, **override: Any) -> BaseModel:
    """sotopia's one-call reply for every agent: ``agent_<i>_evaluation`` of [reasoning, score] per dimension.

    ``override`` maps ``agent_<i>_<dimension>`` (or ``<dimension>`` for every agent) to a score.
    """
    args: dict[str, Any] = {}
    for i in range(1, agents + 1):
        args[f"agent_{i}_evaluation"] = {
            name: [f"why {name}", override.get(f"agent_{i}_{name}", override.get(name, (low + high) // 2))]
            for name, (low, high) in DIMENSIONS.items()}
    return create_model("EnvResponse", __config__=ConfigDict(extra="allow"))(**args)


def seats_of(prompt: str) -> list[str]:
    """The participants of a sotopia judge prompt, in seat order (its "Participants: A and B" line)."""
    found = re.search(r"^Participants: (.+)$", prompt, re.M)
    return found.group(1).split(" and ") if found else []


class Responder:
    """Answer by tool name; ``action`` gives each act call's action (a callable of the call index)."""

    def __init__(self, action: Any = None, fail: dict[str, Any] | None = None) -> None:
        self.counter = itertools.count()
        self.action = action or (lambda i: AgentActionForModel(action_type="speak", argument=f"line {i}"))
        self.fail = fail or {}
        self.seen: dict[str, int] = {}

    def __call__(self, prompt: str, tool: str | None) -> BaseModel | str | Exception:
        n = self.seen[tool or ""] = self.seen.get(tool or "", 0) + 1
        failing = self.fail.get(tool or "")
        if failing is not None and (failing is True or n in failing):
            return "this is not a tool call"
        if tool == "AgentActionForModel":
            return self.action(next(self.counter))
        if tool == "Foresight":
            found = re.search(r'<data name="others">\n([^,\n]*)', prompt)
            other = found.group(1) if found else "Bob"
            return Foresight(mental_states=[PredictedMind(agent=other, mental_state="wary")],
                             reactions=[PredictedReaction(agent=other, action_type="speak", argument="too much")],
                             next_state="they haggle")
        if tool == "FutureScore":
            return FutureScore(reasoning="ok", goal_progress=5)
        if tool == "SotopiaEvaluation":
            return evaluation()
        if tool == "EnvResponse":
            return env_response(len(seats_of(prompt)))
        raise AssertionError(f"unexpected tool {tool}")


def model(**kwargs: Any) -> ScriptedChatModel:
    return ScriptedChatModel(respond=Responder(**kwargs))


def test_scripted_scenario_is_valid() -> None:
    s = scenario(3)
    assert s.names == ["Ann", "Bob", "Cy"]
    assert "GOAL-BOB" not in s.background_for("Ann") and "SECRET-BOB" not in s.background_for("Ann")
