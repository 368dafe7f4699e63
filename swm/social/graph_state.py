"""Graph state of a social episode and of the per-turn policy subgraphs.

`EpisodeState` (the episode graph) holds only small values that do not grow with the episode:
the scenario's reference (the scenario itself is a store row: `swm.social.scenario_store`), whose
turn it is, the idle count, the active agents, and the latest turn's decision. The turns
themselves are rows in the experience store (`swm.social.store`); the whole `SocialWorld` is put
in ``world`` once, when the episode finishes. A checkpoint thus stays the same size from the
first turn to the last.

A policy subgraph (`plain`, `foresee`, `lookahead`) reads `PolicyInput` and returns
`PolicyOutput`: a ``decision`` plus its own ``usage``/``prompts``/``models``. Its working keys
(candidates, futures, scores) live only inside the subgraph and start empty every turn.
"""

from __future__ import annotations

from typing import Annotated, Any, Required

from typing_extensions import TypedDict

# re-exported (swm.social.graph_state.ActStrategy): swm.defaults holds them, for the CLI's options
from swm.defaults import RENAMED_STRATEGIES as RENAMED_STRATEGIES
from swm.defaults import ActStrategy as ActStrategy
from swm.graph_state import Provenance, SocialWorldState, merge_dict
from swm.social.models import Scenario
from swm.state import SocialWorld
from swm.usage import CallStats, merge_usage


class PolicyInput(TypedDict, total=False):
    """One turn of one agent: what a policy subgraph (``foresee_act``, ``lookahead``) reads."""

    scenario: Required[dict[str, Any]]  # a reference {"id", "ref"} (swm.social.scenario_store), or inline
    episode_id: Required[str]
    turn: Required[int]
    actor: Required[str]
    active: list[str]
    tested_agent: str


class PolicyOutput(TypedDict, total=False):
    # {"action", "intended", "prediction", "candidates", "fallback", "prompts", "models"}
    decision: dict[str, Any]
    usage: Annotated[dict[str, CallStats], merge_usage]
    prompts: Annotated[dict[str, str], merge_dict]
    models: Annotated[dict[str, str], merge_dict]


class PolicyState(PolicyInput, PolicyOutput, total=False):
    intended: dict[str, Any]
    sample_error: str | None
    index: int  # a candidate's index inside a Send branch
    candidates: Annotated[dict[str, dict[str, Any]], merge_dict]  # "i" -> {"action", "error"}
    futures: Annotated[dict[str, dict[str, Any]], merge_dict]  # "i" -> {"steps", "error"}
    scores: Annotated[dict[str, dict[str, Any]], merge_dict]  # "i" -> {"goal_progress", "reasoning", "note"}
    chosen: str


class ScenarioRef(TypedDict):
    """A scenario stored once in the experience store (`swm.social.scenario_store.put_scenario`)."""

    id: str
    ref: str  # "sha256:…" of its content


class EpisodeInput(TypedDict, total=False):
    """What the ``episode`` graph takes (see `graphs.episode`)."""

    # a scenario id (a shipped one, or the SOTOPIA sample's id, env id or codename: swm.scenarios.resolve), the
    # scenario itself (id, scenario, agents with name and goal), or its reference {"id", "ref"}
    scenario: Required[str | Scenario | ScenarioRef]
    episode_id: str  # default: the scenario id and a random suffix
    policies: dict[str, ActStrategy]  # agent name -> policy, default plain
    tested_agent: str  # the seat played by the "agent" model role (default the first)
    max_turns: int  # default 20
    judge: bool  # default True
    judge_protocol: str  # "sotopia" (default: sotopia's own evaluator) or "swm" (per agent); see nodes.judge


class EpisodeOutput(Provenance, total=False):
    """What the ``episode`` graph returns: the world, the judge's scores, and the run's cost."""

    episode_id: str
    world: SocialWorld | None
    judgements: dict[str, dict[str, Any]]  # agent -> Judgement.model_dump()
    judge_protocol: str
    end_reason: str
    turn: int
    active: list[str]


class EpisodeState(SocialWorldState, total=False):
    # input
    scenario: dict[str, Any]  # after setup: the reference to the stored scenario (inline without a store)
    episode_id: str
    policies: dict[str, ActStrategy]
    tested_agent: str  # the seat played by the "agent" role; every other seat is "partner"
    max_turns: int
    judge: bool
    judge_protocol: str
    # turn bookkeeping
    turn: int
    actor: str
    active: list[str]
    idle: int
    done: bool
    end_reason: str
    usage_mark: CallStats
    decision: dict[str, Any]
    # results
    judgements: dict[str, dict[str, Any]]  # agent -> Judgement.model_dump()
