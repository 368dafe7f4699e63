"""Self-play RL (OMAR-style): one policy in every seat, per-role rewards, hierarchical or group advantages.

``train(plan, db=...)`` runs (or resumes) a run; the torch parts (`policy`, `ppo`) load only
when a run needs them.
"""

from swm.selfplay.advantages import (
    AdvantageConfig,
    HierarchicalAdvantages,
    TurnInput,
    broadcast,
    discounted_return,
    gae,
    group_normalised,
    hierarchical,
    normalise_per_role,
)
from swm.selfplay.api import train
from swm.selfplay.plan import SelfPlayPlan

__all__ = [
    "AdvantageConfig",
    "SelfPlayPlan",
    "HierarchicalAdvantages",
    "TurnInput",
    "broadcast",
    "discounted_return",
    "gae",
    "group_normalised",
    "hierarchical",
    "normalise_per_role",
    "train",
]
