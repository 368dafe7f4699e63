"""Self-play RL (OMAR-style): one policy in every seat, per-role rewards, hierarchical or group advantages.

Run it with ``swm.graphs.selfplay.train(plan, db=...)`` or ``swm selfplay``; the torch parts
(`swm.training.policy`, `swm.training.ppo`) load only when a run needs them. The advantage estimators
live below both learning loops, in `swm.training.advantages` (`ESTIMATORS`).
"""

from swm.selfplay.plan import SelfPlayPlan

__all__ = ["SelfPlayPlan"]
