"""PostgreSQL behind the same interfaces: the checkpointer and the experience store.

``--db postgresql://user@host:5432/name`` (or ``SWM_DB``) puts a run's checkpoints in
``langgraph-checkpoint-postgres`` and its experience store in the same database, so many
processes and machines can work on one run: each resumes from the shared checkpoints and sees
the same parses, episodes and pairs. Schema set-up is automatic (``PostgresSaver.setup()`` for
checkpoints; store tables are created, and widened, on first write, as sqlite-utils does for
the SQLite file).

The store speaks the SQLite store's dialect to its callers: ``?`` placeholders are turned into
psycopg's ``%s``, dict and list values are stored as JSON text, and booleans as 0/1 integers, so
the domain packages' queries (``sum(passed)``, ``deployed = ?``) mean the same on both backends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata

from swm.checkpoints.savers import SERDE, AsyncOnThreads
from swm.checkpoints.serde import masked
from swm.checkpoints.store import PrimaryKey, StoreRecords
from swm.credentials import known_secrets, redact_text
from swm.credentials import redact_password as redact  # the name swm.ui and the benches import
from swm.inputs import without_nul

if TYPE_CHECKING:
    from psycopg import AsyncConnection, Connection
    from psycopg.rows import DictRow, TupleRow
    from psycopg_pool import AsyncConnectionPool

    from swm.checkpoints.postgres_connect import BoundedPool

SCHEMES = ("postgresql://", "postgres://")
Statements = list[tuple[str, tuple[object, ...]]]  # maintenance statements with their parameters


def is_postgres(target: object) -> bool:
    """Tell whether a ``--db`` value names a PostgreSQL database rather than a SQLite file."""
    return str(target).startswith(SCHEMES)


def _pool(url: str, max_size: int = 8, prepare: bool = True) -> BoundedPool:
    """Open a connection pool whose every wait is bounded (`swm.checkpoints.postgres_connect`)."""
    from swm.checkpoints.postgres_connect import open_pool  # optional: the [postgres] extra (it imports psycopg)

    return open_pool(url, max_size, prepare)


def _text_safe(checkpoint: Checkpoint, metadata: CheckpointMetadata) -> tuple[Checkpoint, CheckpointMetadata]:
    """Remove NUL characters from the strings the saver puts in JSONB (inline channel values, metadata), and hide
    the keys in them (`swm.checkpoints.serde.masked`): a string channel's value is stored inline, not serialized.

    PostgreSQL's JSONB refuses ``\\u0000``, and a refused checkpoint is retried from the same pending
    writes on every resume, so one NUL would stop the thread for good. Model replies and input
    files lose their NULs at the boundary (`swm.inputs.without_nul`); this catches any other path.
    """

    inline = {k: v for k, v in checkpoint["channel_values"].items() if isinstance(v, str)}
    clean_inline, removed = without_nul(inline)
    clean_meta, removed_meta = without_nul(metadata)
    if removed + removed_meta:
        logging.getLogger("swm").warning("removed %d NUL character(s) from a checkpoint (PostgreSQL stores none)",
                                         removed + removed_meta)
    secrets = known_secrets()
    clean_inline, clean_meta = masked(clean_inline, secrets), masked(clean_meta, secrets)
    if clean_inline == inline and clean_meta == metadata:
        return checkpoint, metadata
    return {**checkpoint, "channel_values": {**checkpoint["channel_values"], **clean_inline}}, clean_meta


# LangGraph's PostgreSQL savers prune (``prune`` / ``aprune``) but neither delete a run's checkpoints nor copy a
# thread; the server warns when a saver lacks them. A run's checkpoints go with their writes; blobs are shared by
# version across a thread's checkpoints and stay (``prune`` and ``delete_thread`` clear them).
_DELETE_FOR_RUNS = [
    "DELETE FROM checkpoint_writes w USING checkpoints c WHERE c.metadata->>'run_id' = ANY(%s) "
    "AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id",
    "DELETE FROM checkpoints WHERE metadata->>'run_id' = ANY(%s)"]
_COPY_THREAD = [
    "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, "
    "metadata) SELECT %s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata "
    "FROM checkpoints WHERE thread_id = %s ON CONFLICT DO NOTHING",
    "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) SELECT %s, "
    "checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs WHERE thread_id = %s ON CONFLICT DO NOTHING",
    "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, "
    "type, blob) SELECT %s, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob "
    "FROM checkpoint_writes WHERE thread_id = %s ON CONFLICT DO NOTHING"]


def _maintenance(run_ids: Sequence[str] | None = None, copy: tuple[str, str] | None = None) -> Statements:
    """Return the statements (with parameters) that delete the checkpoints of ``run_ids`` or copy a thread."""
    if run_ids is not None:
        if isinstance(run_ids, str):
            raise TypeError("run_ids must be a sequence of run ids, not a str")
        runs = [str(r) for r in run_ids]
        return [(sql, (runs,)) for sql in _DELETE_FOR_RUNS] if runs else []
    assert copy is not None
    return [(sql, (str(copy[1]), str(copy[0]))) for sql in _COPY_THREAD]


def _nul_safe(saver_class: type) -> type:
    """Return ``saver_class`` with `_text_safe` applied to every checkpoint it puts (sync and async), able to delete
    a run's checkpoints and copy a thread, and, for the sync saver, the async interface on worker threads."""

    class NulSafe(saver_class):  # type: ignore[valid-type,misc]
        def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                new_versions: ChannelVersions) -> RunnableConfig:
            return super().put(config, *_text_safe(checkpoint, metadata), new_versions)

        async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                       new_versions: ChannelVersions) -> RunnableConfig:
            return await super().aput(config, *_text_safe(checkpoint, metadata), new_versions)

        def _run(self, statements: Statements) -> None:
            with self._cursor() as cur, cur.connection.transaction():
                for sql, params in statements:
                    cur.execute(sql, params)

        async def _arun(self, statements: Statements) -> None:
            async with self._cursor() as cur, cur.connection.transaction():
                for sql, params in statements:
                    await cur.execute(sql, params)

        def delete_for_runs(self, run_ids: Sequence[str]) -> None:
            self._run(_maintenance(run_ids))

        def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
            self._run(_maintenance(copy=(source_thread_id, target_thread_id)))

        async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
            await self._arun(_maintenance(run_ids))

        async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
            await self._arun(_maintenance(copy=(source_thread_id, target_thread_id)))

    NulSafe.__name__ = NulSafe.__qualname__ = saver_class.__name__
    return NulSafe


