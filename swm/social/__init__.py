"""Social episodes: SOTOPIA-compatible scenarios, actions, turns, judgements and their export."""

from swm.social.judgement import DIMENSIONS, Judgement, SotopiaEvaluation
from swm.social.models import (
    ACTION_TYPES,
    AgentAction,
    AgentActionForModel,
    AgentProfile,
    Scenario,
    ScenarioAgent,
    TurnRecord,
)

__all__ = ["ACTION_TYPES", "DIMENSIONS", "AgentAction", "AgentActionForModel", "AgentProfile", "Judgement",
           "Scenario", "ScenarioAgent", "SotopiaEvaluation", "TurnRecord"]
