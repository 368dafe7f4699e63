"""Graph state of a self-play run: the plan, the iteration, and this iteration's small statistics.

Rollouts (tokens, log-probs, rewards, advantages) live in the experience store and the adapter
in the run directory; the state holds numbers that do not grow with the run.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import TypedDict

from swm.graph_state import merge_dict
from swm.selfplay.plan import SelfPlayPlan


class RolloutJob(TypedDict):
    """One rollout to play: the payload of a ``rollout`` Send."""

    rollout_id: str
    unit_id: str  # the task id, or the game and its seed
    unit: dict[str, Any]  # {"task": Task dump} or {"game_seed": n}
    iteration: int
    sample: int
    phase: str
    plan: SelfPlayPlan


class SelfPlayInput(TypedDict, total=False):
    """What the ``selfplay`` graph takes: the plan (``{}`` runs the defaults; unknown keys are refused)."""

    plan: SelfPlayPlan


class SelfPlayState(TypedDict, total=False):
    plan: SelfPlayPlan  # validated once, by the ``start`` node
    iteration: int  # the iteration in progress (its rollouts use checkpoint ``iteration``)
    rolled: Annotated[int, operator.add]  # rollouts played by this thread (a resumed run does not replay them)
    current: Annotated[dict[str, Any], merge_dict]  # this iteration's step statistics
    summaries: Annotated[dict[str, Any], merge_dict]  # iteration -> its summary
    stopped: str | None  # why the run stopped early (a diverged update), else None
