"""One process per thread: an exclusive lease, held in the database beside the thread's checkpoints.

Two processes resuming the same thread would both run everything (double the spend, a forked
checkpoint history). `hold_lease` takes the thread's row in ``swm_leases`` inside a write
transaction, so exactly one process wins; the other gets `LeaseHeld`, naming the holder (pid,
host, start time). A lease whose holder is gone is taken over. A holder is named by what no two
machines or containers share by accident: the kernel's boot id and PID-namespace inode (its
*node*) and the process's start time. On the same node the pid and start time are checked (a
pid reused by a later process is not the holder); a holder on another node — another machine,
or a container on this one with its own PID namespace, whatever its hostname — renews its lease
every ``RENEW_S`` seconds and counts as gone when it has not for ``STALE_S``.

Each renewal opens its own connection, so a dropped connection costs one renewal, not the
lease. When renewals keep failing for ``STALE_S / 2``, or the row shows another holder, the run
is stopped at once (as Ctrl-C stops it: finished steps are checkpointed) with `LeaseLost`,
before another process could take the thread and pay for its calls a second time. The stop is
raised in the thread that holds the lease itself, not sent as SIGINT: a run started in the
background by a script (``swm learn … &``) has SIGINT ignored, and a simulated Ctrl-C would do nothing. Releasing
the lease never hides the run's own error. A second backend implements `acquire` and `release`
with the same meaning: on PostgreSQL the same statements run through `_PostgresLeaseConnection`,
where ``BEGIN IMMEDIATE`` becomes a transaction holding an exclusive lock on the lease table.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from swm.checkpoints.postgres import advisory_lock, is_postgres
from swm.checkpoints.savers import connect
from swm.checkpoints.writable import DatabaseNotWritable
from swm.errors import SWMError

TABLE = "swm_leases"
RENEW_S = 30.0
STALE_S = 120.0
_ours: set[str] = set()  # tokens of the leases this process holds (a pid alone may be reused after a restart)


class LeaseHeld(SWMError):
    """Another live process runs this thread."""

    exit_code = 5


class LeaseLost(SWMError):
    """This process could no longer prove it holds the thread, so it stopped (finished steps are kept)."""

    exit_code = 5


_COLUMNS = ("thread_id", "pid", "host", "started", "renewed", "token", "node", "pid_start")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return None


def this_node() -> str:
    """Return what identifies this process table: the boot id and the PID namespace (hostname elsewhere)."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = None
    return f"{boot}/{namespace}" if boot and namespace else f"host:{socket.gethostname()}"


