"""The learning benchmark: does `swm learn` raise the embedded SmolLM2's held-out success rate?

Each arm is one `swm learn` run on the embedded model (llama.cpp over loopback, SmolLM2-135M
Q4_1, LoRA adapters trained with TRL and served as GGUF LoRAs), in its own SQLite file, with the
same tasks, sampling seeds and settings: collect ``--tasks`` × ``--samples`` moves per cycle at
``--temperature``, keep what the arm keeps, train ``--train-steps`` from the incumbent (replay on),
evaluate the candidate on ``--test-per-cell`` test tasks and ``--dev-per-cell`` dev tasks (the
deploy gate chooses on dev; the table reports test). Arms:

* an update method (``rs-sft``, ``sft``, ``dpo``, ``kto``, ``memory``; ``ppo`` with the hierarchical
  estimator, ``ppo-group`` with the group one): ``--cycles`` cycles;
* ``control``: rs-sft on as many well-formatted *wrong* samples as there were right ones
  (``--keep wrong``): what format alone buys, ``--control-cycles`` cycles;
* ``ungated``: rs-sft on every collected sample, the checker's verdict ignored (``--gating off``):
  the no-gating ablation, ``--cycles`` cycles.

Every arm runs with the same task switches (``--names``: training and test names from disjoint pools
by default; ``--eval-shifts``: the shifted test cells, names from a pool no split uses and 8-10
friends a list, ``--shift-per-cell`` tasks each) and the same balance of cloned samples
(``--balance``, ``--balance-share``).

The table: per arm and cycle, held-out correct with 95% Wilson intervals, correct among well-formed
answers, the change from cycle 0 with the two-proportion test, the same against the control arm's
same cycle, the collected and cloned samples, training tokens/s, sampling tokens/s and seconds per
cycle; then the shifted cells per arm and policy. The gating question::

    python -m bench.learning --arms rs-sft,control,ungated --cycles 2 --control-cycles 2 --levels decision \
        --families mutual_friend --tasks 200 --samples 2 --test-per-cell 200 --dev-per-cell 100 --out bench-gating

Every arm draws with ``SWM_EMBEDDED_DRAW=alone`` unless told otherwise (`swm.serving.draws`): the same
seed gives the same move in every arm, whatever else its server has evaluated or is decoding.

Resumable: rerunning the same command continues each arm's thread. Not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.learning_cells import formed_text, learn_summary, merge, rate_text, scored_cells, versus
from bench.results import results_page
from swm.checkpoints import ExperienceStore
from swm.lifelong import store as ls
from swm.lifelong.metrics import Cell
from swm.lifelong.samples import kept_for_sft, load_samples

ARMS = {"control": ("rs-sft", "wrong", "on"), "ungated": ("rs-sft", "passed", "off")}  # arm: update, keep, gating


def task_switches(args: argparse.Namespace) -> list[str]:
    """Return the `swm learn` options every arm shares: name policy, shifted cells, balance, model."""
    return ["--names", args.names, *(["--eval-shifts", args.eval_shifts] if args.eval_shifts else []),
            "--shift-per-cell", str(args.shift_per_cell), "--balance", args.balance,
            "--balance-share", str(args.balance_share), *(["--model", args.model] if args.model else [])]


def arm_command(arm: str, args: argparse.Namespace) -> list[str]:
    """Return the `swm learn` command line of one arm."""
    method, keep, gating = ARMS.get(arm, (arm, "passed", "on"))
    cycles = args.control_cycles if arm == "control" else args.cycles
    estimator: list[str] = []
    if arm.startswith("ppo"):  # ppo: the hierarchical estimator; ppo-group: the critic-free one
        method, estimator = "ppo", ["--estimator", "group" if arm == "ppo-group" else "hierarchical"]
    return [sys.executable, "-m", "swm", "learn", "--update", method, *estimator, "--keep", keep,
            "--gating", gating, *task_switches(args), "--cycles", str(cycles), "--levels", args.levels,
            "--families", args.families,
            *(["--eval-families", args.eval_families] if args.eval_families else []),
            "--episodes-per-level", str(args.tasks * args.samples), "--samples-per-task", str(args.samples),
            "--heldout-per-cell", str(args.test_per_cell), "--dev-per-cell", str(args.dev_per_cell),
            "--temperature", str(args.temperature), "--concurrency", str(args.concurrency),
            "--train-steps", str(args.train_steps), "--train-lr", str(args.train_lr),
            "--train-batch-size", str(args.train_batch_size), "--train-rank", str(args.train_rank),
            "--db", str(args.out / f"{arm}.db"), "--thread-id", f"{args.prefix}-{arm}",
            "--out", str(args.out / arm), "--json"]


def run_method(method: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run (or resume) one episode-level `swm learn` thread in ``args.out / "learn.db"``; return its summary.

    The entry `bench.selfplay --dpo` compares with: ``args`` names cycles, levels, families,
    episodes, samples, max_turns, test/dev per cell, temperature, train steps and rate, min_margin.
    """
    thread = f"{args.prefix}-{method}"
    cmd = [sys.executable, "-m", "swm", "learn", "--update", method,
           "--cycles", str(args.cycles), "--levels", args.levels, "--families", args.families,
           "--episodes-per-level", str(args.episodes),
           "--samples-per-task", str(args.samples), "--max-turns", str(args.max_turns),
           "--heldout-per-cell", str(args.test_per_cell), "--dev-per-cell", str(args.dev_per_cell),
           "--temperature", str(args.temperature), "--concurrency", "1", "--train-steps", str(args.train_steps),
           "--train-lr", str(args.train_lr), "--train-batch-size", "2", "--min-margin", str(args.min_margin),
           "--db", str(args.out / "learn.db"), "--thread-id", thread, "--out", str(args.out / method), "--json"]
    start = time.perf_counter()
    log = args.out / f"{method}.log"
    with log.open("a") as err:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        raise SystemExit(f"{method}: swm learn failed ({done.returncode}): {tail}")
    return {"summary": json.loads(done.stdout), "wall": time.perf_counter() - start, "thread": thread}


