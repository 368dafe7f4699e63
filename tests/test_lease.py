"""The per-thread lease: one holder, a one-line refusal naming it, stale leases taken over, only our own released."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from swm.checkpoints import LeaseHeld, LeaseLost, hold_lease
from swm.checkpoints.lease import _COLUMNS, STALE_S, TABLE, _open, acquire, current, process_start, release, this_node

pytestmark = pytest.mark.under_load  # renewals and stops are timing: checked on a busy machine


def plant(db: str | Path, thread: str, pid: int, host: str, renewed: float, node: str | None = "here",
          pid_start: int | None = None) -> None:
    """Write a lease row as another process would; ``node="here"``: this machine and PID namespace."""
    conn = _open(db)
    current(conn, thread)  # creates the table
    node = this_node() if node == "here" else node
    with conn:
        conn.execute(f"INSERT OR REPLACE INTO {TABLE} ({', '.join(_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (thread, pid, host, renewed - 5, renewed, "theirs", node, pid_start))
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
    plant(db, "away-old", 1, "another-host", time.time() - STALE_S - 1, node="other-boot/1")
    plant(db, "away-live", 1, "another-host", time.time(), node="other-boot/1")
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
    plant(db, "t", 1, "another-host", time.time(), node="other-boot/1")  # someone took it over meanwhile
    release(conn, lease)
    assert current(conn, "t") is not None and current(conn, "t").token == "theirs"  # type: ignore[union-attr]
    conn.close()


def test_a_container_sharing_the_hostname_is_not_this_process_table(db_target: str | Path) -> None:
    """Host networking (or a second PID namespace) shares the hostname, not the pids: a live holder there
    renews its lease, so it is refused however dead its pid looks here; a stale one is taken over."""
    import socket

    db = db_target
    plant(db, "t", dead_pid(), socket.gethostname(), time.time(), node=f"{this_node().split('/')[0]}/4026531999")
    with pytest.raises(LeaseHeld, match=f"pid .* on {socket.gethostname()}"):
        with hold_lease(db, "t"):
            pass
    plant(db, "t", dead_pid(), socket.gethostname(), time.time() - STALE_S - 1, node="other-boot/1")
    with hold_lease(db, "t"):
        pass


def test_a_reused_pid_is_not_the_holder(db_target: str | Path) -> None:
    """On this node a holder is its pid *and* its start time: a later process with the pid does not hold it."""
    import socket

    db = db_target
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = process_start(holder.pid)
        assert started is not None
        plant(db, "t", holder.pid, socket.gethostname(), time.time(), pid_start=started)
        with pytest.raises(LeaseHeld):
            with hold_lease(db, "t"):
                pass
        plant(db, "t", holder.pid, socket.gethostname(), time.time(), pid_start=started - 1)  # pid reused since
        with hold_lease(db, "t"):
            pass
    finally:
        holder.kill()
        holder.wait()


QUICK_RENEW_S, QUICK_STALE_S = 0.1, 4.0


@pytest.fixture
def quick_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    """Renew every 100 ms and call a lease stale after 4 s, so renewal faults show in seconds.

    A run stops when renewals have failed for half of ``STALE_S`` (2 s here): the 2 s left before another
    process may take the thread over are the slack a busy machine needs to schedule the renewer.
    """
    from swm.checkpoints import lease as lease_module

    monkeypatch.setattr(lease_module, "RENEW_S", QUICK_RENEW_S)
    monkeypatch.setattr(lease_module, "STALE_S", QUICK_STALE_S)


def _wait_for_interrupt(thread: str = "t") -> None:
    """Block until the lease's renewer gives up; it stops this run (KeyboardInterrupt here) as it ends.

    The wait is on that event, the renewer thread's end, not on a clock: on a busy machine it may come late, and
    the bound (many times the stale time the renewer acts within) only keeps a broken renewer from hanging.
    """
    from swm.checkpoints import lease as lease_module

    renewer = next(t for t in threading.enumerate() if t.name == f"lease-{thread}")
    renewer.join(lease_module.STALE_S * 15)
    assert not renewer.is_alive(), "the lease renewer never gave up"
    for _ in range(100):  # the interrupt lands at this thread's next Python step
        time.sleep(0)
    raise AssertionError("the lease renewer ended without stopping the run")


def test_renewal_survives_a_terminated_connection(pg_url: str, quick_lease: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The server ends the lease's connection (restart, failover, idle timeout): renewals go on."""
    import psycopg

    from swm.checkpoints import lease as lease_module

    opened: list[object] = []
    real_open = lease_module._open

    def recording_open(path: object, setup: bool = True) -> object:
        conn = real_open(path, setup)  # type: ignore[arg-type]
        opened.append(conn)
        return conn

    renewed = threading.Event()  # the event waited on: a renewal that succeeded after the termination
    terminated: list[float] = []
    real_renew = lease_module._renew_fresh

    def recording_renew(path: object, lease: object) -> bool:
        ok = real_renew(path, lease)  # type: ignore[arg-type]
        if ok and terminated:
            renewed.set()
        return ok

    monkeypatch.setattr(lease_module, "_open", recording_open)
    monkeypatch.setattr(lease_module, "_renew_fresh", recording_renew)
    with hold_lease(pg_url, "t"):
        first = opened[0].conn.info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("select pg_terminate_backend(%s)", [first])
        terminated.append(time.time())
        # renewals every 0.1 s; the bound (the stale time, many times over) only keeps a broken renewer from hanging
        assert renewed.wait(lease_module.STALE_S * 15), "no renewal after the lease's connection was terminated"
        conn = real_open(pg_url)
        assert current(conn, "t").renewed > terminated[0]  # type: ignore[union-attr]
        conn.close()
    conn = real_open(pg_url)
    assert current(conn, "t") is None, "released on a fresh connection"
    conn.close()


