"""Interrupt `swm learn` the ways users do, rerun it, and count what was lost, duplicated or paid twice.

Each case runs the real CLI as a subprocess against the loopback fake server: Ctrl-C (SIGINT),
kill -9 (SIGKILL), SIGTERM (what containers and schedulers send), SIGHUP (a closed terminal) or
SIGTERM to swm running as PID 1 of its own PID namespace (a container's entry point, through
``unshare --pid --fork``) once the server has answered ``at`` requests, then the same command
again; or two processes started on the same thread at once. The figures compare with an uninterrupted run
of the same plan::

    python -m bench.interrupts --rounds 3

prints, per case: interrupts injected, runs completed, episodes lost and duplicated, and extra
model calls (requests beyond the uninterrupted run's).

``--cases out`` runs a DPO plan on a tiny random Llama (served by the fake server's runtime LoRA)
instead, stops it with SIGTERM in cycle 2, deletes its ``--out`` and resumes it from another folder,
on SQLite and on PostgreSQL (``--pg``): the trained adapter p1 must come back from the run's store.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.data_faults import pg_schema
from bench.results import results_page
from swm.checkpoints import open_store
from swm.testing import FakeOpenAIServer, scaled
from swm.testing.tiny_llama import make_tiny_llama

PLAN = ["--cycles", "2", "--levels", "easy", "--families", "negotiation,secret", "--episodes-per-level", "2",
        "--samples-per-task", "2", "--max-turns", "2", "--concurrency", "2"]
MAX_TURNS = 2  # an episode stopped mid-way is played again from its first turn: at most this many calls again
ROOT = Path(__file__).resolve().parents[1]


def learn_command(spec: str, db: str | Path, thread: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "swm", "learn", *PLAN, "--model", spec,
            "--db", str(db), "--thread-id", thread, "--out", str(out), "--json"]


SIGNALS = {"SIGINT": signal.SIGINT, "SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP,
           "SIGTERM as PID 1": signal.SIGTERM}


def as_pid1(command: list[str]) -> list[str]:
    """Run ``command`` as PID 1 of a new PID namespace (as root, or in a user namespace of its own)."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--pid", "--fork", *command]