def _sync_saver(saver_class: type) -> type:
    """Return the sync ``saver_class``, NUL-safe and maintained (`_nul_safe`), with its async interface on threads."""
    safe = _nul_safe(saver_class)

    class Threaded(AsyncOnThreads, safe):  # type: ignore[valid-type,misc]
        """First in the order: NulSafe's async methods would reach the sync saver's, which raise."""

    Threaded.__name__ = Threaded.__qualname__ = saver_class.__name__
    return Threaded


@contextmanager
def postgres_saver(url: str) -> Iterator[BaseCheckpointSaver[str]]:
    """Yield a Postgres checkpointer on ``url`` (tables set up on first use) and close it afterwards."""
    from langgraph.checkpoint.postgres import PostgresSaver  # optional: the [postgres] extra

    pool = _pool(url)
    try:
        saver = _sync_saver(PostgresSaver)(pool, serde=SERDE)
        with _ddl_lock(pool, "checkpoint-setup"):
            saver.setup()
        yield saver
    finally:
        pool.close()


@asynccontextmanager
async def async_postgres_saver(url: str) -> AsyncIterator[BaseCheckpointSaver[str]]:
    """Yield an async Postgres checkpointer (LangGraph server / Studio) on ``url``."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver  # optional: the [postgres] extra
    from psycopg.rows import dict_row  # optional: the [postgres] extra
    from psycopg_pool import AsyncConnectionPool  # optional: the [postgres] extra

    from swm.checkpoints.postgres_connect import AsyncBoundedConnection, Bounds  # optional: the [postgres] extra

    opened: AsyncConnectionPool[AsyncConnection[DictRow]] = AsyncConnectionPool(
        url, min_size=1, max_size=8, open=False, check=AsyncConnectionPool.check_connection,
        timeout=Bounds.from_env().checkout, connection_class=AsyncBoundedConnection,  # type: ignore[arg-type]
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
    async with opened as pool:
        saver = _nul_safe(AsyncPostgresSaver)(pool, serde=SERDE)
        async with pool.connection() as conn:
            pause = LOCK_POLL_S[0]
            while True:  # polled, as `advisory_lock` explains
                cursor = await conn.execute("select pg_try_advisory_lock(%s) as ok", [_lock_id("checkpoint-setup")])
                row = await cursor.fetchone()
                if row and row["ok"]:
                    break
                await asyncio.sleep(pause)
                pause = min(pause * 2, LOCK_POLL_S[1])
            try:
                await saver.setup()
            finally:
                await conn.execute("select pg_advisory_unlock(%s)", [_lock_id("checkpoint-setup")])
        yield saver


def _lock_id(name: str) -> int:
    return zlib.crc32(f"swm:{name}".encode())


LOCK_POLL_S = (0.02, 0.5)  # first and longest pause between tries of an advisory lock


@contextmanager
def advisory_lock(conn: Connection[DictRow] | Connection[TupleRow], name: str) -> Iterator[None]:
    """Hold PostgreSQL's session advisory lock ``name`` on ``conn`` (a psycopg connection) for the block.

    Taken by polling ``pg_try_advisory_lock``, never by a blocking ``pg_advisory_lock``: the holder
    may run ``CREATE INDEX CONCURRENTLY`` (the checkpointer's migrations), which waits for every
    open statement in the database to end, and a statement waiting for the lock never would — a
    deadlock PostgreSQL does not detect (seen with several test schemas migrating at once).
    """

    def taken() -> bool:
        row = conn.execute("select pg_try_advisory_lock(%s) as ok", [_lock_id(name)]).fetchone()
        assert row is not None  # a select of one value returns one row
        return bool(row["ok"] if isinstance(row, dict) else row[0])  # pools hand out dict rows

    pause = LOCK_POLL_S[0]
    while not taken():
        time.sleep(pause)
        pause = min(pause * 2, LOCK_POLL_S[1])
    try:
        yield
    finally:
        conn.execute("select pg_advisory_unlock(%s)", [_lock_id(name)])


@contextmanager
def _ddl_lock(pool: BoundedPool, name: str) -> Iterator[None]:
    """Serialise schema changes across processes (two workers creating one table would collide)."""
    with pool.connection() as conn, advisory_lock(conn, name):
        yield


_PLACEHOLDER = re.compile(r"\?")


def _sql(sql: str) -> str:
    """Turn the SQLite store's ``?`` placeholders into psycopg's ``%s`` (and escape literal ``%``)."""
    return _PLACEHOLDER.sub("%s", sql.replace("%", "%%"))


def _column_type(value: object) -> str:
    if isinstance(value, bool | int):
        return "BIGINT"
    if isinstance(value, float):
        return "DOUBLE PRECISION"
    if isinstance(value, bytes):
        return "BYTEA"
    return "TEXT"


def _value(value: object) -> object:
    if isinstance(value, str):
        return redact_text(value.replace("\x00", ""))  # PostgreSQL's text holds no NUL (JSON text escapes it: kept)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict | list | tuple):
        return redact_text(json.dumps(value, ensure_ascii=False, default=str))
    if hasattr(value, "model_dump_json"):
        return redact_text(value.model_dump_json())
    return value


def _ident(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return f'"{name}"'


_TYPES = {str: "TEXT", int: "BIGINT", float: "DOUBLE PRECISION", bool: "BIGINT", bytes: "BYTEA"}


class PostgresExperienceStore(StoreRecords):
    """The experience store on PostgreSQL, with the SQLite store's methods and SQL dialect."""

    def __init__(self, url: str, max_connections: int = 8) -> None:
        self.path = redact(url)
        self.pool = _pool(url, max_connections, prepare=False)
        self.lock = threading.RLock()
        self._columns: dict[str, set[str]] = {}
        self._pks: dict[str, tuple[str, ...]] = {}
        self.create_table("parses", {"key": str, "story_hash": str, "parser": str, "prompt": str, "task": str,
                                     "s3ap": str, "report": str, "attempts": int, "created": float},
                          pk="key", indexes=[["story_hash"]])

    # ---- schema ----------------------------------------------------------------------------
    def _load_schema(self, table: str) -> None:
        with self.pool.connection() as conn:
            cols = conn.execute("select column_name from information_schema.columns where table_schema = "
                                "current_schema() and table_name = %s", [table]).fetchall()
            pk = conn.execute("select a.attname as name from pg_index i join pg_attribute a on a.attrelid = "
                              "i.indrelid and a.attnum = any(i.indkey) where i.indrelid = to_regclass(%s) "
                              "and i.indisprimary", [_ident(table)]).fetchall()
        if cols:
            self._columns[table] = {c["column_name"] for c in cols}
            self._pks[table] = tuple(r["name"] for r in pk)

    def has_table(self, table: str) -> bool:
        if table not in self._columns:
            self._load_schema(table)
        return table in self._columns

    def columns(self, table: str) -> set[str]:
        """Return a table's column names (empty when it does not exist)."""
        return set(self._columns[table]) if self.has_table(table) else set()

    def create_table(self, table: str, columns: Mapping[str, type], *, pk: PrimaryKey = None,
                     indexes: Iterable[Iterable[str]] = ()) -> None:
        """Create a table (and its indexes) unless it exists; columns map names to Python types."""
        if self.has_table(table):
            for index in indexes:
                self.create_index(table, index)
            return
        keys = [pk] if isinstance(pk, str) else list(pk or ())
        cols = ", ".join([f"{_ident(c)} {_TYPES.get(t, 'TEXT')}" for c, t in columns.items()]
                         + ([f"primary key ({', '.join(_ident(k) for k in keys)})"] if keys else []))
        with _ddl_lock(self.pool, "store-ddl"), self.pool.connection() as conn:
            conn.execute(f"create table if not exists {_ident(table)} ({cols})")  # type: ignore[arg-type]
        self._columns.pop(table, None)
        self._load_schema(table)
        for index in indexes:
            self.create_index(table, index)

    def create_index(self, table: str, columns: Iterable[str]) -> None:
        cols = list(columns)
        name = _ident(f"idx_{table}_{'_'.join(cols)}")
        with _ddl_lock(self.pool, "store-ddl"), self.pool.connection() as conn:
            conn.execute(f"create index if not exists {name} on {_ident(table)} "  # type: ignore[arg-type]
                         f"({', '.join(_ident(c) for c in cols)})")

    def _ensure(self, table: str, row: Mapping[str, object], pk: PrimaryKey) -> None:
        if not self.has_table(table):
            self.create_table(table, {c: type(v) if v is not None else str for c, v in row.items()}, pk=pk)
        missing = [c for c in row if c not in self._columns[table]]
        if missing:
            with _ddl_lock(self.pool, "store-ddl"), self.pool.connection() as conn:
                for c in missing:
                    conn.execute(f"alter table {_ident(table)} add column if not exists "  # type: ignore[arg-type]
                                 f"{_ident(c)} {_column_type(row[c])}")
            self._columns[table].update(missing)

    # ---- generic rows ----------------------------------------------------------------------
    def insert(self, table: str, row: Mapping[str, object], *, pk: PrimaryKey = None,
               replace: bool = False, ignore: bool = False) -> None:
        """Append a row (dict/list values are stored as JSON text)."""
        self.insert_all(table, [row], pk=pk, replace=replace, ignore=ignore)

    def insert_all(self, table: str, rows: Iterable[Mapping[str, object]], *, pk: PrimaryKey = None,
                   replace: bool = False, ignore: bool = False) -> None:
        batch = [{k: _value(v) for k, v in r.items()} for r in rows]
        if not batch:
            return
        with self.lock:
            for row in batch:
                self._ensure(table, row, pk)
        keys = self._pks.get(table, ())
        with self.pool.connection() as conn, conn.transaction():
            for row in batch:
                cols = list(row)
                sql = (f"insert into {_ident(table)} ({', '.join(_ident(c) for c in cols)}) "
                       f"values ({', '.join(['%s'] * len(cols))})")
                if keys and replace:  # as SQLite's INSERT OR REPLACE: columns not given become NULL
                    updates = ", ".join(f"{_ident(c)} = " + (f"excluded.{_ident(c)}" if c in row else "NULL")
                                        for c in sorted(self._columns[table]) if c not in keys)
                    sql += (f" on conflict ({', '.join(_ident(k) for k in keys)}) do "
                            + (f"update set {updates}" if updates else "nothing"))
                elif ignore:
                    sql += " on conflict do nothing"
                conn.execute(sql, [row[c] for c in cols])  # type: ignore[arg-type]

    def rows(self, sql: str, params: Iterable[object] | Mapping[str, object] = ()) -> Iterator[dict[str, Any]]:
        with self.pool.connection() as conn:
            result = conn.execute(_sql(sql), list(params) if not isinstance(params, Mapping) else params)  # type: ignore[arg-type]
            return iter(result.fetchall() if result.description else [])

    def execute(self, sql: str, params: Iterable[object] = ()) -> None:
        """Run one write statement (update, delete) in its own transaction."""
        with self.pool.connection() as conn, conn.transaction():
            conn.execute(_sql(sql), list(params))  # type: ignore[arg-type]

    def count(self, table: str, where: str | None = None, params: Iterable[object] = ()) -> int:
        if not self.has_table(table):
            return 0
        rows = list(self.rows(f"select count(*) as n from {_ident(table)} where {where or 'true'}", params))
        return int(rows[0]["n"])

    def close(self) -> None:
        self.pool.close()