def process_start(pid: int) -> int | None:
    """Return when process ``pid`` started (clock ticks since boot), None when it does not exist or is unknown."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the name in parentheses may hold spaces
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Lease:
    """Who holds a thread: process id, host, when it started, when it last renewed."""

    thread_id: str
    pid: int
    host: str
    started: float
    renewed: float
    token: str
    node: str | None = None  # this_node() of the holder (None: a lease written before nodes were recorded)
    pid_start: int | None = None  # process_start(pid) of the holder

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.started, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"pid {self.pid} on {self.host}, started {since}"


class _PostgresLeaseConnection:
    """The subset of ``sqlite3.Connection`` the lease functions use, on a PostgreSQL database."""

    def __init__(self, url: str, wait: bool = True) -> None:
        """Connect with every wait bounded (`swm.checkpoints.postgres_connect`); ``wait``: for ``SWM_POSTGRES_WAIT``
        while the server does not answer (a renewal tries once: its watchdog counts the failures)."""
        import psycopg  # optional: the [postgres] extra

        from swm.checkpoints.postgres_connect import BoundedConnection, connect_waiting

        self.conn = connect_waiting(url, autocommit=True) if wait else BoundedConnection.connect(url, autocommit=True)
        self.errors: tuple[type[BaseException], ...] = (psycopg.Error,)

    def execute(self, sql: str, params: Any = ()) -> Any:
        if sql == "BEGIN IMMEDIATE":  # SQLite's write lock up front; here: the lease table, exclusively
            self.conn.execute("BEGIN")
            return self.conn.execute(f"LOCK TABLE {TABLE} IN EXCLUSIVE MODE")  # type: ignore[arg-type]
        if sql.startswith(f"INSERT OR REPLACE INTO {TABLE} "):
            sql = (sql.replace("INSERT OR REPLACE", "INSERT") + " ON CONFLICT (thread_id) DO UPDATE SET "
                   + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS[1:]))
        sql = sql.replace("INTEGER", "BIGINT").replace("REAL", "DOUBLE PRECISION")
        return self.conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]

    def commit(self) -> None:
        self.conn.execute("COMMIT")

    def rollback(self) -> None:
        if self.conn.info.transaction_status != 0:  # not idle: a transaction is open
            self.conn.execute("ROLLBACK")

    def __enter__(self) -> _PostgresLeaseConnection:
        self.conn.execute("BEGIN")
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        self.rollback() if kind else self.commit()

    def close(self) -> None:
        self.conn.close()

    def columns(self) -> set[str]:
        rows = self.conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                                 "AND table_schema = current_schema()", (TABLE,)).fetchall()
        return {r[0] for r in rows}


def _open(path: str | Path, setup: bool = True) -> Any:
    if is_postgres(path):
        pg = _PostgresLeaseConnection(str(path), wait=setup)
        if setup:
            with advisory_lock(pg.conn, "lease-ddl"):
                _ensure_table(pg)
        return pg
    return connect(path)


def _ensure_table(conn: Any) -> None:
    conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (thread_id TEXT PRIMARY KEY, pid INTEGER, host TEXT, "
                 "started REAL, renewed REAL, token TEXT, node TEXT, pid_start INTEGER)")
    have = conn.columns() if hasattr(conn, "columns") else {
        row[1] for row in conn.execute(f"PRAGMA table_info({TABLE})").fetchall()}
    for column, kind in (("node", "TEXT"), ("pid_start", "INTEGER")):  # a table made by an older swm
        if column not in have:
            conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN {column} {kind}")


def holder_alive(lease: Lease, now: float | None = None) -> bool:
    """Tell whether the lease's holder may still be running.

    On this node (same boot, same PID namespace) the pid must exist and have started when the
    lease says; elsewhere, or for a lease that names no node, the lease must have been renewed
    within ``STALE_S``: a shared hostname says nothing about a shared process table.
    """
    if lease.node is None or lease.node != this_node():
        return (now or time.time()) - lease.renewed < STALE_S
    if lease.pid == os.getpid():
        return lease.token in _ours  # our pid, but not our lease: a former process that had this pid
    started = process_start(lease.pid)
    if started is None:
        try:
            os.kill(lease.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # a live process of another user, on a system without /proc
        return True
    return lease.pid_start is None or started == lease.pid_start


def acquire(conn: Any, thread_id: str) -> tuple[Lease, Lease | None]:
    """Take the thread's lease; return it and the stale lease it replaced (None when free).

    Raises `LeaseHeld` when a live process holds it.
    """
    _ensure_table(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM {TABLE} WHERE thread_id = ?", (thread_id,)).fetchone()
        previous = Lease(*row) if row else None
        if previous is not None and previous.token in _ours:
            raise LeaseHeld(f"thread {thread_id} is already running in this process", "use another --thread-id")
        if previous is not None and holder_alive(previous):
            raise LeaseHeld(f"thread {thread_id} is already running ({previous.describe()})",
                            "wait for it to finish or stop it; a lease of a process that died is taken over")
        now = time.time()
        lease = Lease(thread_id, os.getpid(), socket.gethostname(), now, now, uuid.uuid4().hex, this_node(),
                      process_start(os.getpid()))
        conn.execute(f"INSERT OR REPLACE INTO {TABLE} ({', '.join(_COLUMNS)}) "
                     f"VALUES ({', '.join('?' * len(_COLUMNS))})", tuple(getattr(lease, c) for c in _COLUMNS))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    _ours.add(lease.token)
    return lease, previous


def renew(conn: Any, lease: Lease) -> bool:
    """Mark the lease as still held (for holders on other nodes, who cannot check the pid).

    Returns False when the row is no longer ours (another process took the thread over).
    """
    with conn:
        cursor = conn.execute(f"UPDATE {TABLE} SET renewed = ? WHERE thread_id = ? AND token = ?",
                              (time.time(), lease.thread_id, lease.token))
        return bool(cursor.rowcount)


def release(conn: Any, lease: Lease) -> None:
    """Give the lease back (only our own: a lease taken over since is left alone)."""
    _ours.discard(lease.token)
    with conn:
        conn.execute(f"DELETE FROM {TABLE} WHERE thread_id = ? AND token = ?", (lease.thread_id, lease.token))


def current(conn: Any, thread_id: str) -> Lease | None:
    """Return the thread's lease row, if any (held or stale)."""
    _ensure_table(conn)
    row = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM {TABLE} WHERE thread_id = ?", (thread_id,)).fetchone()
    return Lease(*row) if row else None


