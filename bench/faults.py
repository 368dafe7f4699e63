"""``python -m bench.faults``: long runs against an endpoint that fails, measured.

Each case runs a real command (``swm bench tom``, ``swm bench sotopia``, ``swm learn``) against
the loopback fake server twice: once fault-free (the baseline: how many requests the work needs),
and once with faults injected at random (seeded: 500s, 429s with ``Retry-After``, dropped
connections, hangs past the timeout, bodies that are not JSON), rerunning the command with the
same thread until it finishes (at most ``--reruns`` times). It reports, per case: faults
injected, invocations until done, rows lost (results the baseline has and the faulty run never
stored), rows duplicated (stored twice), requests made beyond the baseline (retries plus work
redone), and answers the server gave beyond the baseline (work done twice).

The ``parse`` and ``ask`` cases are one story each, one parse attempt: with the reply kinds a
misformatting model sends (``--kinds bad_arguments,wrong_tool``) an unusable reply ends an
invocation (exit 4 or 6), and the rerun must ask again; a rerun that makes no call while the case
is unfinished is a wedged thread (the column "reruns with no call").

The ``learn-kill`` case SIGKILLs a ``swm learn`` process mid-run (a separate process against a
separate server process) and resumes it, then compares the report's model calls with the
requests the server answered: the difference is the calls in flight when the process died.

``--read-only`` makes the run's database files read-only during an acting call of ``swm bench
sotopia`` and ``swm learn`` (``chmod 444``, the command then running as ``nobody`` when this is
root, and ``chattr +i`` where root may set it), makes them writable again, reruns, and reports the
first run's exit code and last line, rows lost or duplicated and answers beyond the fault-free run.

``--replaced`` renames another database over ``swm learn``'s file mid-run (`bench.db_swap`).

``--frozen`` runs ``swm learn`` on PostgreSQL (``--pg``) behind a proxy that stops forwarding mid-run without
closing its sockets (a network partition, a frozen host), or cuts its connections (`bench.db_freeze`).

``--drain`` sends SIGTERM to ``swm bench sotopia`` at its first model call, in-process and on two Ray workers,
and reruns it: the exit code, the episodes the stopped run finished (those in flight), lost and duplicated.

``--served`` runs the served-sampler and key cases of `bench.served_faults` (a server that samples
the base under a trained adapter's name, one that forgets its adapters, a key quoted back in an
error, self-play killed and resumed): rollouts lost, duplicated, paid twice or sampled by the wrong
policy, and keys written (``--served-cases`` picks some).
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import db_freeze, served_faults
from bench.db_swap import run_swap, swap_markdown
from bench.extra_graphs import SCRIPTS
from bench.interrupts import finished, start, wait_for_requests
from bench.results import results_page
from swm.checkpoints import ExperienceStore
from swm.lifelong import store as ls
from swm.testing import FakeOpenAIServer

FAULT_KINDS = ["500", "429", "drop", "hang", "invalid_json"]
# HTTP 200 answers that are not chat completions, a reply dripped over 6 s (longer than the timeout), and
# answers with a choice left out or with no text
REPLY_KINDS = ["html", "sse", "double_json", "drip", "missing_choice", "null_choice"]
# tiny backoff: the server says retry-after-ms 5; a hang outlives the 2 s timeout
# tool calls a misformatting model sends: not retried, the item's reply is unusable
BAD_REPLY_KINDS = ["bad_arguments", "wrong_tool"]
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
    idle_reruns: int = 0  # reruns of an unfinished case that made no request: a wedged thread


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


STORY = "Sally puts the ball in the basket. Sally leaves. Anne moves the ball to the box."


def _story(db: Path) -> str:
    """Write the parse and ask cases' story beside the database; return its path."""
    path = db.parent / "story.txt"
    path.write_text(STORY, encoding="utf-8")
    return str(path)


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
    "parse": Case("swm parse (1 story, 1 attempt)", lambda db, spec: [
        "parse", _story(db), "--max-attempts", "1", "--quiet", "--model", spec, "--db", str(db), "--thread-id", "F",
        *CLIENT], _keys("parses", "select key from parses"), lambda db: 0),
    "ask": Case("swm ask (s3ap, 1 parse attempt)", lambda db, spec: [
        "ask", "--story", _story(db), "--question", "Where will Sally look for the ball?", "--max-attempts", "1",
        "--quiet", "--model", spec, "--db", str(db), "--thread-id", "F", *CLIENT],
        _keys("swm_asks", "select thread_id from swm_asks where answer != ''", "thread_id"),
        _count("swm_asks", "answer = ''")),
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
        invocations, finished, failed_seen, idle = 0, False, 0, 0
        while invocations < reruns and not finished:
            invocations += 1
            before = server.stats()["attempts"]
            code, output = _invoke(case.args(db, server.model_spec))
            failed_seen += case.failed(db)
            finished = code == 0 and case.failed(db) == 0
            idle += int(invocations > 1 and not finished and server.stats()["attempts"] == before)
        stats = server.stats()
        got = case.rows(db)
    return Outcome(case=case.name, faults=sum(stats["injected"].values()), by_kind=stats["injected"],
                   invocations=invocations, finished=finished, rows_expected=len(expected),
                   rows_lost=len(set(expected) - set(got)), rows_duplicated=len(got) - len(set(got)),
                   extra_requests=stats["attempts"] - baseline["attempts"],
                   extra_answers=stats["requests"] - baseline["requests"], failed_items_seen=failed_seen,
                   idle_reruns=idle)


