"""The learning benchmark: does `swm learn` with trained weights improve the embedded SmolLM2?

Runs the real loop on the embedded model (llama.cpp over loopback, SmolLM2-135M Q4_1) several
cycles — collect → convert → gate → train a LoRA → serve it (GGUF LoRA on llama.cpp) → evaluate —
once per update method (a trained one, and ``memory``) on the same tasks, seeds and settings, then
prints the table of bench/README.md: per cycle the candidate's pass and completion rates on the
trained-for level and on every level (test split, 95% Wilson intervals), forgetting, training
seconds and tokens/s, adapter size::

    python -m bench.learning --methods sft,memory --cycles 2 --families mutual_friend --out bench-learning

Everything is resumable: the runs are `swm learn` threads in one SQLite file (``--out/learn.db``),
so rerunning the same command continues them. Not a timed test; its numbers are what they are.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from checkpoints import ExperienceStore
from checkpoints.store import StoreRecords
from swm.lifelong import store as ls
from swm.lifelong.metrics import Cell, curriculum_for, forgetting
from swm.stats import wilson_interval


def _rate(cell: Cell | None) -> str:
    if cell is None or cell.n == 0:
        return "–"
    low, high = wilson_interval(cell.successes, cell.n)
    return f"{cell.successes}/{cell.n} = {cell.successes / cell.n:.2f} [{low:.2f}, {high:.2f}]"


def run_method(method: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run (or resume) one `swm learn` thread; return its --json summary and wall seconds."""
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
    with log.open("a") as err:  # the progress bars and the trainer's log, as they come
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        raise SystemExit(f"{method}: swm learn failed ({done.returncode}): {tail}")
    return {"summary": json.loads(done.stdout), "wall": time.perf_counter() - start, "thread": thread}


def table(store: StoreRecords, method: str, thread: str, levels: list[str], cycles: int) -> list[str]:
    """Render one method's rows: per cycle, the candidate's rates, forgetting and training cost."""
    curriculum = curriculum_for(levels, cycles)
    rows = []
    for metric in ("pass", "completion"):
        r = ls.matrix(store, thread, metric, "candidate")
        for cycle in range(cycles + 1):
            policy = ls.get_policy(store, thread, f"p{cycle}")
            train = policy.train if policy is not None else None
            trained_for = curriculum[cycle - 1] if cycle else "–"
            f = forgetting(r, levels, curriculum, cycle) if cycle >= 2 else None
            cells = " | ".join(_rate(r.get((cycle, level))) for level in levels)
            cost = (f"{train.seconds:.0f} s, {train.tokens_per_s:.0f} tok/s, {train.adapter_bytes / 1e6:.1f} MB"
                    if train else "–")
            deployed = next((d for d in store.rows("select deployed from lifelong_deploys where run_id = ? and "
                                                    "cycle = ?", [thread, cycle])), None)
            rows.append(f"| {method} | {metric} | {cycle} | {trained_for} | {cells} | "
                        f"{'–' if f is None else f'{f.value:+.2f} [{f.low:+.2f}, {f.high:+.2f}]'} | "
                        f"{policy.pairs_used if policy else 0} | {cost} | "
                        f"{'–' if deployed is None else ('yes' if deployed['deployed'] else 'no')} |")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.learning", description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="sft,memory")
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--levels", default="easy")
    parser.add_argument("--families", default="mutual_friend")
    parser.add_argument("--episodes", type=int, default=8, help="collected episodes per cycle")
    parser.add_argument("--samples", type=int, default=4, help="episodes per training task")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--test-per-cell", type=int, default=4)
    parser.add_argument("--dev-per-cell", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--train-steps", type=int, default=12)
    parser.add_argument("--train-lr", type=float, default=2e-4)
    parser.add_argument("--min-margin", type=float, default=0.1)
    parser.add_argument("--prefix", default="bench")
    parser.add_argument("--out", type=Path, default=Path("bench-learning"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    levels = [x.strip() for x in args.levels.split(",") if x.strip()]
    header = ("| update | metric | cycle | trained on | " + " | ".join(levels) + " | F_k | rows from | "
              "training | deployed |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    walls = {}
    for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
        out = run_method(method, args)
        walls[method] = out["wall"]
        lines += table(ExperienceStore(args.out / "learn.db"), method, out["thread"], levels, args.cycles)
    text = "\n".join(lines) + "\n\n" + ", ".join(f"{m}: {w / 60:.1f} min wall" for m, w in walls.items()) + "\n"
    (args.out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