def _renew_fresh(path: str | Path, lease: Lease) -> bool:
    """Renew on a connection of its own (a dropped one must not cost the lease); see `renew`."""
    conn = _open(path, setup=False)
    try:
        return renew(conn, lease)
    finally:
        conn.close()


def _interrupt(thread_id: int) -> None:
    """Raise KeyboardInterrupt in the thread ``thread_id`` at its next Python step: Ctrl-C's effect there.

    `_thread.interrupt_main` simulates SIGINT instead, which does nothing where SIGINT is ignored (a job a
    non-interactive shell started with ``&``), and reaches only the main thread.
    """
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(KeyboardInterrupt))


class _Renewer(threading.Thread):
    """Renew the lease every ``RENEW_S``; when that is no longer possible, stop the run of the thread holding it."""

    def __init__(self, path: str | Path, lease: Lease) -> None:
        super().__init__(name=f"lease-{lease.thread_id}", daemon=True)
        self.path, self.lease = path, lease
        self.holder = threading.get_ident()  # the thread that runs the block
        self.stop = threading.Event()
        self.stopping = threading.Lock()  # once the block has ended (stop set), it is never interrupted
        self.lost: str | None = None

    def run(self) -> None:
        last = time.time()
        while not self.stop.wait(RENEW_S):
            try:
                if _renew_fresh(self.path, self.lease):
                    last = time.time()
                    continue
                self.lost = "another process took the thread over"
            except DatabaseNotWritable:  # the run itself stops on it at its next write; the lease stays as it is
                continue
            except Exception as exc:  # noqa: BLE001 - any failure to reach the database: retried until too late
                if time.time() - last < STALE_S / 2:
                    continue
                self.lost = (f"the lease could not be renewed for {time.time() - last:.0f} s "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]})")
            with self.stopping:
                if not self.stop.is_set():
                    _interrupt(self.holder)  # stops the run as Ctrl-C does: finished steps are checkpointed
            return


def _frozen(path: str | Path, exc: BaseException) -> bool:
    """Whether ``exc`` is a PostgreSQL server's silence past its bound (`swm.checkpoints.postgres_connect.NoAnswer`)."""
    if not is_postgres(path):
        return False
    from swm.checkpoints.postgres_connect import NoAnswer  # optional: the [postgres] extra (it imports psycopg)

    return isinstance(exc, NoAnswer)


def _release_quietly(conn: object, path: str | Path, lease: Lease, failing: bool = False) -> None:
    """Release the lease, on a fresh connection if ours broke; a failure is a warning (the lease then goes stale),
    unless the block is ``failing`` already: its own one line says what broke."""
    try:
        release(conn, lease)
        return
    except Exception as exc:  # noqa: BLE001 - the connection may be the thing that broke: try a fresh one
        if _frozen(path, exc):  # a frozen server: a fresh connection would wait its bound for nothing
            if not failing:
                logging.getLogger("swm").warning("could not release the lease on thread %s (%s); it is taken over "
                                                 "once it goes stale", lease.thread_id, exc)
            return
    try:
        fresh = _open(path, setup=False)
        try:
            release(fresh, lease)
        finally:
            fresh.close()
    except DatabaseNotWritable:  # the run's own error says so; a holder whose process ended is taken over at once
        pass
    except Exception as exc:  # noqa: BLE001 - never replace the run's own outcome with this
        if failing:
            return
        logging.getLogger("swm").warning("could not release the lease on thread %s (%s: %s); it is taken over "
                                         "once it goes stale", lease.thread_id, type(exc).__name__, exc)


@contextmanager
def hold_lease(path: str | Path, thread_id: str) -> Iterator[Lease]:
    """Hold the thread's lease on the database at ``path`` while the block runs.

    Raises `LeaseLost` in the block when the lease can no longer be renewed (see the module
    docstring); the block is interrupted as by Ctrl-C, so what it checkpointed is kept.
    """
    conn = _open(path)
    try:
        lease, _ = acquire(conn, thread_id)
        renewer = _Renewer(path, lease)
        renewer.start()
        failing = True
        try:
            yield lease
            failing = False
        except KeyboardInterrupt:
            if renewer.lost is None:
                raise
            raise LeaseLost(f"thread {thread_id} stopped: {renewer.lost}",
                            "finished steps are checkpointed; check the database, then rerun with the same "
                            "--db and --thread-id to resume") from None
        finally:
            with renewer.stopping:
                renewer.stop.set()
            renewer.join(5)
            _release_quietly(conn, path, lease, failing)
    finally:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - a broken connection is closed already
            pass
