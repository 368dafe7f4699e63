"""``python -m bench.draws``: does the same prompt, seed and adapter give the same move, and what does it cost?

For each embedded engine (llama-server, llama-cpp-python's server) and each draw mode of
`swm.serving.draws` (``cached``: the engine's prompt cache; ``fresh``: no prompt cache for a seeded
draw; ``alone``: fresh, one seeded draw at a time, each sample its own request), the decisions of a
`swm learn` cycle are played as the loop plays them: ``--tasks`` mutual-friend decisions, two samples
each (seeds s and s + 1, asked for together), ``--in-flight`` decisions at once, on a server started
for the mode. Each mode plays them twice, the second time in the reverse order (other cache contents,
other batch partners). Every draw is compared with the reference: the same draw made alone on an
idle server with no prompt cache, one request at a time. Reported per engine and mode: the share of
draws equal to the reference in each pass, and generated tokens/s of the pass (side by side, one
run). ``--crowded N``: each mode's draws (temperature 1) made alone, then sent again N times beside
draws of the same prompts at other seeds, each its own request: how many repeats equal the first
draw. Not a timed test; see bench/README.md, "Same seed, same draw".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from swm.lifelong.decision_play import _complete, sampling_seed
from swm.serving import embedded
from swm.serving.draws import MODES
from swm.tasks.decisions import decision_prompt, decision_task

ENGINES = ("llama-server", "python")
TEMPERATURE = 0.7  # the learning benchmark's


def _tasks(n: int) -> list[Any]:

    return [decision_task("mutual_friend", i) for i in range(n)]


def _restart(engine: str, mode: str) -> None:
    """Stop this process's embedded server and start one for ``engine`` whose seeded draws use ``mode``."""

    embedded.stop_server()
    os.environ["SWM_EMBEDDED_ENGINE"] = engine
    os.environ["SWM_EMBEDDED_DRAW"] = mode
    embedded.ensure_server()


def _play(tasks: list[Any], in_flight: int, siblings: int) -> tuple[dict[tuple[str, int], str], float, int]:
    """Play each task's two samples (``siblings`` asked for together), ``in_flight`` at once; return the moves
    by (task, sample), the wall seconds and the completion tokens generated."""

    jobs = [(task, sample) for task in tasks for sample in (0, 1)]

    def one(job: tuple[Any, int]) -> tuple[tuple[str, int], str, int]:
        task, sample = job
        text, stats = _complete("embedded", decision_prompt(task), TEMPERATURE, sampling_seed(task.task_id, sample),
                                600.0, siblings=siblings)
        return (task.task_id, sample), text, int(stats["completion_tokens"])

    start = time.perf_counter()
    with ThreadPoolExecutor(max(1, in_flight * siblings)) as pool:
        done = list(pool.map(one, jobs))
    wall = time.perf_counter() - start
    return {key: text for key, text, _ in done}, wall, sum(n for _, _, n in done)


def measure(engine: str, tasks: list[Any], in_flight: int, modes: tuple[str, ...],
            echo: Any = print) -> list[dict[str, Any]]:
    """Measure each mode on ``engine``: agreement with the reference draws, in two passes, and tokens/s."""
    _restart(engine, "alone")
    reference, ref_wall, ref_tokens = _play(tasks, 1, 1)
    rows = [{"engine": engine, "mode": "reference", "pass": 0, "draws": len(reference), "same": len(reference),
             "seconds": round(ref_wall, 1), "tokens_per_s": round(ref_tokens / ref_wall, 1)}]
    echo(f"{engine}: reference {len(reference)} draws, {ref_tokens / ref_wall:.1f} tok/s")
    for mode in modes:
        _restart(engine, mode)
        for pass_, order in ((1, tasks), (2, tasks[::-1])):
            moves, wall, tokens = _play(order, in_flight, 2)
            same = sum(moves[k] == reference[k] for k in reference)
            rows.append({"engine": engine, "mode": mode, "pass": pass_, "draws": len(moves), "same": same,
                         "seconds": round(wall, 1), "tokens_per_s": round(tokens / wall, 1),
                         "differ": [f"{k[0]}#{k[1]}: {reference[k]!r} / {moves[k]!r}"
                                    for k in reference if moves[k] != reference[k]][:3]})
            echo(f"{engine} {mode} pass {pass_}: {same}/{len(moves)} equal the reference, {tokens / wall:.1f} tok/s")

    embedded.stop_server()
    return rows


