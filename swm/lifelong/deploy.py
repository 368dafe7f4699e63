"""The deploy gate: a cycle's policy replaces the last only if it keeps what was learned.

`decide` compares the candidate's dev-split rates per level with the incumbent's: the candidate
is refused if any level trained before this cycle drops by more than ``epsilon`` (reason
``regressed:<level>``) or the level of this cycle drops at all (``current_fell:<level>``), and
in both cases only when the drop is more than noise: the one-sided two-proportion test of the
candidate being worse must reach ``alpha`` (the plan's ``gate_alpha``, 0.05). A point estimate
that dips on one or two of a handful of tasks refuses nothing; with 100 dev tasks a cell, a drop
of about 0.15 from 50% does. Levels not yet trained are reported but never block (nothing was
learned there to keep).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from swm.checkpoints.store import StoreRecords
from swm.lifelong import store as ls
from swm.lifelong.metrics import Cell, curriculum_for
from swm.lifelong.plan import LifelongPlan
from swm.stats import two_proportion_test


@dataclass
class DeployDecision:
    deploy: bool
    reasons: list[str] = field(default_factory=list)
    deltas: dict[str, float] = field(default_factory=dict)

    def explain(self) -> str:
        if self.deploy:
            return ("deployed: no earlier level regressed beyond epsilon and the current level did not fall "
                    "(beyond noise: one-sided two-proportion test)")
        return "kept the previous policy: " + ", ".join(self.reasons)


def worse_p(incumbent: Cell, candidate: Cell) -> float:
    """Return the one-sided p-value of the candidate's rate being below the incumbent's."""
    z, p = two_proportion_test(incumbent.successes, incumbent.n, candidate.successes, candidate.n)
    return p / 2 if z < 0 else 1 - p / 2


def decide(incumbent: Mapping[str, Cell], candidate: Mapping[str, Cell], earlier: Sequence[str],
           current: str, epsilon: float = 0.05, alpha: float = 0.05) -> DeployDecision:
    """Return whether the candidate replaces the incumbent, with reason codes when it does not."""
    reasons: list[str] = []
    deltas: dict[str, float] = {}
    worse: dict[str, bool] = {}
    for level in candidate:
        if level in incumbent:
            deltas[level] = round(candidate[level].rate - incumbent[level].rate, 6)
            worse[level] = worse_p(incumbent[level], candidate[level]) < alpha
    for level in earlier:
        if level != current and level in deltas and deltas[level] < -epsilon and worse[level]:
            reasons.append(f"regressed:{level}")
    if current in deltas and deltas[current] < 0 and worse[current]:
        reasons.append(f"current_fell:{current}")
    if current not in candidate:
        reasons.append(f"not_evaluated:{current}")
    return DeployDecision(deploy=not reasons, reasons=reasons, deltas=deltas)


def deploy_cycle(store: StoreRecords, plan: LifelongPlan, cycle: int, incumbent: str, candidate: str) -> tuple[str,
                 str]:
    """Choose on the dev split and write both curves' R[cycle, ·] from the test split; return (serving, why).

    The deployed curve's row is the test result of the policy in service after this cycle; the
    candidate curve's row is the test result of the policy trained this cycle, deployed or not.
    Both are that policy's own episodes (the store names them), never another policy's row.
    """
    run = plan.run_id
    if cycle == 0:
        serving, explain = "p0", "baseline: the initial policy p0"
        ls.put_deploy(store, run, 0, "p0", "p0", True, [], {})
    else:
        metric = "completion" if plan.deploy_metric == "completion" else "pass"
        curriculum = curriculum_for(plan.levels, plan.cycles)
        decision = decide(ls.eval_cells(store, run, incumbent, metric, "dev"),
                          ls.eval_cells(store, run, candidate, metric, "dev"),
                          earlier=curriculum[: cycle - 1], current=curriculum[cycle - 1], epsilon=plan.epsilon,
                          alpha=plan.gate_alpha)
        serving = candidate if decision.deploy else incumbent
        explain = decision.explain()
        ls.put_deploy(store, run, cycle, candidate, incumbent, decision.deploy, decision.reasons, decision.deltas)
    for curve, policy in (("deployed", serving), ("candidate", candidate)):
        played = ls.played_cycle(store, run, policy, "test")
        for metric in ("completion", "pass"):
            cells = ls.eval_cells(store, run, policy, metric, "test")
            ls.put_matrix_row(store, run, curve, cycle, policy, metric, cells, played)
    return serving, explain
