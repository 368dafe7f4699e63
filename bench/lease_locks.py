"""``python -m bench.lease_locks``: would PostgreSQL advisory locks and `filelock` keep the lease's guarantees?

`swm.checkpoints.lease` holds a row per thread in the run's database, renewed from a thread; the
question (docs/checkpoints.md, "Why the lease is a row") is whether a lock the server or the kernel
holds for us could replace it. Measured here, side by side, on the same database:

* **PostgreSQL, a session advisory lock** (``pg_try_advisory_lock`` on the run's connection): how long
  after the server drops the holder's session (a restart, a failover, an idle timeout:
  ``pg_terminate_backend`` here) a second process takes the thread, while the first process still runs;
  and the same drop under the lease row (the second process is refused, the first renews on a fresh
  connection);
* **SQLite, `filelock`** beside the database file: refusal, takeover after the holder is killed, and what
  the lock file tells the refused process about its holder.

    python -m bench.lease_locks [--pg postgresql://postgres@127.0.0.1:5432/test] [--no-page]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from filelock import FileLock, Timeout

from bench.results import results_page
from swm.checkpoints import lease as lease_module
from swm.checkpoints.lease import LeaseHeld, hold_lease

PG = os.environ.get("SWM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
KEY = 4_824_801  # the advisory lock's key (a thread id hashed to a bigint, in a real implementation)


def _until(condition: object, seconds: float = 10.0) -> float:
    """Poll ``condition()`` every 2 ms; return the seconds it took to hold (``inf`` if it never did)."""
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        if condition():  # type: ignore[operator]
            return time.perf_counter() - start
        time.sleep(0.002)
    return float("inf")


def advisory_after_drop(url: str) -> dict[str, float | bool]:
    """A holds the advisory lock; the server drops A's session; when does B get it?"""
    import psycopg

    a, b = psycopg.connect(url, autocommit=True), psycopg.connect(url, autocommit=True)
    held = bool(a.execute("select pg_try_advisory_lock(%s)", [KEY]).fetchone()[0])  # type: ignore[index]
    refused = not b.execute("select pg_try_advisory_lock(%s)", [KEY]).fetchone()[0]  # type: ignore[index]
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("select pg_terminate_backend(%s)", [a.info.backend_pid])
    took = _until(lambda: bool(b.execute("select pg_try_advisory_lock(%s)", [KEY]).fetchone()[0]))  # type: ignore[index]
    b.execute("select pg_advisory_unlock_all()")
    b.close()
    return {"A held": held, "B refused while A held": refused, "B took it after the drop": took}


def lease_row_after_drop(url: str) -> dict[str, float | bool]:
    """The same drop under the lease row: the holder's connection is terminated; is B refused?"""
    import psycopg

    schema = f"swm_b{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"create schema {schema}")  # type: ignore[arg-type]
    scoped = f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
    opened: list[object] = []
    real_open = lease_module._open

    def recording(path: object, setup: bool = True) -> object:
        conn = real_open(path, setup)  # type: ignore[arg-type]
        opened.append(conn)
        return conn

    lease_module._open = recording  # type: ignore[assignment]
    refused = False
    try:
        with hold_lease(scoped, "t"):
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("select pg_terminate_backend(%s)", [opened[0].conn.info.backend_pid])  # type: ignore[attr-defined]
            try:
                other = subprocess.run([sys.executable, "-c", "from swm.checkpoints import hold_lease\n"
                                        f"with hold_lease({scoped!r}, 't'): pass"], capture_output=True, text=True)
                refused = other.returncode != 0 and "already running" in other.stderr
            except LeaseHeld:
                refused = True
    finally:
        lease_module._open = real_open  # type: ignore[assignment]
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"drop schema {schema} cascade")  # type: ignore[arg-type]
    return {"B refused after the holder's connection was dropped": refused}


HOLDER = """
import sys, time
from filelock import FileLock
lock = FileLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(60)
"""


def filelock_sqlite() -> dict[str, float | bool | int]:
    """A process holds a FileLock beside the database; B is refused; A is killed; when does B get it?"""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.db.lock"
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        lock = FileLock(str(path), timeout=0)
        try:
            lock.acquire()
            refused = False
            lock.release()
        except Timeout:
            refused = True
        said = path.stat().st_size  # what the refused process can read about its holder
        holder.kill()
        holder.wait()

        def takes() -> bool:
            try:
                lock.acquire()
                return True
            except Timeout:
                return False

        took = _until(takes)
        lock.release()
    return {"B refused while A held": refused, "bytes the lock file holds about its holder": said,
            "B took it after A was killed": took}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg", default=PG, help="a PostgreSQL server's URL (the tests' SWM_TEST_PG)")
    ap.add_argument("--no-page", action="store_true", help="print only; write no results page")
    args = ap.parse_args(argv)
    with results_page("lease-locks", "The lease: a row, or a lock the server or the kernel holds?", "bench.lease_locks",
                      argv, enabled=not args.no_page, markdown=True):
        print("| backend | mechanism | measured | value |\n|---|---|---|---|")
        for backend, mechanism, found in (("PostgreSQL", "session advisory lock", advisory_after_drop(args.pg)),
                                          ("PostgreSQL", "lease row (swm today)", lease_row_after_drop(args.pg)),
                                          ("SQLite", "filelock beside the file", filelock_sqlite())):
            for what, value in found.items():
                shown = f"{value * 1000:.1f} ms" if isinstance(value, float) else str(value)
                print(f"| {backend} | {mechanism} | {what} | {shown} |")


if __name__ == "__main__":
    main()
