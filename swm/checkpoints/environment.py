"""Faults of what a run stands on — its disk, its database, its workers — as one line with what to do.

`environment_fault` reads an exception (and its causes) raised by SQLite, PostgreSQL (psycopg),
the file system or Ray, and returns the `EnvironmentFault` to report instead of a traceback, or
None when it is none of these. Checkpoints are written before each step, so whatever finished
is kept: each message ends by saying the run resumes once the cause is fixed.
"""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator

from langgraph.errors import GraphDrained
from typing_extensions import TypedDict

from swm.errors import EnvironmentFault, ModelUnavailable

RESUME = "then rerun with the same --db and --thread-id: finished steps are checkpointed"


def _fault(message: str, hint: str, exit_code: int) -> EnvironmentFault:
    fault = EnvironmentFault(message, f"{hint}; {RESUME}")
    fault.exit_code = exit_code
    return fault


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return " ".join(text[0].split())[:200] if text else type(exc).__name__


def _sqlite(exc: sqlite3.Error) -> EnvironmentFault | None:
    text = str(exc).lower()
    if "disk is full" in text:
        return _fault("the disk holding the database is full", "free some space", 2)
    if "disk i/o error" in text:
        return _fault("writing the database failed (disk I/O error: a full disk, a file-size limit or a failing "
                      "device)", "check free space (df) and the device", 2)
    if "readonly database" in text or "read-only" in text:
        return _fault("the database became read-only while the run was writing to it",
                      "make the file and its folder writable again", 2)
    return None


def _os(exc: OSError) -> EnvironmentFault | None:
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return _fault(f"no space left to write{where}: {exc.strerror}", "free some space", 2)
    if exc.errno == errno.EROFS:
        return _fault(f"the file system became read-only{where}", "remount it writable or use another folder", 2)
    return None


def _postgres(exc: BaseException) -> EnvironmentFault | None:
    try:
        import psycopg  # optional: the [postgres] extra
        from psycopg import errors  # optional: the [postgres] extra

        from swm.checkpoints.postgres_connect import NoAnswer  # optional: the [postgres] extra (it imports psycopg)
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        return None
    if isinstance(exc, NoAnswer):
        return _fault(f"{_first_line(exc)}: a frozen server or a network partition",
                      "check the server and the network to it (pg_isready -h HOST); SWM_POSTGRES_STATEMENT_TIMEOUT "
                      "sets how long a statement is waited for", 3)
    if isinstance(exc, errors.QueryCanceled):
        return _fault(f"the PostgreSQL server cancelled a statement ({_first_line(exc)})",
                      "raise statement_timeout for swm's role or database (it runs short writes and waits for "
                      "locks other processes hold), or find what holds the lock", 3)
    if isinstance(exc, errors.DiskFull):
        return _fault("the PostgreSQL server's disk is full", "free space on the database server", 2)
    if isinstance(exc, errors.ReadOnlySqlTransaction):
        return _fault("the PostgreSQL server accepts no writes (a read-only standby, or "
                      "default_transaction_read_only)", "point --db at the primary", 2)
    if isinstance(exc, psycopg.OperationalError):
        return _fault(f"lost the connection to PostgreSQL ({_first_line(exc)})",
                      "check that the server is up (pg_isready)", 3)
    if type(exc).__module__.startswith("psycopg_pool"):  # PoolTimeout, TooManyRequests
        return _fault(f"no PostgreSQL connection could be had ({type(exc).__name__}: {_first_line(exc)})",
                      "check that the server is up and accepts connections (max_connections)", 3)
    return None


def _ray(exc: BaseException) -> EnvironmentFault | None:
    if not type(exc).__module__.startswith("ray."):
        return None
    return _fault(f"the Ray cluster failed ({type(exc).__name__}: {_first_line(exc)})",
                  "check the cluster (`ray status`; restart a dead node or raylet)", 3)


def environment_fault(exc: BaseException) -> EnvironmentFault | None:
    """Return the one-line fault behind ``exc`` when its cause is the disk, the database or Ray; else None."""
    for cause in _chain(exc):
        if isinstance(cause, EnvironmentFault):
            return cause
        found = (_sqlite(cause) if isinstance(cause, sqlite3.Error) else _os(cause) if isinstance(cause, OSError)
                 else _postgres(cause) or _ray(cause))
        if found is not None:
            return found
    return None


class BatchRun(TypedDict):
    """What a batch of items (benchmark games, episodes) did in one invocation: ran, skipped as already finished,
    failed (item → `item_failure`'s line), and its wall time in seconds."""

    ran: int
    skipped: int
    failed: dict[str, str]
    wall: float


def item_failure(exc: Exception) -> str:
    """Return one item's failure (``Type: message``) for a batch to record, or raise what stops every item.

    A batch (benchmark games, episodes) records one broken item and goes on with the others, but a
    model that is down, the disk or database under every item, and a drain (SIGTERM) stop the batch:
    those are raised, an environment fault found in the exception's chain as its one-line fault.
    """
    if isinstance(exc, ModelUnavailable | EnvironmentFault | GraphDrained):
        raise exc
    fault = environment_fault(exc)
    if fault is not None:
        raise fault from exc
    return f"{type(exc).__name__}: {exc}"
