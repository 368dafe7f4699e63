"""``python -m bench.rungs``: each policy of a curriculum played on every rung's test tasks (retention, forgetting).

Not a timed test. The chain ``swm learn`` (decisions) → ``swm selfplay --level two-seat`` → the multi-turn
stages trains one LoRA policy rung by rung; this plays each named policy (``--policy NAME=PATH``, in the
chain's order; ``NAME=`` alone is the base model: a fresh adapter, which plays as the base) on the same
test-split tasks of each rung (``--levels``, default ``decision,two-seat,multi-turn-4``), and reports the
R matrix (rows: policies, columns: rungs; pass rate with its Wilson 95% interval), each policy against the
one before it on each rung (exact McNemar, paired on the same tasks), and **retention**: on each rung, the
last policy against the policy that finished training on it (``--trained RUNG=NAME``), with the paired rate
difference's Newcombe interval (`swm.stats.paired_rate_difference`) — BWT ≥ 0 is claimed only where that
interval's lower end is at or above zero.

A decision is played as ``swm learn`` evaluates one (`swm.lifelong.decision_play.play_decision`, the
policy's adapter served by llama.cpp, sample 0's seed); a seat level as ``bench.two_seat`` evaluates
(`bench.two_seat.evaluate`: one seeded rollout a task, both seats the policy). Every cell is kept in
``<out>/rungs.json`` as it finishes, so a killed run plays only what is left; ``<out>/rungs.md`` is the table.
Draws follow ``SWM_EMBEDDED_DRAW`` (the page says which): all policies of one run are played under the same.

    SWM_EMBEDDED_DRAW=seat python -m bench.rungs --policy base= \\
        --policy decisions=~/swm-runs/curriculum/decisions --policy two-seat=~/swm-runs/curriculum/two-seat/two-seat \\
        --policy multi-turn-4=~/swm-runs/h4/rl-s1/runs/two-seat-selfplay \\
        --trained decision=decisions --trained two-seat=two-seat --trained multi-turn-4=multi-turn-4 \\
        --decision-tasks 100 --seat-tasks 100 --out ~/swm-runs/rungs
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.two_seat import evaluate, plan_of
from bench.two_seat import parser as two_seat_parser
from swm.context import ModelContext
from swm.lifelong.decision_play import play_decision
from swm.selfplay.checkpoint import checkpoint_dir
from swm.selfplay.loop import ensure_initial_checkpoint
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.serving import served_sampler
from swm.serving import draws
from swm.stats import mcnemar_exact, paired_rate_difference, wilson_interval
from swm.tasks.families import DECISION, TWO_SEAT
from swm.tasks.levels import is_seat_level, seat_levels
from swm.tasks.splits import split_tasks

RUNGS = (DECISION, *seat_levels())


def policy_plan(name: str, adapter: str, level: str, out: Path, family: str) -> dict[str, Any]:
    """The self-play plan whose checkpoint 0 is the policy (its adapter as the warm start; none: a fresh one)."""
    argv = ["--level", level if is_seat_level(level) else TWO_SEAT, "--family", family, "--iterations", "1",
            "--out", str(out / "policies" / name)]
    if adapter:
        argv += ["--from", adapter]
    return plan_of(two_seat_parser().parse_args(argv), "selfplay")


def decision_cell(plan: dict[str, Any], n: int, temperature: float) -> list[dict[str, Any]]:
    """The policy's first ``n`` decision test tasks of the plan's family, played as ``swm learn`` evaluates them."""
    sp = SelfPlayPlan.model_validate(plan)
    ensure_initial_checkpoint(sp)
    _, spec = served_sampler(sp, checkpoint_dir(sp.run_dir, 0), "eval")
    ctx = ModelContext(model=spec, temperature=temperature)
    rows = []
    for task in split_tasks("test", [DECISION], [sp.family], n):
        record, _ = play_decision(task, ctx, episode_id=f"rungs/{task.task_id}", sample=0, run_id="rungs",
                                  phase="test")
        rows.append({"task": task.task_id, "passed": record.verdict.passed,
                     "transcript": [[t.agent, t.text] for t in record.turns]})
    return rows


def cell(name: str, adapter: str, rung: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Play one (policy, rung) cell."""
    plan = policy_plan(name, adapter, rung, args.out, args.family)
    if rung == DECISION:
        return decision_cell(plan, args.decision_tasks, args.temperature)
    return [{k: r[k] for k in ("task", "passed", "transcript")} for r in evaluate(plan, 0, args.seat_tasks)]