CLI = "import sys; from swm.cli import main; sys.exit(main(sys.argv[1:]))"


def _swm(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CLI, *args], env=env, text=True,
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


# ---- the database's files made read-only mid-run ------------------------------------------------------

NOBODY = 65534
DB_FILES = ("run.db", "run.db-wal", "run.db-shm")
READ_ONLY_HOW = ("chmod", "chattr")
READ_ONLY_COMMANDS = {
    "sotopia": (["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "2", "--max-turns", "2",
                 "--seats", "first", "--concurrency", "1", "--no-progress", "--thread-id", "R"],
                "select episode_id from episodes where status = 'done'"),
    "learn": (["learn", "--cycles", "1", "--levels", "easy", "--families", "negotiation", "--episodes-per-level",
               "2", "--samples-per-task", "2", "--max-turns", "2", "--heldout-per-cell", "1", "--concurrency", "1",
               "--no-progress", "--thread-id", "R"],
              "select episode_id from lifelong_episodes"),
}
# as root, chmod binds nobody only: the command runs as nobody, still able to read (never write) what root reads,
# since the interpreter and the checkout may sit in root's home; without that capability, as plain nobody
AS_NOBODY = [["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=+dac_read_search",
              "--ambient-caps=+dac_read_search"],
             ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]]


@dataclass
class ReadOnlyOutcome:
    command: str
    how: str
    first_rc: int
    first_stderr: str
    rerun_rc: int
    rerun_stderr: str
    rows: list[str]  # stored after the rerun (duplicates included)
    kept: list[str]  # stored when the first run stopped
    needed: int  # answers the fault-free run needs
    made: int  # answers the two runs got

    @property
    def first_line(self) -> str:
        lines = self.first_stderr.strip().splitlines()
        return lines[-1] if lines else ""


@functools.cache
def run_user(how: str) -> list[str]:
    """Return the prefix that runs swm as a user the files' read-only state binds (none unless chmod as root)."""
    if how != "chmod" or os.geteuid() != 0:
        return []
    tried = []
    for prefix in AS_NOBODY:
        probe = subprocess.run([*prefix, sys.executable, "-c", "import swm.cli"], capture_output=True, text=True,
                               env=_env())
        if probe.returncode == 0:
            return prefix
        tried.append(f"{' '.join(prefix[:4])}…: {probe.stderr.strip()[-300:]}")
    raise RuntimeError(f"cannot run swm as uid {NOBODY} (root writes read-only files): {'; '.join(tried)}")


def can_chattr(folder: Path) -> bool:
    """Tell whether this process may make a file in ``folder`` immutable (root with CAP_LINUX_IMMUTABLE, and a file
    system that has the flag)."""
    probe = folder / "probe"
    probe.write_text("x")
    try:
        made = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    except FileNotFoundError:  # no chattr (e2fsprogs)
        made = False
    if made:
        subprocess.run(["chattr", "-i", str(probe)], check=True)
    probe.unlink()
    return made