def crowded(engine: str, tasks: list[Any], rounds: int, modes: tuple[str, ...],
            echo: Any = print) -> list[dict[str, Any]]:
    """Each draw made alone, then sent again ``rounds`` times beside draws of the same prompts at other seeds
    (twice as many requests as tasks at once, each its own request): how many repeats differ, per mode."""

    shown = [decision_prompt(t) for t in tasks]
    seeds = [sampling_seed(t.task_id, 0) for t in tasks]

    def draw(i: int, seed: int) -> str:
        return _complete("embedded", shown[i], 1.0, seed, 600.0)[0]

    rows = []
    for mode in modes:
        _restart(engine, mode)
        first = [draw(i, seeds[i]) for i in range(len(tasks))]
        same, start = 0, time.perf_counter()
        for r in range(rounds):
            with ThreadPoolExecutor(2 * len(tasks)) as pool:
                others = [pool.submit(draw, i, seeds[i] + 200 + r) for i in range(len(tasks))]
                again = list(pool.map(lambda i: draw(i, seeds[i]), range(len(tasks))))
                for other in others:
                    other.result()
            same += sum(a == b for a, b in zip(first, again, strict=True))
        rows.append({"engine": engine, "mode": mode, "pass": "crowded", "draws": rounds * len(tasks), "same": same,
                     "seconds": round(time.perf_counter() - start, 1), "tokens_per_s": 0.0})
        echo(f"{engine} {mode} crowded: {same}/{rounds * len(tasks)} repeats equal the first draw")
    embedded.stop_server()
    return rows


def table(rows: list[dict[str, Any]]) -> list[str]:
    """A markdown table: per engine, mode and pass, draws equal to the reference and generated tokens/s."""
    lines = ["| engine | draw mode | pass | equal to the reference | seconds | generated tok/s | vs fresh |",
             "|---|---|---|---|---|---|---|"]
    fresh = {(r["engine"], r["pass"]): r["tokens_per_s"] for r in rows if r["mode"] == "fresh"}
    for r in rows:
        base = fresh.get((r["engine"], r["pass"]))
        ratio = f"{r['tokens_per_s'] / base:.2f}x" if base and r["tokens_per_s"] and r["mode"] != "reference" else "-"
        lines.append(f"| {r['engine']} | {r['mode']} | {r['pass'] or '-'} | {r['same']}/{r['draws']} | "
                     f"{r['seconds']} | {r['tokens_per_s'] or '-'} | {ratio} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.draws", description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=",".join(ENGINES), help="embedded engines to measure")
    parser.add_argument("--modes", default=",".join(MODES), help="draw modes to measure")
    parser.add_argument("--tasks", type=int, default=12, help="mutual-friend decisions (two samples each)")
    parser.add_argument("--in-flight", type=int, default=4, help="decisions played at once (the server's slots)")
    parser.add_argument("--crowded", type=int, default=0, help="rounds of the crowded check (temperature 1, "
                        "each draw again beside draws of the same prompts at other seeds); 0: none")
    parser.add_argument("--crowded-only", action="store_true", help="run only the crowded check")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    os.environ.setdefault("SWM_EMBEDDED_SLOTS", str(args.in_flight))
    os.environ.setdefault("SWM_EMBEDDED_THREADS", "1")  # as the learning benchmark: one decode thread
    tasks = _tasks(args.tasks)
    modes = tuple(m for m in args.modes.split(",") if m)
    rows: list[dict[str, Any]] = []
    for engine in (e for e in args.engines.split(",") if e):
        echo = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
        if not args.crowded_only:
            rows += measure(engine, tasks, args.in_flight, modes, echo=echo)
        if args.crowded:
            rows += crowded(engine, tasks[:args.in_flight], args.crowded, modes, echo=echo)
    print("\n".join(table(rows)))
    for r in rows:
        for line in r.get("differ") or []:
            print(f"  {r['engine']} {r['mode']} pass {r['pass']}: {line}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
