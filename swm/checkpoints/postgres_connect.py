"""Connections to PostgreSQL where every wait has a bound, so a frozen server is one line, not a hang.

A server that stops answering without closing its sockets (a network partition, a frozen host, a
proxy that stopped forwarding) raises nothing on the client: psycopg would wait for ever for the
answer to a statement, to the pool's connection check and to a new connection, and the lease's
watchdog, itself waiting on the database, would never fire. Each wait is bounded here, in seconds
read from the environment when a connection opens (a value that is not a finite number of
seconds, more than 0 for all but the first, is refused in one line, exit 2):

* ``SWM_POSTGRES_WAIT`` (10): at a command's start, how long a server that does not answer is
  waited for (one still starting refuses connections for a while);
* ``SWM_POSTGRES_CONNECT_TIMEOUT`` (10): each connection attempt (libpq's ``connect_timeout``,
  which is at least 2 s);
* ``SWM_POSTGRES_STATEMENT_TIMEOUT`` (30): each statement. The server cancels it after that long
  (``statement_timeout``, unless the URL sets its own), and a server that sends nothing at all is
  given up one second later: the connection is closed and the statement fails with `NoAnswer`.
  A session left in a transaction that long is ended by the server (``idle_in_transaction_session_timeout``),
  so a client cut off mid-transaction leaves no lock behind for its rerun.
  TCP gives up on data the peer does not acknowledge as soon (``tcp_user_timeout``), and
  keepalives find a silent idle connection in ``KEEPALIVE`` seconds;
* ``SWM_POSTGRES_CHECKOUT_TIMEOUT`` (30): a connection from the pool.

The pool's own warnings (each reconnect attempt, each connection discarded) are not printed: the
run's one ``error:`` line says what failed.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from swm.credentials import redact_password, redact_text
from swm.errors import InputError

if TYPE_CHECKING:
    from psycopg.abc import PQGen


KEEPALIVE = (10, 5, 3)  # idle seconds before the first probe, seconds between probes, probes unanswered
GRACE_S = 1.0  # the server's statement_timeout speaks first; a frozen server is given up this much later
TRIED_EVERY_S = (0.25, 2.0)  # first and longest pause between connection attempts while a server is waited for


def _seconds(name: str, default: float, *, zero: bool = False) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        least = "≥ 0" if zero else "> 0"
        raise InputError(f"{name}={raw!r} is not a number of seconds",
                         f"set a finite number {least} (default {default:g}): every wait on the database has a bound")
    return value


@dataclass(frozen=True)
class Bounds:
    """How long each wait on the database may last, in seconds (see the module docstring)."""

    wait: float = 10.0
    connect: float = 10.0
    statement: float = 30.0
    checkout: float = 30.0

    @classmethod
    def from_env(cls) -> Bounds:
        """Read the bounds from ``SWM_POSTGRES_*``; raise `InputError` (exit 2) on a value that is not one."""
        return cls(_seconds("SWM_POSTGRES_WAIT", cls.wait, zero=True),
                   _seconds("SWM_POSTGRES_CONNECT_TIMEOUT", cls.connect),
                   _seconds("SWM_POSTGRES_STATEMENT_TIMEOUT", cls.statement),
                   _seconds("SWM_POSTGRES_CHECKOUT_TIMEOUT", cls.checkout))

    def connection_params(self, conninfo: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """Return libpq parameters bounding a connection's waits, those already in ``conninfo`` or ``given`` kept."""
        have = {**conninfo_to_dict(conninfo), **given}
        params: dict[str, Any] = {"connect_timeout": max(1, math.ceil(self.connect)), "keepalives": 1,
                                  "keepalives_idle": KEEPALIVE[0], "keepalives_interval": KEEPALIVE[1],
                                  "keepalives_count": KEEPALIVE[2], "tcp_user_timeout": int(self.statement * 1000)}
        params = {k: v for k, v in params.items() if k not in have}
        options = str(have.get("options") or "")
        # a client cut off mid-transaction leaves its session holding locks: the server ends it after the same bound
        for setting in ("statement_timeout", "idle_in_transaction_session_timeout"):
            if setting not in options:
                options = f"{options} -c {setting}={int(self.statement * 1000)}".strip()
        if options != str(have.get("options") or ""):
            params["options"] = options
        return params


