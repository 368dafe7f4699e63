"""The per-thread lease: one holder, a one-line refusal naming it, stale leases taken over, only our own released."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpoints import LeaseHeld, hold_lease
from checkpoints.lease import STALE_S, TABLE, _open, acquire, current, release


def plant(db: str | Path, thread: str, pid: int, host: str, renewed: float) -> None:
    conn = _open(db)
    current(conn, thread)  # creates the table
    with conn:
        conn.execute(f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)",
                     (thread, pid, host, renewed - 5, renewed, "theirs"))
    conn.close()


def dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(proc.stdout)


def test_a_held_thread_is_refused_naming_the_holder(db_target: str | Path) -> None:
    db = db_target
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import socket

        plant(db, "t", holder.pid, socket.gethostname(), time.time())
        with pytest.raises(LeaseHeld, match=rf"thread t is already running \(pid {holder.pid} on .*, started 20"):
            with hold_lease(db, "t"):
                pass
    finally:
        holder.kill()
        holder.wait()
    with hold_lease(db, "t") as lease:  # its holder is gone now: taken over
        assert lease.pid != holder.pid
    conn = _open(db)
    assert current(conn, "t") is None, "released on exit"
    conn.close()


def test_the_same_process_cannot_take_a_thread_twice(tmp_path: Path) -> None:
    with hold_lease(tmp_path / "l.db", "t"):
        with pytest.raises(LeaseHeld, match="already running in this process"):
            with hold_lease(tmp_path / "l.db", "t"):
                pass
        with hold_lease(tmp_path / "l.db", "other"):  # another thread is free
            pass


def test_stale_leases_are_taken_over(db_target: str | Path) -> None:
    import os
    import socket

    db = db_target
    plant(db, "here", dead_pid(), socket.gethostname(), time.time())
    plant(db, "my-pid", os.getpid(), socket.gethostname(), time.time())  # left by a former process with this pid
    plant(db, "away-old", 1, "another-host", time.time() - STALE_S - 1)
    plant(db, "away-live", 1, "another-host", time.time())
    conn = _open(db)
    for thread in ("here", "my-pid", "away-old"):
        lease, previous = acquire(conn, thread)
        assert previous is not None and previous.token == "theirs" and lease.token != previous.token
    with pytest.raises(LeaseHeld, match="pid 1 on another-host"):
        acquire(conn, "away-live")
    conn.close()


def test_release_leaves_a_lease_taken_over_since_alone(db_target: str | Path) -> None:
    db = db_target
    conn = _open(db)
    lease, _ = acquire(conn, "t")
    plant(db, "t", 1, "another-host", time.time())  # someone took it over meanwhile
    release(conn, lease)
    assert current(conn, "t") is not None and current(conn, "t").token == "theirs"  # type: ignore[union-attr]
    conn.close()
