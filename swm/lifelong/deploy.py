"""The deploy gate: a cycle's policy replaces the last only if it keeps what was learned.

`decide` compares the candidate's held-out rates per level with the incumbent's: the candidate
is refused if any level trained before this cycle drops by more than ``epsilon`` (reason
``regressed:<level>``) or the level of this cycle drops at all (``current_fell:<level>``).
Levels not yet trained are reported but never block (nothing was learned there to keep).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from swm.lifelong.metrics import Cell


@dataclass
class DeployDecision:
    deploy: bool
    reasons: list[str] = field(default_factory=list)
    deltas: dict[str, float] = field(default_factory=dict)

    def explain(self) -> str:
        if self.deploy:
            return "deployed: no earlier level regressed beyond epsilon and the current level did not fall"
        return "kept the previous policy: " + ", ".join(self.reasons)


def decide(incumbent: Mapping[str, Cell], candidate: Mapping[str, Cell], earlier: Sequence[str],
           current: str, epsilon: float = 0.05) -> DeployDecision:
    """Return whether the candidate replaces the incumbent, with reason codes when it does not."""
    reasons: list[str] = []
    deltas: dict[str, float] = {}
    for level in candidate:
        if level in incumbent:
            deltas[level] = round(candidate[level].rate - incumbent[level].rate, 6)
    for level in earlier:
        if level != current and level in deltas and deltas[level] < -epsilon:
            reasons.append(f"regressed:{level}")
    if current in deltas and deltas[current] < 0:
        reasons.append(f"current_fell:{current}")
    if current not in candidate:
        reasons.append(f"not_evaluated:{current}")
    return DeployDecision(deploy=not reasons, reasons=reasons, deltas=deltas)