def set_read_only(folder: Path, how: str, read_only: bool) -> None:
    """Make the database's files in ``folder`` read-only (``chmod 444`` or ``chattr +i``), or writable again."""
    for name in DB_FILES:
        path = folder / name
        if not path.exists():
            continue
        if how == "chmod":
            os.chmod(path, 0o444 if read_only else 0o644)
        else:
            subprocess.run(["chattr", "+i" if read_only else "-i", str(path)], check=True, capture_output=True)


def _stored(db: Path, sql: str) -> list[str]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [str(row[0]) for row in conn.execute(sql)]
    except sqlite3.OperationalError:  # no such table yet
        return []
    finally:
        conn.close()


# answers each command's fault-free run needed, measured once a process: the fake server's replies do not depend on
# the user running it or on how its files are made read-only later (a `swm` process costs ~5 s of CPU)
_NEEDED: dict[str, int] = {}


def run_read_only(command: str, how: str, at: int = 3) -> ReadOnlyOutcome:
    """Run ``command`` fault-free (once a process: `_NEEDED`), then again with its files made read-only (``how``)
    during acting call ``at``; make them writable again and rerun; return what each run did."""
    args, rows_sql = READ_ONLY_COMMANDS[command]
    prefix = run_user(how)
    calls: list[int] = []
    fault: list[Path] = []  # the folder whose files go read-only, once armed

    def act(prompt: str, body: dict[str, Any]) -> Any:
        calls.append(1)
        if fault and len(calls) == at:
            set_read_only(fault[0], how, True)
        return SCRIPTS["AgentActionForModel"]

    env = _env()
    with tempfile.TemporaryDirectory(prefix="swm-read-only-") as name, \
            FakeOpenAIServer(scripts={"AgentActionForModel": act}) as server:
        base, folder = Path(name) / "base", Path(name) / "run"
        if prefix:
            os.chmod(name, 0o755)  # nobody enters it, to its own folders
        for where in (base, folder):
            where.mkdir()
            if prefix:
                os.chown(where, NOBODY, NOBODY)
        try:
            def swm(where: Path) -> subprocess.CompletedProcess[str]:
                run = [*args, "--model", server.model_spec, "--db", str(where / "run.db"), "--out", str(where / "out")]
                return subprocess.run([*prefix, sys.executable, "-c", CLI, *run], env={**env, "HOME": str(where)},
                                      capture_output=True, text=True, timeout=600)

            if command not in _NEEDED:
                clean = swm(base)
                if clean.returncode != 0:
                    raise RuntimeError(f"the fault-free {command} run failed: {clean.stderr[-2000:]}")
                _NEEDED[command] = server.requests
                server.reset()
                calls.clear()
            needed = _NEEDED[command]
            fault.append(folder)
            first = swm(folder)
            set_read_only(folder, how, False)
            kept = _stored(folder / "run.db", rows_sql)
            second = swm(folder)
            made, rows = server.requests, _stored(folder / "run.db", rows_sql)
        finally:
            for where in (base, folder):
                set_read_only(where, how, False)
    return ReadOnlyOutcome(command, how, first.returncode, first.stderr, second.returncode, second.stderr, rows, kept,
                           needed, made)


def read_only_cases() -> list[ReadOnlyOutcome | str]:
    """Run every command with each way of making its files read-only this machine allows; say which it cannot."""
    results: list[ReadOnlyOutcome | str] = []
    with tempfile.TemporaryDirectory() as probe:
        chattr = can_chattr(Path(probe))
    for how in READ_ONLY_HOW:
        for command in READ_ONLY_COMMANDS:
            if how == "chattr" and not chattr:
                results.append(f"{command}, chattr +i: not possible here (needs root with CAP_LINUX_IMMUTABLE)")
                continue
            results.append(run_read_only(command, how))
    return results


