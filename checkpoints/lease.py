"""One process per thread: an exclusive lease, held in the database beside the thread's checkpoints.

Two processes resuming the same thread would both run everything (double the spend, a forked
checkpoint history). `hold_lease` takes the thread's row in ``swm_leases`` inside a write
transaction, so exactly one process wins; the other gets `LeaseHeld`, naming the holder (pid,
host, start time). A lease whose holder is gone is taken over: on the same host the pid is
checked; a holder on another host renews its lease every ``RENEW_S`` seconds and counts as gone
when it has not for ``STALE_S``. A second backend implements `acquire` and `release` with the
same meaning: on PostgreSQL the same statements run through `_PostgresLeaseConnection`, where
``BEGIN IMMEDIATE`` becomes a transaction holding an exclusive lock on the lease table.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from checkpoints.savers import connect
from swm.errors import SWMError

TABLE = "swm_leases"
RENEW_S = 30.0
STALE_S = 120.0
_ours: set[str] = set()  # tokens of the leases this process holds (a pid alone may be reused after a restart)


class LeaseHeld(SWMError):
    """Another live process runs this thread."""

    exit_code = 5


@dataclass(frozen=True)
class Lease:
    """Who holds a thread: process id, host, when it started, when it last renewed."""

    thread_id: str
    pid: int
    host: str
    started: float
    renewed: float
    token: str

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.started, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"pid {self.pid} on {self.host}, started {since}"


class _PostgresLeaseConnection:
    """The subset of ``sqlite3.Connection`` the lease functions use, on a PostgreSQL database."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.errors: tuple[type[BaseException], ...] = (psycopg.Error,)

    def execute(self, sql: str, params: Any = ()) -> Any:
        if sql == "BEGIN IMMEDIATE":  # SQLite's write lock up front; here: the lease table, exclusively
            self.conn.execute("BEGIN")
            return self.conn.execute(f"LOCK TABLE {TABLE} IN EXCLUSIVE MODE")  # type: ignore[arg-type]
        if sql.startswith(f"INSERT OR REPLACE INTO {TABLE} "):
            sql = (sql.replace("INSERT OR REPLACE", "INSERT") + " ON CONFLICT (thread_id) DO UPDATE SET pid = "
                   "excluded.pid, host = excluded.host, started = excluded.started, renewed = excluded.renewed, "
                   "token = excluded.token")
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


def _open(path: str | Path) -> Any:
    from checkpoints.postgres import advisory_lock, is_postgres

    if is_postgres(path):
        pg = _PostgresLeaseConnection(str(path))
        with advisory_lock(pg.conn, "lease-ddl"):
            _ensure_table(pg)
        return pg
    return connect(path)


def _ensure_table(conn: Any) -> None:
    conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (thread_id TEXT PRIMARY KEY, pid INTEGER, host TEXT, "
                 "started REAL, renewed REAL, token TEXT)")


def holder_alive(lease: Lease, now: float | None = None) -> bool:
    """Tell whether the lease's holder may still be running."""
    if lease.host == socket.gethostname() and lease.pid == os.getpid():
        return lease.token in _ours  # our pid, but not our lease: a former process that had this pid
    if lease.host == socket.gethostname():
        try:
            os.kill(lease.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # a live process of another user
        return True
    return (now or time.time()) - lease.renewed < STALE_S


def acquire(conn: Any, thread_id: str) -> tuple[Lease, Lease | None]:
    """Take the thread's lease; return it and the stale lease it replaced (None when free).

    Raises `LeaseHeld` when a live process holds it.
    """
    _ensure_table(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(f"SELECT thread_id, pid, host, started, renewed, token FROM {TABLE} WHERE thread_id = ?",
                           (thread_id,)).fetchone()
        previous = Lease(*row) if row else None
        if previous is not None and previous.token in _ours:
            raise LeaseHeld(f"thread {thread_id} is already running in this process", "use another --thread-id")
        if previous is not None and holder_alive(previous):
            raise LeaseHeld(f"thread {thread_id} is already running ({previous.describe()})",
                            "wait for it to finish or stop it; a lease of a process that died is taken over")
        now = time.time()
        lease = Lease(thread_id, os.getpid(), socket.gethostname(), now, now, uuid.uuid4().hex)
        conn.execute(f"INSERT OR REPLACE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)",
                     (lease.thread_id, lease.pid, lease.host, lease.started, lease.renewed, lease.token))
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    _ours.add(lease.token)
    return lease, previous


def renew(conn: Any, lease: Lease) -> None:
    """Mark the lease as still held (for holders on other hosts, who cannot check the pid)."""
    with conn:
        conn.execute(f"UPDATE {TABLE} SET renewed = ? WHERE thread_id = ? AND token = ?",
                     (time.time(), lease.thread_id, lease.token))


def release(conn: Any, lease: Lease) -> None:
    """Give the lease back (only our own: a lease taken over since is left alone)."""
    _ours.discard(lease.token)
    with conn:
        conn.execute(f"DELETE FROM {TABLE} WHERE thread_id = ? AND token = ?", (lease.thread_id, lease.token))


def current(conn: Any, thread_id: str) -> Lease | None:
    """Return the thread's lease row, if any (held or stale)."""
    _ensure_table(conn)
    row = conn.execute(f"SELECT thread_id, pid, host, started, renewed, token FROM {TABLE} WHERE thread_id = ?",
                       (thread_id,)).fetchone()
    return Lease(*row) if row else None


@contextmanager
def hold_lease(path: str | Path, thread_id: str) -> Iterator[Lease]:
    """Hold the thread's lease on the database at ``path`` while the block runs."""
    conn = _open(path)
    stop = threading.Event()
    try:
        lease, _ = acquire(conn, thread_id)

        def keep_renewing() -> None:
            while not stop.wait(RENEW_S):
                try:
                    renew(conn, lease)
                except (sqlite3.Error, *getattr(conn, "errors", ())):
                    pass  # a busy file: the next renewal tries again, well inside STALE_S

        renewer = threading.Thread(target=keep_renewing, name=f"lease-{thread_id}", daemon=True)
        renewer.start()
        try:
            yield lease
        finally:
            stop.set()
            renewer.join(5)
            release(conn, lease)
    finally:
        conn.close()