def test_a_run_whose_lease_cannot_be_renewed_stops(db_target: str | Path, quick_lease: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    from swm.checkpoints import lease as lease_module

    def unreachable(path: object, lease: object) -> bool:
        raise sqlite3.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(lease_module, "_renew_fresh", unreachable)
    started = time.monotonic()
    with pytest.raises(LeaseLost, match=r"thread t stopped: the lease could not be renewed for \d+ s "
                                        r"\(OperationalError: server closed .*\) — finished steps are checkpointed"):
        with hold_lease(db_target, "t"):
            _wait_for_interrupt()
    assert time.monotonic() - started < QUICK_STALE_S, "stopped before the lease went stale (another may take it)"


def test_a_run_started_in_the_background_whose_lease_is_lost_stops(tmp_path: Path, quick_lease: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A script's ``swm learn … &`` runs with SIGINT ignored: the stop must not be a simulated Ctrl-C, which is then
    dropped (the run went on with its lease gone, and another process could take the thread and pay twice)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(LeaseLost, match="another process took the thread over"):
            with hold_lease(tmp_path / "bg.db", "t"):
                plant(tmp_path / "bg.db", "t", 1, "another-host", time.time(), node="other-boot/1")
                _wait_for_interrupt()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_lease_held_by_another_thread_stops_that_thread_not_the_main_one(tmp_path: Path,
                                                                          quick_lease: None) -> None:
    """A server's worker thread holds a run's lease: losing it stops that run, never the server's main thread."""
    caught: list[BaseException] = []

    def run() -> None:
        try:
            with hold_lease(tmp_path / "w.db", "w"):
                plant(tmp_path / "w.db", "w", 1, "another-host", time.time(), node="other-boot/1")
                _wait_for_interrupt("w")
        except BaseException as exc:  # noqa: BLE001 - the test reads what stopped the worker
            caught.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()  # the event: the worker's run ended (the main thread is never interrupted: this join returns)
    assert len(caught) == 1 and isinstance(caught[0], LeaseLost), caught


def test_a_run_whose_lease_was_taken_over_stops(db_target: str | Path, quick_lease: None) -> None:
    with pytest.raises(LeaseLost, match="another process took the thread over"):
        with hold_lease(db_target, "t"):
            plant(db_target, "t", 1, "another-host", time.time(), node="other-boot/1")
            _wait_for_interrupt()
    conn = _open(db_target)
    assert current(conn, "t").token == "theirs", "the new holder's lease is left alone"  # type: ignore[union-attr]
    conn.close()


def test_release_never_hides_the_runs_own_error(db_target: str | Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    from swm.checkpoints import lease as lease_module

    def broken(conn: object, lease: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(lease_module, "release", broken)
    with pytest.raises(ValueError, match="the run's own error"):
        with hold_lease(db_target, "t"):
            raise ValueError("the run's own error")
    with hold_lease(db_target, "u"):  # a successful run whose release fails still succeeds (a warning)
        pass