def namespace_init(proc: subprocess.Popen[str], timeout: float = 10) -> int:
    """Return the host PID of the process ``unshare --fork`` started (PID 1 inside its namespace)."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.02)
    raise TimeoutError("unshare started no child")


def start(command: list[str], cwd: Path | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "LANGSMITH_TRACING": "false",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    # A shell runs background jobs with SIGINT ignored, and a child inherits that: Python then installs
    # no KeyboardInterrupt handler and Ctrl-C does nothing. Give the child SIGINT's default back, as a
    # terminal user's `swm learn` has it, wherever this suite runs (CI scripts, nohup, `&`). Likewise SIGHUP:
    # under nohup it is ignored, and swm rightly leaves an ignored SIGHUP alone, so the child gets its default.
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_signal_defaults, cwd=cwd)


def _signal_defaults() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def wait_for_episode(db: Path, thread: str, proc: subprocess.Popen[str], timeout: float = 180) -> set[str]:
    """Wait until the run has stored its first episode; return the ids stored then (fail if the process ends first).

    ``timeout`` (stretched on a busy machine: `swm.testing.scaled`) only keeps a run that stalls from hanging.
    """
    deadline = time.monotonic() + scaled(timeout)
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"swm learn ended (rc {proc.returncode}) before its first episode: "
                               f"{proc.stderr.read()[-2000:] if proc.stderr else ''}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no episode stored within {scaled(timeout):.0f} s")
        try:
            if ids := episode_ids(db, thread):
                return set(ids)
        except sqlite3.OperationalError:  # no table yet
            pass
        time.sleep(0.05)


def wait_for_requests(server: FakeOpenAIServer, count: int, proc: subprocess.Popen[str], timeout: float = 180) -> None:
    """Wait until the server has answered ``count`` requests (fail if the process ends first).

    ``timeout`` (stretched on a busy machine: `swm.testing.scaled`) only keeps a run that stalls from hanging.
    """
    deadline = time.monotonic() + scaled(timeout)
    while server.requests < count:
        if proc.poll() is not None:
            raise RuntimeError(f"swm learn ended (rc {proc.returncode}) before request {count}: "
                               f"{proc.stderr.read()[-1500:] if proc.stderr else ''}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no request {count} within {scaled(timeout):.0f} s")
        time.sleep(0.02)


def episode_ids(db: Path, thread: str) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute("select episode_id from lifelong_episodes where run_id = ?", (thread,))]
    finally:
        conn.close()


def lease_pid(db: Path, thread: str) -> int | None:
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("select pid from swm_leases where thread_id = ?", (thread,)).fetchone()
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()
    return int(row[0]) if row else None


@dataclass
class Outcome:
    """One interrupted-and-rerun run (or one pair of concurrent processes)."""

    case: str
    interrupts: int
    completed: bool
    lost: int
    duplicated: int
    extra_calls: int
    notes: dict[str, Any] = field(default_factory=dict)


def finished(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=scaled(timeout))  # the event: the process's exit
    return proc.returncode, out, err


@dataclass(frozen=True)
class Reference:
    """The uninterrupted run of the plan: its model calls and its episodes."""

    calls: int
    episodes: int


def reference_run(server: FakeOpenAIServer, folder: Path) -> Reference:
    """Run the plan once without interruption; return the requests it made and the episodes it stored."""
    before = server.requests
    rc, _, err = finished(start(learn_command(server.model_spec, folder / "ref.db", "ref", folder / "ref")))
    if rc != 0:
        raise RuntimeError(f"the reference run failed (rc {rc}): {err[-1500:]}")
    return Reference(server.requests - before, len(episode_ids(folder / "ref.db", "ref")))


def interrupt_and_rerun(server: FakeOpenAIServer, folder: Path, kind: str, at: int, reference: Reference,
                        thread: str = "run") -> Outcome:
    """Send ``kind`` (a key of `SIGNALS`) after ``at`` answered requests, rerun, count the damage."""
    db = folder / f"{thread}.db"
    before = server.requests
    command = learn_command(server.model_spec, db, thread, folder / thread)
    proc = start(as_pid1(command) if kind.endswith("PID 1") else command)
    wait_for_requests(server, before + at, proc)
    target = namespace_init(proc) if kind.endswith("PID 1") else proc.pid
    os.kill(target, SIGNALS[kind])
    first_rc, _, first_err = finished(proc)
    stale = lease_pid(db, thread)
    try:
        kept = episode_ids(db, thread)
    except sqlite3.OperationalError:  # stopped before its first episode: no table yet
        kept = []
    rc, out, err = finished(start(learn_command(server.model_spec, db, thread, folder / thread)))
    ids = episode_ids(db, thread)
    report = (folder / thread / "report.md").read_text(encoding="utf-8") if (folder / thread / "report.md").exists() \
        else ""
    return Outcome(kind, 1, rc == 0 and "(no evaluations recorded)" not in report and bool(report),
                   lost=reference.episodes - len(set(ids)), duplicated=sum(n - 1 for n in Counter(ids).values()),
                   extra_calls=server.requests - before - reference.calls,
                   notes={"first_rc": first_rc, "first_err": first_err[-600:], "rc": rc, "err": err,
                          "stdout": out, "stale_lease_pid": stale, "killed_pid": proc.pid, "kept": kept,
                          "stored": ids})


def two_processes(server: FakeOpenAIServer, folder: Path, reference: Reference, latency: float,
                  thread: str = "twin", hold: float = 5.0) -> Outcome:
    """Start a second process on a thread the first is running; it must refuse at once.

    While the second starts, each model request takes ``hold`` seconds, so the first is surely
    still running; then the server's ``latency`` is restored.
    """
    db = folder / f"{thread}.db"
    before = server.requests
    first = start(learn_command(server.model_spec, db, thread, folder / thread))
    wait_for_requests(server, before + 1, first)
    server.configure(latency=hold)
    try:
        second = start(learn_command(server.model_spec, db, thread, folder / f"{thread}-2"))
        second_rc, _, second_err = finished(second)
    finally:
        server.configure(latency=latency)
    rc, _, err = finished(first)
    ids = episode_ids(db, thread)
    return Outcome("two processes", 1, rc == 0, lost=reference.episodes - len(set(ids)),
                   duplicated=sum(n - 1 for n in Counter(ids).values()),
                   extra_calls=server.requests - before - reference.calls,
                   notes={"second_rc": second_rc, "second_err": second_err, "first_pid": first.pid, "rc": rc,
                          "err": err[-1500:], "second_out_written": (folder / f"{thread}-2").exists()})


def seller(seen: Counter[str]) -> Any:
    """Script the act step: the first sample at a state sells inside the zone, the second below it (DPO pairs).

    The server calls it on its request threads, a task's samples at once: the first-time check and its count
    hold a lock, or both samples could see the state unseen and make no pair.
    """
    lock = threading.Lock()

    def act(prompt: str, body: dict[str, Any]) -> dict[str, Any]:
        with lock:
            first = seen[prompt] == 0
            seen[prompt] += 1
        low = re.search(r"Your minimum price is \$(\d+)", prompt)
        said = (f"I can sell it for ${int(low.group(1)) + (1 if first else -100)}. ACCEPT" if low
                else "ACCEPT" if "Your limit is $" in prompt else "Let us talk it over.")
        return {"action_type": "speak", "argument": said, "to": []}

    return act


def trained_plan(model: Path, server: FakeOpenAIServer) -> list[str]:
    """``swm learn`` options that train a DPO adapter a cycle on ``model``, served by the server's runtime LoRA."""
    return ["--update", "dpo", "--hf-model", str(model), "--lora-server", server.base_url, "--verify-served",
            "identity", "--gate-alpha", "0", "--train-steps", "1", "--train-batch-size", "2"]


