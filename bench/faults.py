"""``python -m bench.faults``: long runs against an endpoint that fails, measured.

Each case runs a real command (``swm bench tom``, ``swm bench sotopia``, ``swm learn``) against
the loopback fake server twice: once fault-free (the baseline: how many requests the work needs),
and once with faults injected at random (seeded: 500s, 429s with ``Retry-After``, dropped
connections, hangs past the timeout, bodies that are not JSON), rerunning the command with the
same thread until it finishes (at most ``--reruns`` times). It reports, per case: faults
injected, invocations until done, rows lost (results the baseline has and the faulty run never
stored), rows duplicated (stored twice), requests made beyond the baseline (retries plus work
redone), and answers the server gave beyond the baseline (work done twice).

The ``learn-kill`` case SIGKILLs a ``swm learn`` process mid-run (a separate process against a
separate server process) and resumes it, then compares the report's model calls with the
requests the server answered: the difference is the calls in flight when the process died.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.extra_graphs import SCRIPTS
from bench.results import results_page
from swm.checkpoints import ExperienceStore
from swm.lifelong import store as ls
from swm.testing import FakeOpenAIServer

FAULT_KINDS = ["500", "429", "drop", "hang", "invalid_json"]
# HTTP 200 answers that are not chat completions, a reply dripped over 6 s (longer than the timeout), and
# answers with a choice left out or with no text
REPLY_KINDS = ["html", "sse", "double_json", "drip", "missing_choice", "null_choice"]
# tiny backoff: the server says retry-after-ms 5; a hang outlives the 2 s timeout
FAULT_SETTINGS = {"retry_after_ms": 5, "retry_after": 1, "hang": 4.0, "drip_bytes": 60, "drip_interval": 0.1}
CLIENT = ["--max-retries", "2", "--timeout", "2"]


@dataclass
class Outcome:
    case: str
    faults: int
    by_kind: dict[str, int]
    invocations: int
    finished: bool
    rows_expected: int
    rows_lost: int
    rows_duplicated: int
    extra_requests: int
    extra_answers: int
    failed_items_seen: int


def _env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


def _invoke(args: list[str]) -> tuple[int, str]:
    """Run ``swm ARGS`` in a child process (bench sits below the CLI); return its exit code and stderr."""
    proc = _swm(args, _env())
    _, err = proc.communicate(timeout=900)
    return proc.returncode, err


@dataclass
class Case:
    name: str
    args: Callable[[Path, str], list[str]]  # (db, model spec) -> CLI arguments
    rows: Callable[[Path], list[str]]  # the stored result keys (duplicates included)
    failed: Callable[[Path], int]  # items recorded as failed at the end of an invocation


def _read(db: Path, read: Callable[[Any], Any]) -> Any:
    """Open the run's store, read from it, close it (the next invocation is another process)."""

    store = ExperienceStore(db)
    try:
        return read(store)
    finally:
        store.close()


def _keys(table: str, sql: str, column: str = "key") -> Callable[[Path], list[str]]:
    """Return a reader of one column of ``sql`` over ``table`` (no rows while the table does not exist)."""
    return lambda db: _read(db, lambda store: [str(r[column]) for r in store.rows(sql)]
                            if store.has_table(table) else [])


def _count(table: str, where: str) -> Callable[[Path], int]:
    return lambda db: int(_read(db, lambda store: store.count(table, where)))


def _episode_rows(db: Path) -> list[str]:
    turns = _keys("turns", "select episode_id || '#' || turn as k from turns", "k")(db)
    return _keys("episodes", "select episode_id from episodes where status = 'done'", "episode_id")(db) + turns


_learn_rows = _keys("lifelong_episodes", "select episode_id from lifelong_episodes", "episode_id")


def _learn_failed(db: Path) -> int:
    return len(_read(db, lambda store: ls.failures(store, "F")))


CASES = {
    "tom": Case("swm bench tom (sim, 4 stories, cot+s3ap: 48 questions)", lambda db, spec: [
        "bench", "tom", "--benchmark", "sim", "--n", "4", "--modes", "cot,s3ap", "--concurrency", "4",
        "--no-progress", "--model", spec, "--db", str(db), "--thread-id", "F", "--out", str(db.parent / "tom"),
        *CLIENT], _keys("tom_results", "select key from tom_results where coalesce(status, 'done') = 'done'"),
        _count("tom_results", "status = 'failed'")),
    "sotopia": Case("swm bench sotopia (4 episodes, plain and foresee, 4 turns, judged)", lambda db, spec: [
        "bench", "sotopia", "--data", "shipped", "--policies", "plain,foresee", "--n", "2", "--max-turns", "4",
        "--seats", "first", "--concurrency", "2", "--no-progress", "--model", spec, "--db", str(db),
        "--thread-id", "F", "--out", str(db.parent / "sotopia"), *CLIENT], _episode_rows,
        _count("episodes", "status = 'failed'")),
    "learn": Case("swm learn (1 cycle, 2 levels, 2 families, 4 training episodes)", lambda db, spec: [
        "learn", "--cycles", "1", "--levels", "easy,medium", "--families", "negotiation,secret",
        "--episodes-per-level", "4", "--max-turns", "3", "--concurrency", "2", "--model", spec, "--db", str(db),
        "--thread-id", "F", "--out", str(db.parent / "learn"), *CLIENT], _learn_rows, _learn_failed),
}


