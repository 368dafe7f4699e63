"""CPU time of ``swm --help`` and ``import swm``: what a user pays before any command runs.

Each case runs ``--runs`` times in a fresh interpreter (``python -m swm --help``, ``python -c "import
swm"``, ``python -m swm <command> --help`` for ask, play, learn, selfplay, bench tom and ui); the CPU
time is the child's user + system time (`resource.getrusage` of the children), so other work on the
machine does not count in it, and the
median is reported with the range. A last run lists which heavy packages the case imported
(openai, langchain, langgraph, sqlite_utils, torch, swm's checkpoint code). ``--before PATH`` runs the
same cases against another checkout (an older commit, e.g. from ``git archive``) in the same run, so
the two columns are measured side by side.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.results import ROOT, results_page

CASES = {"swm --help": ["-m", "swm", "--help"], "import swm": ["-c", "import swm"],
         **{f"swm {c} --help": ["-m", "swm", *c.split(), "--help"]
            for c in ("ask", "play", "learn", "selfplay", "bench tom", "ui")}}
HEAVY = ("openai", "langchain_core", "langchain_openai", "langgraph", "sqlite_utils", "torch", "swm.checkpoints")
# runs a case as ``python ARGS`` would, then names the heavy packages it imported
PROBE = """
import runpy, sys
args = sys.argv[1:]
try:
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        exec(args[1])
except SystemExit:
    pass
tops = {m.split(".")[0] for m in sys.modules} | {".".join(m.split(".")[:2]) for m in sys.modules}
print("IMPORTED", *sorted(tops & set(HEAVY)), file=sys.stderr)
"""


@dataclass
class Timing:
    case: str
    seconds: list[float]
    heavy: list[str]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def cpu_seconds(args: list[str], checkout: Path) -> float:
    """Run ``python ARGS`` with ``checkout`` first on the path; return its user + system CPU seconds."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, *args], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"python {' '.join(args)} failed in {checkout}:\n{done.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imported(args: list[str], checkout: Path) -> list[str]:
    """Return the heavy packages ``python ARGS`` imports (`HEAVY`)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    code = f"HEAVY = {HEAVY!r}\n" + PROBE
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=120)
    line = next((ln for ln in done.stderr.splitlines() if ln.startswith("IMPORTED")), "IMPORTED")
    return line.split()[1:]


def measure(checkout: Path, runs: int) -> list[Timing]:
    """Time every case ``runs`` times in ``checkout`` (after one warm-up run that fills the OS file cache)."""
    out = []
    for case, args in CASES.items():
        cpu_seconds(args, checkout)
        out.append(Timing(case, [cpu_seconds(args, checkout) for _ in range(runs)], imported(args, checkout)))
    return out


def table(columns: dict[str, list[Timing]]) -> str:
    """Render the cases' median CPU seconds (min–max) per checkout, and what each imported."""
    names = list(columns)
    lines = ["| case | " + " | ".join(f"{n}: CPU s, median (min–max)" for n in names) + " | ratio |",
             "|---|" + "---|" * len(names) + "---|"]
    for i, case in enumerate(CASES):
        cells = [columns[n][i] for n in names]
        ratio = f"{cells[0].median / cells[-1].median:.1f}×" if len(cells) > 1 and cells[-1].median else ""
        lines.append(f"| `{case}` | " + " | ".join(f"{t.median:.3f} ({min(t.seconds):.3f}–{max(t.seconds):.3f})"
                                                    for t in cells) + f" | {ratio} |")
    lines += ["", "| case | " + " | ".join(f"{n}: heavy packages imported" for n in names) + " |",
              "|---|" + "---|" * len(names)]
    for i, case in enumerate(CASES):
        lines.append(f"| `{case}` | " + " | ".join(", ".join(columns[n][i].heavy) or "none" for n in names) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per case (after one warm-up)")
    parser.add_argument("--before", type=Path, default=None, metavar="PATH",
                        help="another checkout to measure in the same run (its column comes first)")
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args(argv)
    with results_page("cli-startup", "CPU time of `swm --help` and `import swm`", "bench.cli_startup", argv,
                      enabled=not args.no_page, markdown=True):
        columns = {}
        if args.before is not None:
            columns["before"] = measure(args.before.resolve(), args.runs)
        columns["this checkout"] = measure(ROOT, args.runs)
        print(table(columns))


if __name__ == "__main__":
    main()