def out_folder_lost(folder: Path, db: str, backend: str, latency: float) -> Outcome:
    """Stop a DPO run (SIGTERM) in cycle 2, delete its ``--out``, resume from another folder; count the damage.

    Cycle 2 plays under p1, whose adapter existed only in the deleted folder before adapters were
    kept in the run's store; on PostgreSQL the rerun's folder stands in for another machine.
    """

    model = folder / "tiny-llama"
    if not (model / "config.json").is_file():
        make_tiny_llama(model)
    work = Path(tempfile.mkdtemp(prefix=f"out-{backend}-", dir=folder))
    seen: Counter[str] = Counter()
    with FakeOpenAIServer(latency=latency, lora=True, scripts={"AgentActionForModel": seller(seen)}) as server:
        plan = trained_plan(model, server)
        rc, _, err = finished(start([*learn_command(server.model_spec, "ref.db", "ref", work / "ref"), *plan],
                                    cwd=work), timeout=900)
        if rc != 0:
            raise RuntimeError(f"the reference run failed (rc {rc}): {err[-1500:]}")
        reference = Reference(server.requests, len(store_episode_ids(str(work / "ref.db"), "ref")))
        seen.clear()  # the same replies again
        before = server.requests
        first_out, second = work / "first" / "out", work / "second"
        second.mkdir()
        proc = start([*learn_command(server.model_spec, db, "lost", first_out), *plan], cwd=work)
        deadline = time.monotonic() + 900
        while not store_episode_ids(db, "lost", "cycle = 2 and phase = 'collect'"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"swm learn never reached cycle 2: {proc.communicate()[1][-1500:]}")
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        first_rc, _, first_err = finished(proc)
        shutil.rmtree(first_out)
        rc, out, err = finished(start([*learn_command(server.model_spec, db, "lost", Path("out")), *plan],
                                      cwd=second), timeout=900)
        ids = store_episode_ids(db, "lost")
    return Outcome(f"--out deleted in cycle 2 ({backend})", 1, rc == 0, lost=reference.episodes - len(set(ids)),
                   duplicated=sum(n - 1 for n in Counter(ids).values()),
                   extra_calls=server.requests - before - reference.calls,
                   notes={"first_rc": first_rc, "first_err": first_err[-600:], "rc": rc, "err": err[-1500:],
                          "stdout": out})


