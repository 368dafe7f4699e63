"""The retention benchmark: does a policy keep what it learnt over three levels, and carry it to an untrained family?

One `swm learn` thread (its own SQLite file, resumable) climbs a curriculum, one level a cycle —
``decision`` → ``two-turn`` → ``easy`` episodes by default, the last repeated when ``--cycles`` is
larger — training on two families (``--families``) and evaluating a third it never trains on
(``--transfer``) on the same splits. Test cells: ``--test-per-cell`` tasks per decision and two-turn
cell (generated, pinned by digest; names from the eval pool by default, disjoint from training's),
and the frozen split's 4 tasks per episode cell (all it holds); the deploy gate chooses on
``--dev-per-cell`` dev tasks. Every policy is also played on the shifted test cells (``--eval-shifts``).

The tables, each from the store alone (rerunning the command rewrites them with no model calls):

* **R** — rows: the policy after cycle i (the *deployed* curve: in service; the *candidate* curve: what
  cycle i trained, deployed or not); columns: level × family test cells, pass rate with its Wilson 95%
  interval;
* per level and cycle over the trained families: **completion** (the checker's goal reached), **pass**
  (completion with no violation) and **correct among well-formed answers**;
* **BWT** (mean over trained columns of R[T, j] − R[last trained, j]), per level and per column, and
  **F_k** (mean drop from a column's best earlier rate to its rate after cycle k), each with the MOVER
  interval of `swm.lifelong.metrics` (a stated formula: Wilson intervals of the cells combined, Zou &
  Donner 2008; the maximising cell of F_k taken as fixed); **transfer** to the untrained family,
  R[T, j] − R[0, j] per level;
* the shifted cells per policy, and per cycle what was trained on.

The command (hours on a 2-core CPU: at the defaults a policy plays about 2,600 evaluation episodes,
1,800 of them without the shifted cells, and a cycle collects 400 training samples)::

    python -m bench.retention --update rs-sft --cycles 3 --levels decision,two-turn,easy \\
        --families mutual_friend,negotiation --transfer scheduling --tasks 200 --samples 2 \\
        --test-per-cell 200 --dev-per-cell 100 --out bench-three-levels

Every move is drawn with ``SWM_EMBEDDED_DRAW=alone`` unless told otherwise, as in `bench.learning`.
Not a timed test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.learning import add_task_switches, add_training_options, task_switches
from bench.learning_cells import Scored, formed_text, learn_summary, merge, rate_text, scored_cells, versus
from bench.results import results_page
from swm.checkpoints import ExperienceStore
from swm.lifelong import store as ls
from swm.lifelong.metrics import Cell, Estimate, bwt, cell_schedule, change, column, curriculum_for, forgetting
from swm.lifelong.samples import kept_for_sft, load_samples
from swm.tasks.splits import PER_CELL

CURVES = ("deployed", "candidate")


def learn_command(args: argparse.Namespace) -> list[str]:
    """Return the `swm learn` command line of the run."""
    families = args.families.split(",")
    evaluated = families + [f for f in args.transfer.split(",") if f and f not in families]
    return [sys.executable, "-m", "swm", "learn", "--update", args.update, "--keep", "passed", "--gating", "on",
            *task_switches(args), "--cycles", str(args.cycles), "--levels", args.levels,
            "--families", ",".join(families), "--eval-families", ",".join(evaluated),
            "--episodes-per-level", str(args.tasks * args.samples), "--samples-per-task", str(args.samples),
            "--max-turns", str(args.max_turns), "--heldout-per-cell", str(args.test_per_cell),
            "--dev-per-cell", str(args.dev_per_cell), "--temperature", str(args.temperature),
            "--concurrency", str(args.concurrency), "--train-steps", str(args.train_steps),
            "--train-lr", str(args.train_lr), "--train-batch-size", str(args.train_batch_size),
            "--train-rank", str(args.train_rank), "--db", str(args.out / "retention.db"),
            "--thread-id", args.prefix, "--out", str(args.out / "run"), "--json"]


def r_matrix(scored: Mapping[tuple[str, str, str, str], Scored], policies: Mapping[int, str],
             levels: Sequence[str], families: Sequence[str]) -> dict[tuple[int, str], Cell]:
    """Return R[cycle, level/family] from the test cells of the policy each cycle's row counts.

    A cell's ``source`` names the policy's episode set, so two rows of one policy are one term in an
    interval (`swm.lifelong.metrics`): a change between them is exactly 0.
    """
    out: dict[tuple[int, str], Cell] = {}
    for cycle, policy in policies.items():
        for level in levels:
            for family in families:
                cell = merge(v for (pv, lv, fam, _), v in scored.items() if (pv, lv, fam) == (policy, level, family))
                if cell.n:
                    out[(cycle, column(level, family))] = Cell(cell.passed, cell.n,
                                                               source=f"{policy}/test/{column(level, family)}")
    return out


def retention(r: Mapping[tuple[int, str], Cell], curriculum: Sequence[str], levels: Sequence[str],
              trained: Sequence[str], untrained: Sequence[str]) -> dict[str, Estimate | None]:
    """Return BWT (overall, per level, per trained column), F_k for k ≥ 2, and transfer per untrained column."""
    schedule = cell_schedule(curriculum, trained)
    last = max(c for c, _ in r)
    columns = [column(lv, f) for lv in levels for f in trained]
    out: dict[str, Estimate | None] = {"BWT": bwt(r, columns, schedule)}
    for level in levels:
        out[f"BWT {level}"] = bwt(r, [column(level, f) for f in trained], schedule)
    for j in columns:
        out[f"BWT {j}"] = bwt(r, [j], schedule)
    for k in range(2, last + 1):
        out[f"F_{k}"] = forgetting(r, columns, schedule, k)
    for level in levels:
        for f in untrained:
            out[f"transfer {column(level, f)}"] = change(r, column(level, f), last, 0)
    return out


def _estimate(e: Estimate | None) -> str:
    return "– (no trained column before the last cycle)" if e is None else \
        f"{100 * e.value:+.1f} pts [{100 * e.low:+.1f}, {100 * e.high:+.1f}]"


def matrix_table(r: Mapping[tuple[int, str], Cell], policies: Mapping[int, str], columns: Sequence[str],
                 curriculum: Sequence[str]) -> list[str]:
    """Render R: a row per cycle (its policy and the level it trained), a column per level × family."""
    lines = ["| after cycle | trained | policy | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 3)]
    for cycle, policy in sorted(policies.items()):
        trained = curriculum[cycle - 1] if cycle else "– (base)"
        cells = [rate_text(r[(cycle, j)].successes, r[(cycle, j)].n) if (cycle, j) in r else "–" for j in columns]
        lines.append(f"| {cycle} | {trained} | {policy} | " + " | ".join(cells) + " |")
    return lines


def level_table(scored: Mapping[tuple[str, str, str, str], Scored], policies: Mapping[int, str],
                levels: Sequence[str], families: Sequence[str]) -> list[str]:
    """Render completion, pass and correct among well-formed per level and cycle, over ``families``."""
    lines = ["| after cycle | policy | level | completion | pass | correct among well-formed |",
             "|---|---|---|---|---|---|"]
    for cycle, policy in sorted(policies.items()):
        for level in levels:
            cell = merge(v for (pv, lv, fam, _), v in scored.items()
                         if pv == policy and lv == level and fam in families)
            lines.append(f"| {cycle} | {policy} | {level} | {rate_text(cell.completed, cell.n)} | "
                         f"{rate_text(cell.passed, cell.n)} | {formed_text(cell)} |")
    return lines


def shift_table(shifted: Mapping[tuple[str, str, str, str], Scored], policies: Mapping[int, str]) -> list[str]:
    """Render the shifted test cells of each cycle's policy, with the change from the base's."""
    lines = ["| after cycle | policy | level | family | variant | pass | correct among well-formed | vs p0 |",
             "|---|---|---|---|---|---|---|---|"]
    for cycle, policy in sorted(policies.items()):
        for (pv, level, family, variant), cell in sorted(shifted.items()):
            if pv != policy:
                continue
            base = shifted.get(("p0", level, family, variant))
            lines.append(f"| {cycle} | {policy} | {level} | {family} | {variant} | {rate_text(cell.passed, cell.n)} | "
                         f"{formed_text(cell)} | {versus(base.cell, cell.cell) if base and policy != 'p0' else '–'} |")
    return lines


def cycle_table(store: ExperienceStore, thread: str, curriculum: Sequence[str], share: float | None) -> list[str]:
    """Render what each cycle trained on: its level, the samples collected and cloned, the deploy decision."""
    lines = ["| cycle | level | collected | cloned by rs-sft/sft | candidate deployed |", "|---|---|---|---|---|"]
    for cycle, level in enumerate(curriculum, start=1):
        played = list(store.rows("select passed from lifelong_episodes where run_id = ? and cycle = ? and "
                                 "phase = 'collect'", [thread, cycle])) if store.has_table("lifelong_episodes") else []
        samples = load_samples(store, thread, [cycle])
        cloned = f"{len(kept_for_sft(samples, 'passed', True, share))} of {len(samples)} samples" if samples else "–"
        row = next(iter(store.rows("select deployed from lifelong_deploys where run_id = ? and cycle = ?",
                                   [thread, cycle])), None) if store.has_table("lifelong_deploys") else None
        lines.append(f"| {cycle} | {level} | {len(played)} episodes ({sum(r['passed'] for r in played)} passed) | "
                     f"{cloned} | {'–' if row is None else ('yes' if row['deployed'] else 'no')} |")
    return lines


def report(args: argparse.Namespace) -> str:
    """Read the run's store and render every table."""
    store = ExperienceStore(args.out / "retention.db")
    thread = args.prefix
    levels = args.levels.split(",")
    trained = args.families.split(",")
    untrained = [f for f in args.transfer.split(",") if f and f not in trained]
    curriculum = curriculum_for(levels, args.cycles)
    scored = scored_cells(store, thread, "test")
    columns = [column(lv, f) for lv in levels for f in trained + untrained]
    share = args.balance_share if args.balance == "on" else None
    lines = [f"Curriculum {' → '.join(curriculum)}; trained families {', '.join(trained)}; never trained "
             f"{', '.join(untrained) or '–'}. Test cells: {args.test_per_cell} tasks per decision and two-turn cell, "
             f"{min(args.test_per_cell, PER_CELL)} per episode cell (the frozen split holds {PER_CELL}).", "",
             "What each cycle trained on:", "",
             *cycle_table(store, thread, curriculum, share)]
    for curve in CURVES:
        policies = {c: p for c, (p, _) in ls.matrix_policies(store, thread, curve).items()}
        if not policies:
            lines += ["", f"({curve} curve: no evaluations recorded)"]
            continue
        r = r_matrix(scored, policies, levels, trained + untrained)
        lines += ["", f"R[cycle, level/family], {curve} curve: test pass rate (Wilson 95%)", "",
                  *matrix_table(r, policies, columns, curriculum), "",
                  f"Retention, {curve} curve (points, MOVER 95% interval):", ""]
        found = retention(r, curriculum, levels, trained, untrained)
        lines += [f"* {name}: {_estimate(e)}" for name, e in found.items()]
        lines += ["", f"Per level over the trained families, {curve} curve:", "",
                  *level_table(scored, policies, levels, trained)]
    policies = {c: p for c, (p, _) in ls.matrix_policies(store, thread, "candidate").items()}
    shifted = scored_cells(store, thread, "shift")
    if shifted:
        lines += ["", "Shifted test cells (names from a pool no split uses; 8-10 friends a list), candidate curve:",
                  "", *shift_table(shifted, policies)]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> float:
    """Run (or resume) the `swm learn` thread; return its wall seconds."""
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with (args.out / "run.log").open("a") as log:
        done = subprocess.run(learn_command(args), stdout=subprocess.PIPE, stderr=log, text=True)
    (args.out / "run.json").write_text(done.stdout)
    if done.returncode != 0:
        tail = (args.out / "run.log").read_text(errors="replace").strip().splitlines()[-1:]
        raise SystemExit(f"swm learn failed ({done.returncode}): {tail}")
    return time.perf_counter() - start


