"""Graph state of the lifelong loop: the run's plan, the cycle, and small counters.

Bulk data (tasks, episodes, pairs, policies, metrics) lives in the experience store; the state
holds only ids and numbers that do not grow with the run, so a checkpoint stays small.
"""

from __future__ import annotations

import operator
from typing import Annotated

from typing_extensions import TypedDict

from swm.graph_state import Provenance, SocialWorldState, merge_dict
from swm.lifelong.plan import LifelongPlan


class LifelongInput(TypedDict, total=False):
    """What the ``lifelong`` graph takes: the plan (``{}`` runs the defaults; unknown keys are refused)."""

    plan: LifelongPlan


class LifelongOutput(Provenance, total=False):
    """What the ``lifelong`` graph returns: where the report is, and what each cycle deployed."""

    plan: LifelongPlan
    cycle: int
    phase: str
    incumbent: str
    candidate_policy: str
    collected: Annotated[int, operator.add]
    evaluated: Annotated[int, operator.add]
    kept: Annotated[int, operator.add]
    rejected: Annotated[int, operator.add]
    decisions: Annotated[dict[str, str], merge_dict]
    report_path: str


class EpisodeJob(TypedDict):
    """One episode to play: the payload of a ``collect`` or ``evaluate`` Send (phase collect | dev | test)."""

    episode_id: str
    task_id: str
    cycle: int
    phase: str
    sample: int
    seat: str
    tested_agent: str
    policy_version: str
    plan: LifelongPlan


class LifelongState(SocialWorldState, total=False):
    plan: LifelongPlan  # a checkpoint from before the typed plan holds its JSON dump (`jobs.plan_of` reads both)
    cycle: int
    phase: str
    incumbent: str  # the deployed policy version
    candidate_policy: str  # this cycle's updated policy version
    collected: Annotated[int, operator.add]
    evaluated: Annotated[int, operator.add]
    kept: Annotated[int, operator.add]
    rejected: Annotated[int, operator.add]
    decisions: Annotated[dict[str, str], merge_dict]  # cycle -> the deploy gate's explanation
    report_path: str