def store_episode_ids(db: str, thread: str, where: str = "1 = 1") -> list[str]:
    """Return the thread's stored episode ids on either backend (those matching ``where``)."""

    store = open_store(db)
    try:
        return [r["episode_id"] for r in store.rows(f"select episode_id from lifelong_episodes where run_id = ? "
                                                    f"and {where}", [thread])] \
            if store.has_table("lifelong_episodes") else []
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interrupts of each kind (at different requests)")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per fake model request")
    parser.add_argument("--dir", type=Path, default=Path("bench-interrupts"))
    parser.add_argument("--cases", default="signals", help="comma list of signals (the signals and two "
                        "processes) and out (--out deleted under a trained run; needs the [train] extra)")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="PostgreSQL server for the out case's second backend ('' to skip it)")
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args()
    with results_page("interrupts", "Interrupts", "bench.interrupts", enabled=not args.no_page):
        measure_interrupts(args)


def measure_interrupts(args: argparse.Namespace) -> None:
    """Interrupt ``swm learn`` runs as the cases ask, rerun each, and print what was lost, duplicated, paid twice."""
    args.dir = args.dir.resolve()
    args.dir.mkdir(parents=True, exist_ok=True)
    cases = {c.strip() for c in args.cases.split(",")}
    if "out" in cases:
        lost = [out_folder_lost(args.dir, str(args.dir / f"lost-{uuid.uuid4().hex[:8]}.db"), "SQLite", args.latency)]
        if args.pg:
            with pg_schema(args.pg) as url:
                lost.append(out_folder_lost(args.dir, url, "PostgreSQL", args.latency))
        for o in lost:
            print(f"{o.case}: first run exit {o.notes['first_rc']}, rerun exit {o.notes['rc']}, completed "
                  f"{o.completed}, lost {o.lost}, duplicated {o.duplicated}, extra calls {o.extra_calls}"
                  + ("" if o.completed else f"; rerun said: {o.notes['err'][-400:]}"))
    if "signals" not in cases:
        return
    outcomes: list[Outcome] = []
    with FakeOpenAIServer(latency=args.latency) as server:
        reference = reference_run(server, args.dir)
        for kind in SIGNALS:
            for i in range(args.rounds):
                at = 3 + i * max(1, (reference.calls - 6) // max(1, args.rounds))
                thread = f"{kind.lower().replace(' ', '-')}-{i}"
                outcomes.append(interrupt_and_rerun(server, args.dir, kind, at, reference, thread))
        for i in range(args.rounds):
            outcomes.append(two_processes(server, args.dir, reference, args.latency, f"twin-{i}"))
    print(f"uninterrupted run: {reference.calls} model calls, {reference.episodes} episodes")
    print(f"{'case':<18} {'interrupts':>10} {'completed':>9} {'lost':>5} {'duplicated':>10} {'extra calls':>11}")
    for case in (*SIGNALS, "two processes"):
        rows = [o for o in outcomes if o.case == case]
        print(f"{case:<18} {sum(o.interrupts for o in rows):>10} {sum(o.completed for o in rows):>9} "
              f"{sum(o.lost for o in rows):>5} {sum(o.duplicated for o in rows):>10} "
              f"{sum(o.extra_calls for o in rows):>11}")


if __name__ == "__main__":
    main()
