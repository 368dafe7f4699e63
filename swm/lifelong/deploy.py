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
from swm.review import DEPLOY_ANSWER, DeployRequest, GateVerdict, LevelRates, Rate
from swm.stats import two_proportion_test


@dataclass
class DeployDecision:
    deploy: bool
    reasons: list[str] = field(default_factory=list)
    deltas: dict[str, float] = field(default_factory=dict)
    # a person's answer at the ``deploy`` review point ("approve" | "refuse"), which overrides the gate
    reviewed: str | None = None
    note: str = ""

    def explain(self) -> str:
        gate, person = self.gate_reasons(), self._person()
        if self.deploy:
            if gate:  # only a person deploys what the gate refused
                return f"deployed over the gate's {', '.join(gate)} ({person})"
            return ("deployed: no earlier level regressed beyond epsilon and the current level did not fall "
                    "(beyond noise: one-sided two-proportion test)" + (f" ({person})" if person else ""))
        if not gate:
            return f"kept the previous policy: {person}"
        return "kept the previous policy: " + ", ".join(gate) + (f" ({person})" if person else "")

    def _person(self) -> str:
        if self.reviewed is None:
            return ""
        said = {"approve": "approved", "refuse": "refused"}[self.reviewed]
        return f"{said} by a person" + (f": {self.note}" if self.note else "")

    def gate_reasons(self) -> list[str]:
        """The gate's own reasons (the reviewer's are ``reviewer:...``)."""
        return [r for r in self.reasons if not r.startswith("reviewer:")]

    def reviewed_as(self, decision: str, note: str = "") -> DeployDecision:
        """Return this decision as a person answered it: ``approve`` deploys, ``refuse`` keeps the incumbent."""
        return DeployDecision(deploy=decision == "approve", reasons=[*self.gate_reasons(), f"reviewer:{decision}"],
                              deltas=dict(self.deltas), reviewed=decision, note=note)


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


def gate_cycle(store: StoreRecords, plan: LifelongPlan, cycle: int, incumbent: str, candidate: str) -> DeployDecision:
    """Return the deploy gate's decision for cycle ``cycle`` ≥ 1, on the dev split (the store is only read)."""
    curriculum = curriculum_for(plan.levels, plan.cycles)
    return decide(ls.eval_cells(store, plan.run_id, incumbent, deploy_metric(plan), "dev"),
                  ls.eval_cells(store, plan.run_id, candidate, deploy_metric(plan), "dev"),
                  earlier=curriculum[: cycle - 1], current=curriculum[cycle - 1], epsilon=plan.epsilon,
                  alpha=plan.gate_alpha)


def deploy_metric(plan: LifelongPlan) -> str:
    return "completion" if plan.deploy_metric == "completion" else "pass"


def deploy_request(store: StoreRecords, plan: LifelongPlan, cycle: int, incumbent: str, candidate: str,
                   decision: DeployDecision) -> DeployRequest:
    """Return what the ``deploy`` review point shows a person: both policies' dev cells per level and the gate's
    verdict."""
    metric = deploy_metric(plan)
    old = ls.eval_cells(store, plan.run_id, incumbent, metric, "dev")
    new = ls.eval_cells(store, plan.run_id, candidate, metric, "dev")

    def rate(cell: Cell | None) -> Rate | None:
        return None if cell is None else Rate(successes=cell.successes, n=cell.n, rate=round(cell.rate, 6))

    levels = {level: LevelRates(incumbent=rate(old.get(level)), candidate=rate(new.get(level)),
                                delta=decision.deltas.get(level)) for level in sorted({*old, *new})}
    return DeployRequest(review="deploy", run_id=plan.run_id, cycle=cycle, incumbent=incumbent, candidate=candidate,
                         metric=metric, split="dev", levels=levels,
                         gate=GateVerdict(deploy=decision.deploy, reasons=list(decision.reasons),
                                          explain=decision.explain()),
                         answer=DEPLOY_ANSWER)


def deploy_cycle(store: StoreRecords, plan: LifelongPlan, cycle: int, incumbent: str, candidate: str,
                 decision: DeployDecision | None = None) -> tuple[str, str]:
    """Choose on the dev split and write both curves' R[cycle, ·] from the test split; return (serving, why).

    ``decision`` is the one to apply (a reviewed `gate_cycle`); by default the gate's own. The deployed curve's row
    is the test result of the policy in service after this cycle; the candidate curve's row is the test result of
    the policy trained this cycle, deployed or not. Both are that policy's own episodes (the store names them),
    never another policy's row.
    """
    run = plan.run_id
    if cycle == 0:
        serving, explain = "p0", "baseline: the initial policy p0"
        ls.put_deploy(store, run, 0, "p0", "p0", True, [], {})
    else:
        decision = decision or gate_cycle(store, plan, cycle, incumbent, candidate)
        serving = candidate if decision.deploy else incumbent
        explain = decision.explain()
        ls.put_deploy(store, run, cycle, candidate, incumbent, decision.deploy, decision.reasons, decision.deltas)
    for curve, policy in (("deployed", serving), ("candidate", candidate)):
        played = ls.played_cycle(store, run, policy, "test")
        for metric in ("completion", "pass"):
            cells = ls.eval_cells(store, run, policy, metric, "test")
            ls.put_matrix_row(store, run, curve, cycle, policy, metric, cells, played)
    return serving, explain