class NoAnswer(errors.OperationalError):
    """The server sent nothing within the statement's bound: the connection is closed (its state is unknown)."""


Server = tuple[str, str]  # (host, port) as the connection parameters name them
_silent: dict[Server, tuple[float, str]] = {}  # a server that sent nothing: until when it is not waited for, and why
_silent_lock = threading.Lock()


def _server(conninfo: str, given: Mapping[str, Any] | None = None) -> Server:
    params = conninfo_to_dict(conninfo, **(given or {}))
    return str(params.get("host") or params.get("hostaddr") or ""), str(params.get("port") or "5432")


def _went_silent(server: Server, bound: float) -> NoAnswer:
    """Record that ``server`` sent nothing for ``bound`` seconds; return the fault to raise."""
    fault = NoAnswer(f"PostgreSQL sent no answer within {bound:g} s")
    with _silent_lock:
        _silent[server] = (time.monotonic() + bound, str(fault))
    return fault


def _refuse_if_silent(server: Server) -> None:
    """Raise `NoAnswer` at once while ``server`` was silent less than a bound ago.

    Each thread would otherwise wait a bound of its own, one statement after another (a check on
    checkout, the statement, a failure recorded), and a run would stop minutes after the server did.
    """
    with _silent_lock:
        until, why = _silent.get(server, (0.0, ""))
    if time.monotonic() < until:
        raise NoAnswer(why)


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose connect, statements and TCP waits are bounded by `Bounds.from_env`."""

    answer_within: float | None = None  # seconds; None: unbounded (a connection not made by `connect`)
    server: Server = ("", "")

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> BoundedConnection:  # type: ignore[override]
        bounds = Bounds.from_env()
        conn = super().connect(conninfo, **kwargs, **bounds.connection_params(conninfo, kwargs))
        conn.answer_within, conn.server = bounds.statement + GRACE_S, _server(conninfo, kwargs)
        return conn

    def wait(self, gen: PQGen[Any], interval: float = 0.1, timeout: float | None = None) -> Any:
        """Consume ``gen`` as psycopg does, within ``answer_within`` seconds unless a timeout is given."""
        bound = timeout if timeout is not None else self.answer_within
        if bound is not None and timeout is None:
            _refuse_if_silent(self.server)
        try:
            return super().wait(gen, interval, bound)
        except errors._WaitTimeout as exc:  # noqa: SLF001 - psycopg's own wait timeout, raised only when one is given
            if timeout is not None or bound is None:
                raise
            self.pgconn.finish()  # mid-protocol: nothing more can be read or sent on it
            raise _went_silent(self.server, bound) from exc


class AsyncBoundedConnection(psycopg.AsyncConnection[Any]):
    """`BoundedConnection` for asyncio (the LangGraph server's and Studio's saver)."""

    answer_within: float | None = None
    server: Server = ("", "")

    @classmethod
    async def connect(cls, conninfo: str = "", **kwargs: Any) -> AsyncBoundedConnection:  # type: ignore[override]
        bounds = Bounds.from_env()
        conn = await super().connect(conninfo, **kwargs, **bounds.connection_params(conninfo, kwargs))
        conn.answer_within, conn.server = bounds.statement + GRACE_S, _server(conninfo, kwargs)
        return conn

    async def wait(self, gen: PQGen[Any], interval: float = 0.1, timeout: float | None = None) -> Any:
        bound = timeout if timeout is not None else self.answer_within
        if bound is not None and timeout is None:
            _refuse_if_silent(self.server)
        try:
            return await super().wait(gen, interval, bound)
        except errors._WaitTimeout as exc:  # noqa: SLF001 - as in BoundedConnection.wait
            if timeout is not None or bound is None:
                raise
            self.pgconn.finish()
            raise _went_silent(self.server, bound) from exc


def cannot_open(url: str, bounds: Bounds, why: str) -> InputError:
    """The one line a command stops with when the server did not answer in time."""
    return InputError(f"cannot open the PostgreSQL database {redact_password(url)} after {bounds.wait:g} s: {why}",
                      "check that the server answers (pg_isready) and the URL names an existing database")


def _reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).removeprefix("connection failed:").splitlines() if line.strip()]
    return redact_text(redact_password(lines[0])) if lines else type(exc).__name__


def connect_waiting(url: str, **kwargs: Any) -> BoundedConnection:
    """Connect to ``url``, trying again for ``SWM_POSTGRES_WAIT`` seconds while the server does not answer.

    Raises `InputError` (exit 2) with the last attempt's reason when it never does.
    """
    bounds = Bounds.from_env()
    deadline, pause = time.monotonic() + bounds.wait, TRIED_EVERY_S[0]
    while True:
        try:
            return BoundedConnection.connect(url, **kwargs)
        except psycopg.OperationalError as exc:
            left = deadline - time.monotonic()
            if left <= 0:
                raise cannot_open(url, bounds, _reason(exc)) from exc
        time.sleep(min(pause, left))
        pause = min(pause * 2, TRIED_EVERY_S[1])


class _PoolNoise(logging.Filter):
    """Drop psycopg_pool's warnings (a line per reconnect attempt and per discarded connection)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING


_NOISE = _PoolNoise()


_checked = threading.local()  # the last failed connection check of this thread's checkout


def _check(conn: BoundedConnection) -> None:
    """psycopg_pool's check on checkout, its failure kept: the pool's timeout would name none."""
    try:
        ConnectionPool.check_connection(conn)
    except Exception as exc:
        _checked.failure = exc
        raise


class BoundedPool(ConnectionPool[BoundedConnection]):
    """A pool of `BoundedConnection` whose checkout, when it times out, says why its checks failed."""

    server: Server = ("", "")

    def getconn(self, timeout: float | None = None) -> BoundedConnection:
        _refuse_if_silent(self.server)
        _checked.failure = None
        try:
            return super().getconn(timeout)
        except PoolTimeout as exc:
            if isinstance(_checked.failure, NoAnswer):  # every connection it tried sent nothing: a frozen server
                raise NoAnswer(str(_checked.failure)) from exc
            raise


def open_pool(url: str, max_size: int = 8, prepare: bool = True) -> BoundedPool:
    """Open a pool of `BoundedConnection` (checkout bounded by ``SWM_POSTGRES_CHECKOUT_TIMEOUT``), waiting
    ``SWM_POSTGRES_WAIT`` for the server.

    The store's pool prepares nothing (its tables widen, and a prepared ``select *`` would then refuse:
    "cached plan must not change result type").
    """
    bounds = Bounds.from_env()
    logging.getLogger("psycopg.pool").addFilter(_NOISE)  # once: a filter already there is not added again
    pool: BoundedPool | None = None
    try:
        # check: a connection the server ended (restart, failover, idle timeout) is replaced on checkout
        pool = BoundedPool(
            url, min_size=1, max_size=max_size, open=True, timeout=bounds.checkout, connection_class=BoundedConnection,
            check=_check, kwargs={"autocommit": True, "prepare_threshold": 0 if prepare else None,
                                  "row_factory": dict_row})
        pool.server = _server(url)
        pool.wait(timeout=bounds.wait)
    except Exception as exc:  # psycopg_pool.PoolTimeout, psycopg.OperationalError
        if pool is not None:
            pool.close()  # its workers would go on trying to connect for the life of the process
        raise cannot_open(url, bounds, _why(url, exc)) from exc
    return pool


def _why(url: str, failed: Exception) -> str:
    """The reason a connection fails, in one line: the pool's timeout names none, so one connection is tried."""
    try:
        BoundedConnection.connect(url).close()
    except psycopg.Error as exc:
        return _reason(exc)
    return type(failed).__name__  # it answers now: the server came up after the wait