def measure(args: argparse.Namespace) -> None:
    """Run (or resume) the curriculum, then print and write (``<out>/table.md``) its tables."""
    os.environ.setdefault("SWM_EMBEDDED_THREADS", "1")
    os.environ.setdefault("SWM_TRAIN_THREADS", "1")
    os.environ.setdefault("SWM_EMBEDDED_DRAW", "alone")
    wall = run(args)
    serving = learn_summary(args.out / "run.json").get("serving") or {}
    engine = (f"{serving.get('engine')}, {serving.get('slots')} slot(s), draw mode {serving.get('draw')}"
              if serving else "engine not recorded")
    text = report(args) + f"\n{engine}; wall {wall / 60:.1f} min\n"
    (args.out / "table.md").write_text(text)
    print(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__.splitlines()[0])
    parser.add_argument("--update", default="rs-sft")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--levels", default="decision,two-turn,easy")
    parser.add_argument("--families", default="mutual_friend,negotiation", help="the trained families")
    parser.add_argument("--transfer", default="scheduling", help="evaluated, never trained")
    add_task_switches(parser)
    add_training_options(parser)
    parser.add_argument("--max-turns", type=int, default=8, help="turn limit of an episode")
    parser.add_argument("--concurrency", type=int, default=2, help="episodes in flight")
    parser.add_argument("--prefix", default="three-levels")
    parser.add_argument("--out", type=Path, default=Path("bench-three-levels"))
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args(argv)
    if args.cycles < 1:
        parser.error("--cycles must be at least 1")
    with results_page("retention", "Retention: three levels, two families trained, a third never",
                      "bench.retention", argv, enabled=not args.no_page, markdown=True):
        measure(args)


if __name__ == "__main__":
    main()
