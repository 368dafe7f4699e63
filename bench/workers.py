"""Throughput of `swm bench tom --workers N` against one worker, on the loopback model with fixed latency.

Each configuration runs the real CLI as a subprocess on a fresh SQLite file (one machine: the
shared-database case differs only in where rows land) against one fake server process whose
every request takes ``latency`` seconds; the ToM simulator's questions in CoT mode cost one call
each (``--stories`` simulated stories of about six questions each). Reported side by side: wall time
without Ray's start-up, questions per second and its ratio to one worker, Ray's start-up, and the
engine's per-question overhead (one worker's wall per question minus the in-process runner's)::

    python -m bench.workers --stories 16 --latency 1.0 --workers 1,2,4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.results import results_page
from swm.testing import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]


def run_once(spec: str, stories: int, extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "swm", "bench", "tom", "--benchmark", "sim",
               "--n", str(stories), "--modes", "cot", "--model", spec, "--db", str(Path(tmp) / "w.db"),
               "--out", str(Path(tmp) / "out"), "--no-progress", "--json", *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(extra)}: exit {done.returncode}: {done.stderr[-2000:]}")
        header = json.loads(done.stdout)["header"]
    wall = float(header["wall time (this invocation)"].split()[0])
    startup = float(header.get("Ray start (included in wall time)", "0 s").split()[0])
    return {"wall": wall, "startup": startup, "work": wall - startup, "questions": int(header["questions"])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.workers", description=__doc__.splitlines()[0])
    parser.add_argument("--stories", type=int, default=16)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args(argv)
    with results_page("workers", "Many workers", "bench.workers", argv, enabled=not args.no_page, markdown=True):
        measure_workers(args)


def measure_workers(args: argparse.Namespace) -> None:
    """Run the ToM bench in process and on 1, 2, 4 Ray workers against one fake server; print the table."""
    counts = [int(w) for w in args.workers.split(",")]
    with FakeOpenAIServer(latency=args.latency, process=True) as server:
        spec = f"fake@{server.base_url}"
        inproc = run_once(spec, args.stories, ["--concurrency", "1"])
        results = {n: run_once(spec, args.stories, ["--workers", str(n)]) for n in counts}
    questions = inproc["questions"]
    base = results[counts[0]]["work"]
    print(f"{questions} CoT questions ({args.stories} stories), 1 call each, {args.latency:.2f} s per call")
    print("| runner | wall (s, without start-up) | questions/s | throughput vs 1 worker | Ray start-up (s) |")
    print("|---|---|---|---|---|")
    print(f"| in-process, 1 thread | {inproc['work']:.1f} | {questions / inproc['work']:.2f} | — | — |")
    for n, r in results.items():
        print(f"| Ray, {n} worker(s) | {r['work']:.1f} | {questions / r['work']:.2f} | {base / r['work']:.2f} | "
              f"{r['startup']:.1f} |")
    if 1 in results:
        overhead = (results[1]["work"] - inproc["work"]) / questions
        print(f"engine overhead per question (1 worker vs in-process): {overhead * 1000:.0f} ms")


if __name__ == "__main__":
    main()