def read_only_markdown(results: list[ReadOnlyOutcome | str]) -> str:
    lines = ["The database's files made read-only during the 3rd acting call, then writable again, then a rerun:", "",
             "| command | how | first run: exit | its last line | rerun exit | rows | lost | duplicated | "
             "answers beyond the fault-free run |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if isinstance(r, str):
            lines.append(f"| {r} | | | | | | | | |")
            continue
        how = "chmod 444" + (" (as nobody)" if os.geteuid() == 0 else "") if r.how == "chmod" else "chattr +i"
        lost, duplicated = len(set(r.kept) - set(r.rows)), len(r.rows) - len(set(r.rows))
        lines.append(f"| swm {'bench ' if r.command == 'sotopia' else ''}{r.command} | {how} | {r.first_rc} | "
                     f"`{r.first_line[:160]}…` | {r.rerun_rc} | {len(set(r.rows))} | {lost} | {duplicated} | "
                     f"{r.made - r.needed} |")
    return "\n".join(lines) + "\n"


def markdown(outcomes: list[Outcome], kill: dict[str, Any] | None, rate: float, seed: int,
             kinds: list[str] = FAULT_KINDS) -> str:
    lines = [f"Fault rate {rate:.0%} of requests (seed {seed}; kinds {', '.join(kinds)}), client "
             f"`{' '.join(CLIENT)}`:", "",
             "| case | faults injected | invocations | finished | rows | lost | duplicated | failed items recorded "
             "on the way | reruns with no call | extra requests | answers beyond the baseline |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        drawn = ", ".join(f"{k} {v}" for k, v in sorted(o.by_kind.items()))
        lines.append(f"| {o.case} | {o.faults} ({drawn}) | {o.invocations} | {'yes' if o.finished else 'NO'} | "
                     f"{o.rows_expected} | {o.rows_lost} | {o.rows_duplicated} | {o.failed_items_seen} | "
                     f"{o.idle_reruns} | {o.extra_requests} | {o.extra_answers} |")
    if kill is not None:
        lines += ["", f"`swm learn` SIGKILLed {kill['kills']} times mid-run, then resumed (exit {kill['exit']}): "
                      f"{kill['episodes']} episodes, {kill['duplicated']} duplicated; the report counts "
                      f"{kill['report_calls']} model calls, the server answered {kill['server_answered']}."]
    return "\n".join(lines) + "\n"


@dataclass
class DrainOutcome:
    workers: int
    rc: int
    last_line: str
    done_at_stop: int  # episodes finished by the stopped run (at most the ones in flight at the signal)
    rerun_rc: int
    episodes: int  # stored after the rerun
    lost: int
    duplicated: int


def run_drain(workers: list[int], n: int = 2) -> list[DrainOutcome]:
    """SIGTERM to ``swm bench sotopia`` at its first model call, without workers and on Ray workers, then the same
    command again: the signalled run must hand out no new episode and exit 143, the rerun play the rest."""
    episodes = 2 * n  # two policies
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="swm-drain-") as tmp:
        for count in workers:
            db = str(Path(tmp) / f"w{count}.db")
            with FakeOpenAIServer(latency=0.2) as server:
                cmd = [sys.executable, "-m", "swm", "bench", "sotopia", "--data", "shipped", "--n", str(n), "--seats",
                       "first", "--policies", "plain,foresee", "--max-turns", "4", "--model", server.model_spec,
                       "--judge-model", server.model_spec, "--db", db, "--thread-id", "sw", "--out",
                       str(Path(tmp) / f"out{count}"), "--no-progress"]
                proc = start([*cmd, *(["--workers", str(count)] if count else [])])
                try:
                    wait_for_requests(server, 1, proc, timeout=300)
                    proc.send_signal(signal.SIGTERM)
                    rc, _, err = finished(proc)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                # 0 while no episode is stored (the table gets its bench columns with the first one)
                done = served_faults.count(Path(db), "select count(*) from episodes where bench_run = 'sw' "
                                                     "and status = 'done'")
                rerun = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
                stored = served_faults.count(Path(db), "select count(*) from episodes where bench_run = 'sw'")
                distinct = served_faults.count(Path(db), "select count(distinct episode_id) from episodes "
                                                         "where bench_run = 'sw'")
            last = [line for line in err.strip().splitlines() if line.strip()][-1:] or [""]
            outcomes.append(DrainOutcome(count, rc, last[0][:160], done, rerun.returncode, distinct,
                                         max(0, episodes - distinct), stored - distinct))
    return outcomes


def drain_markdown(outcomes: list[DrainOutcome]) -> str:
    lines = ["SIGTERM to `swm bench sotopia --data shipped --n 2 --policies plain,foresee --max-turns 4` at its first "
             "model call (loopback fake, 0.2 s a reply), then the same command again:", "",
             "| workers | exit | last line | episodes finished by the stopped run | rerun exit | episodes after the "
             "rerun | lost | duplicated |", "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        shown = o.last_line.replace("|", "\\|")
        lines.append(f"| {o.workers or 'none (in-process)'} | {o.rc} | `{shown}` | {o.done_at_stop} | {o.rerun_rc} | "
                     f"{o.episodes} | {o.lost} | {o.duplicated} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="tom,sotopia,learn",
                        help="comma list of tom, sotopia, learn, parse, ask ('' for none)")
    parser.add_argument("--rate", type=float, default=0.1, help="share of requests that get a fault")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reruns", type=int, default=6, help="invocations allowed per case")
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs of the learn-kill case (0: skip it)")
    parser.add_argument("--kinds", default=",".join(FAULT_KINDS),
                        help=f"fault kinds to draw from (transport: {','.join(FAULT_KINDS)}; replies that are not "
                             f"chat completions: {','.join(REPLY_KINDS)}; unusable tool calls: "
                             f"{','.join(BAD_REPLY_KINDS)})")
    parser.add_argument("--read-only", action="store_true",
                        help="also make the database's files read-only mid-run (chmod, and chattr +i as root)")
    parser.add_argument("--replaced", action="store_true",
                        help="also rename another database over swm learn's file mid-run (cp donor.db t.db && "
                             "mv t.db run.db) and count the rows kept")
    parser.add_argument("--frozen", action="store_true",
                        help="also run swm learn on PostgreSQL behind a proxy that freezes mid-run (bench.db_freeze)")
    parser.add_argument("--frozen-cases", default=",".join(db_freeze.CASES),
                        help=f"comma list of {', '.join(db_freeze.CASES)}")
    parser.add_argument("--pg", default=os.environ.get("SWM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"),
                        help="the PostgreSQL server of --frozen (each case on a fresh schema)")
    parser.add_argument("--freeze-after", type=int, default=1000,
                        help="chunks the client sends before the proxy freezes (the run sends ~2000)")
    parser.add_argument("--served", action="store_true",
                        help="also run the served-sampler and key cases (bench.served_faults)")
    parser.add_argument("--served-cases", default=",".join(served_faults.CASES),
                        help=f"comma list of {', '.join(served_faults.CASES)}")
    parser.add_argument("--drain", action="store_true",
                        help="also SIGTERM swm bench sotopia without workers and on 2 Ray workers, then rerun it")
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    # --frozen alone has a page of its own: it would otherwise supersede the last page of every case
    alone = args.frozen and not args.cases.strip() and not args.kills and not (args.read_only or args.replaced
                                                                                 or args.served or args.drain)
    page = ("faults-frozen", "A frozen PostgreSQL") if alone else ("faults", "Endpoint faults")
    with results_page(*page, "bench.faults", argv, enabled=not args.no_page, markdown=True):
        outcomes = [run_case(k.strip(), args.rate, args.seed, args.reruns, kinds)
                    for k in args.cases.split(",") if k.strip()]
        kill = run_learn_kill(args.kills, args.seed) if args.kills else None
        if outcomes or kill is not None:
            print(markdown(outcomes, kill, args.rate, args.seed, kinds))
        if args.read_only:
            print(read_only_markdown(read_only_cases()))
        if args.replaced:
            print(swap_markdown(run_swap()))
        if args.frozen:
            cases = [c.strip() for c in args.frozen_cases.split(",") if c.strip()]
            print(db_freeze.freeze_markdown(db_freeze.run_freeze(cases, args.pg, args.freeze_after), args.freeze_after))
        if args.served:
            print(served_faults.served_markdown(served_faults.run_served(
                [c.strip() for c in args.served_cases.split(",") if c.strip()])))
        if args.drain:
            print(drain_markdown(run_drain([0, 2])))


if __name__ == "__main__":
    main()
