"""Self-play RL (OMAR-style): one policy in every seat, per-role rewards, hierarchical or group advantages."""

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

__all__ = [
    "AdvantageConfig",
    "HierarchicalAdvantages",
    "TurnInput",
    "broadcast",
    "discounted_return",
    "gae",
    "group_normalised",
    "hierarchical",
    "normalise_per_role",
]
