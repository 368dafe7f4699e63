"""Self-play RL (OMAR-style): one policy in every seat, per-role rewards, hierarchical or group advantages.

Run it with ``swm.graphs.selfplay.train(plan, db=...)`` or ``swm selfplay``; the torch parts
(`policy`, `ppo`) load only when a run needs them.
"""

from swm.selfplay.plan import SelfPlayPlan
from swm.training.advantages import (
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
]