def _rate(rows: Sequence[dict[str, Any]]) -> str:
    k, n = sum(bool(r["passed"]) for r in rows), len(rows)
    low, high = wilson_interval(k, n)
    return f"{k}/{n} = {k / n:.3f} [{low:.3f}, {high:.3f}]" if n else "-"


def _passed(rows: Sequence[dict[str, Any]]) -> list[bool]:
    return [bool(r["passed"]) for r in sorted(rows, key=lambda r: r["task"])]


def report(results: dict[str, Any], policies: Sequence[str], rungs: Sequence[str], trained: dict[str, str]) -> str:
    """The R matrix, each policy against the one before it, and retention on each trained rung."""
    cells = results["cells"]
    lines = [f"| policy | {' | '.join(rungs)} |", "|---|" + "---|" * len(rungs)]
    lines += [f"| {p} | " + " | ".join(_rate(cells.get(p, {}).get(r, [])) for r in rungs) + " |" for p in policies]
    lines += ["", "| rung | before → after | only before | only after | exact McNemar p |", "|---|---|---|---|---|"]
    for r in rungs:
        for before, after in itertools.pairwise(policies):
            a, b = cells.get(before, {}).get(r), cells.get(after, {}).get(r)
            if a and b:
                lost, gained, p = mcnemar_exact(_passed(a), _passed(b))
                lines.append(f"| {r} | {before} → {after} | {lost} | {gained} | {p:.3g} |")
    last = policies[-1]
    rows = []
    for r, name in trained.items():
        a, b = cells.get(name, {}).get(r), cells.get(last, {}).get(r)
        if a and b and name != last:
            x, y = _passed(a), _passed(b)
            both = sum(1 for u, v in zip(x, y, strict=True) if u and v)
            lost, gained, _ = mcnemar_exact(x, y)
            d, low, high = paired_rate_difference(both, lost, gained, len(x) - both - lost - gained)
            verdict = "kept (BWT ≥ 0)" if low >= 0 else ("forgotten" if high < 0 else "not told apart")
            rows.append(f"| {r} | {name} → {last} | {d:+.3f} [{low:+.3f}, {high:+.3f}] | {verdict} |")
    if rows:
        lines += ["", "| rung | trained → last | paired difference (Newcombe 95%) | reading |", "|---|---|---|---|",
                  *rows]
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.rungs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", action="append", required=True, metavar="NAME=PATH",
                    help="a policy in the chain's order: an adapter, self-play checkpoint or run folder, or a swm "
                         "learn --out folder; NAME= alone is the base")
    ap.add_argument("--levels", default=f"{DECISION},{TWO_SEAT},multi-turn-4", help="the rungs, comma-separated")
    ap.add_argument("--trained", action="append", default=[], metavar="RUNG=NAME",
                    help="the policy that finished training on a rung (retention is measured from it)")
    ap.add_argument("--family", default="mutual_friend")
    ap.add_argument("--decision-tasks", type=int, default=100)
    ap.add_argument("--seat-tasks", type=int, default=100, help="test tasks a seat level (two-seat, multi-turn)")
    ap.add_argument("--temperature", type=float, default=0.7, help="a decision's sampling temperature (swm learn's)")
    ap.add_argument("--out", type=Path, default=Path("bench-out/rungs"))
    return ap


def _pairs(values: Sequence[str], what: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: {what} {value!r} is not NAME=VALUE")
        pairs[key] = os.path.expanduser(rest)
    return pairs


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    policies, trained = _pairs(args.policy, "--policy"), _pairs(args.trained, "--trained")
    rungs = [r.strip() for r in args.levels.split(",") if r.strip()]
    unknown = [r for r in [*rungs, *trained] if r not in RUNGS] + [n for n in trained.values() if n not in policies]
    if unknown:
        raise SystemExit(f"error: {unknown[0]!r} is not a rung ({', '.join(RUNGS)}) or a --policy name")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "rungs.json"
    results = json.loads(path.read_text()) if path.is_file() else {"cells": {}}
    results["draw"] = draws.mode()
    for name, adapter in policies.items():
        for rung in rungs:
            if rung not in results["cells"].setdefault(name, {}):
                print(f"playing {name} on {rung} …", flush=True)
                results["cells"][name][rung] = cell(name, adapter, rung, args)
                path.write_text(json.dumps(results, indent=1))
    table = report(results, list(policies), rungs, trained)
    (args.out / "rungs.md").write_text(f"Draws: {results['draw']}.\n\n{table}")
    print(table)


if __name__ == "__main__":
    main()