def run_arms(arms: list[str], args: argparse.Namespace) -> dict[str, float]:
    """Run (or resume) every arm, side by side with ``--parallel``; return each arm's wall seconds."""
    started: dict[str, tuple[subprocess.Popen[str], float, Any]] = {}
    walls: dict[str, float] = {}

    def finish(arm: str) -> None:
        process, start, log = started.pop(arm)
        code = process.wait()
        log.close()
        walls[arm] = time.perf_counter() - start
        (args.out / f"{arm}.json").write_text(process.stdout.read() if process.stdout else "")
        if code != 0:
            tail = (args.out / f"{arm}.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise SystemExit(f"{arm}: swm learn failed ({code}): {tail}")

    for arm in arms:
        log = (args.out / f"{arm}.log").open("a")
        process = subprocess.Popen(arm_command(arm, args), stdout=subprocess.PIPE, stderr=log, text=True)
        started[arm] = (process, time.perf_counter(), log)
        if not args.parallel:
            finish(arm)
    for arm in list(started):
        finish(arm)
    return walls


def _rate(cell: Cell | None) -> str:
    return "–" if cell is None else rate_text(cell.successes, cell.n)


def detectable(cell: Cell, power_z: float = 0.8416, alpha_z: float = 1.959964) -> float:
    """Return the smallest change from ``cell``'s rate that a cell of the same n detects (two-sided 5%, 80% power)."""
    p = min(max(cell.rate, 1 / (2 * cell.n)), 1 - 1 / (2 * cell.n)) if cell.n else 0.5
    return (alpha_z + power_z) * (2 * p * (1 - p) / max(cell.n, 1)) ** 0.5


def _usage_rate(rows: list[dict[str, Any]]) -> tuple[int, float]:
    """Return (tokens, seconds) of the model calls stored with these episodes."""
    tokens, seconds = 0, 0.0
    for row in rows:
        for stats in json.loads(row["usage"] or "{}").values():
            tokens += int(stats.get("prompt_tokens", 0)) + int(stats.get("completion_tokens", 0))
            seconds += float(stats.get("seconds", 0.0))
    return tokens, seconds


def arm_rows(arm: str, args: argparse.Namespace, level: str, control: dict[int, Cell]) -> tuple[list[str],
                                                                                                dict[int, Cell]]:
    """Render one arm's table rows; return them and its test cells per cycle."""
    store = ExperienceStore(args.out / f"{arm}.db")
    thread = f"{args.prefix}-{arm}"
    r = ls.matrix(store, thread, "pass", "candidate")
    trained_by = ls.matrix_policies(store, thread, "candidate")
    scored = scored_cells(store, thread, "test")
    _, keep, gating = ARMS.get(arm, (arm, "passed", "on"))
    share = args.balance_share if args.balance == "on" else None
    cells: dict[int, Cell] = {}
    rows: list[str] = []
    cycles = args.control_cycles if arm == "control" else args.cycles
    ends: dict[int, float] = {}
    for cycle in range(cycles + 1):
        found = list(store.rows("select created from lifelong_episodes where run_id = ? and cycle = ?",
                                [thread, cycle]))
        if found:
            ends[cycle] = max(row["created"] for row in found)
            if cycle == 0:
                ends[-1] = min(row["created"] for row in found)
    for cycle in range(cycles + 1):
        cell = r.get((cycle, level))
        if cell is None:
            continue
        cells[cycle] = cell
        policy = ls.get_policy(store, thread, f"p{cycle}")
        train = policy.train if policy is not None else None
        samples = load_samples(store, thread, [cycle])
        cloned = kept_for_sft(samples, keep, gating == "on", share) if samples else []
        kept = f"{len(cloned)} of {len(samples)} ({sum(s.passed for s in samples)} passed)" if samples else "–"
        policy_name = trained_by.get(cycle, (f"p{cycle}", None))[0]
        formed = merge(v for (pv, lv, _, _), v in scored.items() if pv == policy_name and lv == level)
        played = list(store.rows("select usage from lifelong_episodes where run_id = ? and cycle = ?",
                                 [thread, cycle]))
        tokens, seconds = _usage_rate(played)
        sampling = f"{tokens / seconds:.0f}" if seconds else "–"
        training = (f"{train.examples} rows, {train.steps} steps, {train.seconds:.0f} s, {train.tokens_per_s:.0f} tok/s"
                    if train else "–")
        wall = f"{ends[cycle] - ends[cycle - 1]:.0f}" if cycle in ends and cycle - 1 in ends else "–"
        deployed = next(iter(store.rows("select deployed from lifelong_deploys where run_id = ? and cycle = ?",
                                         [thread, cycle])), None)
        rows.append(f"| {arm} | {cycle} | {_rate(cell)} | {formed_text(formed)} | "
                    f"{100 * detectable(cells[0]):.1f} pts | "
                    f"{versus(cells.get(0), cell) if cycle else '–'} | "
                    f"{versus(control.get(cycle), cell) if cycle and arm != 'control' else '–'} | {kept} | "
                    f"{training} | {sampling} | {wall} | "
                    f"{'–' if deployed is None else ('yes' if deployed['deployed'] else 'no')} |")
    return rows, cells


def family_rows(arm: str, args: argparse.Namespace) -> list[str]:
    """Render each policy's test cells per level and family (transfer to evaluated-only families, forgetting)."""
    store = ExperienceStore(args.out / f"{arm}.db")
    thread = f"{args.prefix}-{arm}"
    found = list(store.rows("select policy_version, level, family, sum(passed) as s, count(*) as n from "
                            "lifelong_episodes where run_id = ? and phase = 'test' group by 1, 2, 3 order by 2, 3, 1",
                            [thread]))
    base = {(r["level"], r["family"]): Cell(r["s"], r["n"]) for r in found if r["policy_version"] == "p0"}
    out = []
    for r in found:
        cell = Cell(r["s"], r["n"])
        first = base.get((r["level"], r["family"]))
        change = versus(first, cell) if r["policy_version"] != "p0" else "–"
        smallest = f"{100 * detectable(first):.1f} pts" if first is not None and first.n else "–"
        out.append(f"| {arm} | {r['level']} | {r['family']} | {r['policy_version']} | {_rate(cell)} | {change} | "
                   f"{smallest} |")
    return out


def shift_rows(arm: str, args: argparse.Namespace) -> list[str]:
    """Render each policy's shifted test cells (phase ``shift``) beside its standard test cell of the same level."""
    store = ExperienceStore(args.out / f"{arm}.db")
    thread = f"{args.prefix}-{arm}"
    shifted = scored_cells(store, thread, "shift")
    standard = scored_cells(store, thread, "test")
    out = []
    for (policy, level, family, variant), cell in sorted(shifted.items(), key=lambda kv: (kv[0][1:], kv[0][0])):
        base = shifted.get(("p0", level, family, variant))
        usual = merge(v for (pv, lv, fam, _), v in standard.items() if (pv, lv, fam) == (policy, level, family))
        out.append(f"| {arm} | {level} | {family} | {variant} | {policy} | {_rate(cell.cell)} | {formed_text(cell)} | "
                   f"{versus(base.cell, cell.cell) if base is not None and policy != 'p0' else '–'} | "
                   f"{_rate(usual.cell) if usual.n else '–'} |")
    return out


def serving_line(arm: str, args: argparse.Namespace) -> str:
    """Say which embedded engine an arm sampled on and how it drew seeded moves (its `swm learn --json` summary)."""
    serving = learn_summary(args.out / f"{arm}.json").get("serving") or {}
    if not serving:
        return f"{arm}: engine not recorded"
    return (f"{arm}: {serving.get('engine')}, {serving.get('slots')} slot(s), {serving.get('concurrency')} in flight, "
            f"draw mode {serving.get('draw') or 'cached (before draw modes)'}")


def add_task_switches(parser: argparse.ArgumentParser) -> None:
    """Add the task and sample switches every learning benchmark forwards to `swm learn` (`task_switches`)."""
    parser.add_argument("--names", choices=("disjoint", "shared"), default="disjoint",
                        help="training and test names from disjoint pools, or one shared pool (the splits before "
                             "2026-11-26)")
    parser.add_argument("--eval-shifts", default="unseen-names,long-lists",
                        help="shifted test cells ('' for none): unseen-names, long-lists")
    parser.add_argument("--shift-per-cell", type=int, default=100, help="test tasks per shifted cell")
    parser.add_argument("--balance", choices=("on", "off"), default="on",
                        help="cap one answer's (and first name's) share of a cycle's cloned samples")
    parser.add_argument("--balance-share", type=float, default=0.15)
    parser.add_argument("--model", default=None, help="the model spec every arm plays [default: swm learn's]")


def add_training_options(parser: argparse.ArgumentParser) -> None:
    """Add the options of a cycle's collection and training that the learning benchmarks share (`bench.retention`)."""
    parser.add_argument("--tasks", type=int, default=200, help="training tasks per cycle")
    parser.add_argument("--samples", type=int, default=2, help="samples per training task")
    parser.add_argument("--test-per-cell", type=int, default=200)
    parser.add_argument("--dev-per-cell", type=int, default=100)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--train-lr", type=float, default=2e-4)
    parser.add_argument("--train-batch-size", type=int, default=4)
    parser.add_argument("--train-rank", type=int, default=8)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.learning", description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default="rs-sft,control")
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--control-cycles", type=int, default=1)
    parser.add_argument("--levels", default="decision")
    parser.add_argument("--families", default="mutual_friend")
    parser.add_argument("--eval-families", default=None, help="also evaluate these families (transfer)")
    add_task_switches(parser)
    add_training_options(parser)
    parser.add_argument("--parallel", action="store_true", help="run the arms side by side")
    parser.add_argument("--concurrency", type=int, default=2, help="episodes in flight per arm")
    parser.add_argument("--prefix", default="learning")
    parser.add_argument("--out", type=Path, default=Path("bench-learning"))
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args(argv)
    with results_page("learning", "Learning: does `swm learn` raise the embedded model's held-out success?",
                      "bench.learning", argv, enabled=not args.no_page, markdown=True):
        measure_arms(args)


def measure_arms(args: argparse.Namespace) -> None:
    """Run (or resume) every arm, then print the table of held-out success per arm and cycle."""
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SWM_EMBEDDED_THREADS", "1")  # the machine is shared: one thread each for
    os.environ.setdefault("SWM_TRAIN_THREADS", "1")  # sampling and training, arms side by side
    # every arm draws the same moves from the same seeds: no prompt cache and one draw at a time, since on
    # llama-server the other sequences of a batch change a draw's logits (bench.draws measures it)
    os.environ.setdefault("SWM_EMBEDDED_DRAW", "alone")
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    walls = run_arms(arms, args)
    level = args.levels.split(",")[0]
    header = ("| arm | cycle | held-out correct (test) | correct among well-formed | smallest detectable change | "
              "vs cycle 0 | vs control | collected: cloned of sampled (passed) | "
              "training | sampling tok/s | cycle s | deployed |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    control: dict[int, Cell] = {}
    ordered = (["control"] if "control" in arms else []) + [a for a in arms if a != "control"]
    for arm in ordered:
        rows, cells = arm_rows(arm, args, level, control)
        if arm == "control":
            control = cells
        lines += rows
    if args.eval_families:
        lines += ["", "| arm | level | family | policy | test correct | vs p0 | smallest detectable change |",
                  "|---|---|---|---|---|---|---|"]
        for arm in ordered:
            lines += family_rows(arm, args)
    shifted = [row for arm in ordered for row in shift_rows(arm, args)]
    if shifted:
        lines += ["", "Shifted test cells (names from a pool no split uses; 8-10 friends a list), beside the same "
                  "policy's standard test cell:", "",
                  "| arm | level | family | variant | policy | test correct | correct among well-formed | vs p0 | "
                  "standard cell |", "|---|---|---|---|---|---|---|---|---|", *shifted]
    lines += ["", *(serving_line(arm, args) for arm in ordered)]
    text = "\n".join(lines) + "\n\nwall: " + ", ".join(f"{a} {w / 60:.1f} min" for a, w in walls.items()) + "\n"
    (args.out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