def run_case(key: str, rate: float, seed: int, reruns: int, kinds: list[str] = FAULT_KINDS) -> Outcome:
    """Run one case fault-free, then with faults until it finishes; compare."""
    case = CASES[key]
    with tempfile.TemporaryDirectory(prefix=f"swm-faults-{key}-") as tmp, FakeOpenAIServer(scripts=SCRIPTS) as server:
        base_db = Path(tmp) / "base" / "run.db"
        base_db.parent.mkdir()
        code, output = _invoke(case.args(base_db, server.model_spec))
        if code != 0:
            raise RuntimeError(f"the fault-free {key} run failed: {output[-2000:]}")
        baseline = server.stats()
        expected = case.rows(base_db)
        server.reset()
        server.configure(fault_rate=rate, fault_kinds=kinds, seed=seed, **FAULT_SETTINGS)
        db = Path(tmp) / "faulty" / "run.db"
        db.parent.mkdir()
        invocations, finished, failed_seen = 0, False, 0
        while invocations < reruns and not finished:
            invocations += 1
            code, output = _invoke(case.args(db, server.model_spec))
            failed_seen += case.failed(db)
            finished = code == 0 and case.failed(db) == 0
        stats = server.stats()
        got = case.rows(db)
    return Outcome(case=case.name, faults=sum(stats["injected"].values()), by_kind=stats["injected"],
                   invocations=invocations, finished=finished, rows_expected=len(expected),
                   rows_lost=len(set(expected) - set(got)), rows_duplicated=len(got) - len(set(got)),
                   extra_requests=stats["attempts"] - baseline["attempts"],
                   extra_answers=stats["requests"] - baseline["requests"], failed_items_seen=failed_seen)


def _swm(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    code = "import sys; from swm.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def run_learn_kill(kills: int, seed: int) -> dict[str, Any]:
    """SIGKILL ``swm learn`` ``kills`` times mid-run, resume it, and compare the report's calls with the server's."""

    rng = random.Random(seed)
    env = _env()
    with tempfile.TemporaryDirectory(prefix="swm-faults-kill-") as tmp, \
            FakeOpenAIServer(latency=0.2, scripts={"<text>": "speak: fine"}, process=True) as server:
        db, out = Path(tmp) / "run.db", Path(tmp) / "out"
        args = ["learn", "--cycles", "1", "--levels", "easy,medium", "--families", "negotiation,secret",
                "--episodes-per-level", "4", "--max-turns", "3", "--concurrency", "3", "--model", server.model_spec,
                "--db", str(db), "--thread-id", "K", "--out", str(out)]
        killed = 0
        for _ in range(kills):
            proc = _swm(args, env)
            target = server.requests + rng.randint(8, 20)  # kill mid-run: after some more answers
            while proc.poll() is None and server.requests < target:
                time.sleep(0.02)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed += 1
        proc = _swm(args, env)
        _, err = proc.communicate(timeout=600)
        report = (out / "report.md").read_text() if (out / "report.md").is_file() else ""
        found = re.search(r"model calls (\d+)", report)
        stats = server.stats()
        rows = _learn_rows(db)
    return {"kills": killed, "exit": proc.returncode, "report_calls": int(found.group(1)) if found else None,
            "server_answered": stats["requests"], "episodes": len(rows), "duplicated": len(rows) - len(set(rows)),
            "stderr_tail": err[-300:] if proc.returncode else ""}


def markdown(outcomes: list[Outcome], kill: dict[str, Any] | None, rate: float, seed: int,
             kinds: list[str] = FAULT_KINDS) -> str:
    lines = [f"Fault rate {rate:.0%} of requests (seed {seed}; kinds {', '.join(kinds)}), client "
             f"`{' '.join(CLIENT)}`:", "",
             "| case | faults injected | invocations | finished | rows | lost | duplicated | failed items recorded "
             "on the way | extra requests | answers beyond the baseline |", "|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        drawn = ", ".join(f"{k} {v}" for k, v in sorted(o.by_kind.items()))
        lines.append(f"| {o.case} | {o.faults} ({drawn}) | {o.invocations} | {'yes' if o.finished else 'NO'} | "
                     f"{o.rows_expected} | {o.rows_lost} | {o.rows_duplicated} | {o.failed_items_seen} | "
                     f"{o.extra_requests} | {o.extra_answers} |")
    if kill is not None:
        lines += ["", f"`swm learn` SIGKILLed {kill['kills']} times mid-run, then resumed (exit {kill['exit']}): "
                      f"{kill['episodes']} episodes, {kill['duplicated']} duplicated; the report counts "
                      f"{kill['report_calls']} model calls, the server answered {kill['server_answered']}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="tom,sotopia,learn", help="comma list of tom, sotopia, learn")
    parser.add_argument("--rate", type=float, default=0.1, help="share of requests that get a fault")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reruns", type=int, default=6, help="invocations allowed per case")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs of the learn-kill case (0: skip it)")
    parser.add_argument("--kinds", default=",".join(FAULT_KINDS),
                        help=f"fault kinds to draw from (transport: {','.join(FAULT_KINDS)}; replies that are not "
                             f"chat completions: {','.join(REPLY_KINDS)})")
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    with results_page("faults", "Endpoint faults", "bench.faults", argv, enabled=not args.no_page, markdown=True):
        outcomes = [run_case(k.strip(), args.rate, args.seed, args.reruns, kinds)
                    for k in args.cases.split(",") if k.strip()]
        kill = run_learn_kill(args.kills, args.seed) if args.kills else None
        print(markdown(outcomes, kill, args.rate, args.seed, kinds))


if __name__ == "__main__":
    main()
