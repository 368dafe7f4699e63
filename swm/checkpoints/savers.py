"""SQLite checkpointer factories (sync and async) over one database file."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiosqlite
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from swm.checkpoints import maintenance
from swm.checkpoints.health import (
    DatabaseRefused,
    absolute,
    check_database,
    ensure_same_file,
    file_identity,
    stamp_file,
)
from swm.checkpoints.serde import RedactingSerializer
from swm.checkpoints.writable import GuardedConnection, ensure_writable

# Graph state holds swm's pydantic models: the (module, class) pairs a checkpoint may revive, beside the types
# LangGraph itself allows (messages, its own)
ALLOWED_MSGPACK_MODULES: tuple[tuple[str, str], ...] = (
    ("swm.state", "SocialWorld"), ("swm.state", "SocialStep"), ("swm.state", "Issue"),
    ("swm.state", "ValidationReport"), ("swm.state", "PerspectiveEntry"),
    ("swm.lifelong.plan", "LifelongPlan"), ("swm.selfplay.plan", "SelfPlayPlan"),
)
# The serializer of every saver swm opens, and the one a saver of your own needs
# (``InMemorySaver(serde=SERDE)``): it revives exactly swm's types, so a resumed thread neither warns that
# ``swm.state.SocialWorld`` is an unregistered type that "will be blocked" nor, under
# ``LANGGRAPH_STRICT_MSGPACK=true``, hands the state back as plain dicts; and it writes every key swm knows
# as ``***`` (`RedactingSerializer`). Types of your own: ``SERDE.with_msgpack_allowlist([(module, name)])``
SERDE = RedactingSerializer(allowed_msgpack_modules=ALLOWED_MSGPACK_MODULES)


def default_db_path() -> Path:
    """Return ``SWM_DB`` or ``~/.local/share/swm/swm.db``."""
    env = os.environ.get("SWM_DB")
    return Path(env).expanduser() if env else Path.home() / ".local" / "share" / "swm" / "swm.db"


def connect(path: str | Path) -> sqlite3.Connection:
    """Open a connection usable from worker threads, in WAL mode, waiting on locks.

    The file is checked first (`check_database`: SQLite, writable, ``quick_check`` clean; then, each
    time, that its files are still writable) and a file SQLite still refuses is reported in one
    line, not as a traceback. The connection is a `GuardedConnection`.
    """
    check_database(path)
    ensure_writable(path)
    memory = str(path) == ":memory:"
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(":memory:" if memory else str(Path(path).expanduser()), check_same_thread=False,
                               timeout=60, factory=GuardedConnection)
        if not memory:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=60000")
        conn.execute("PRAGMA synchronous=NORMAL")
        if not memory:
            stamp_file(conn)
    except sqlite3.DatabaseError as exc:
        if conn is not None:
            conn.close()
        raise DatabaseRefused(f"cannot open the database {path}: {exc}",
                              "pass another --db (a new path creates one)") from exc
    return conn


class AsyncOnThreads(BaseCheckpointSaver):
    """The async interface of a sync saver, each call run on a worker thread (`asyncio.to_thread`).

    A graph run with ``ainvoke`` / ``astream`` (LangGraph's server, Studio, the conformance suite) then gets
    the same saver, checks and all; LangGraph's sync SQLite and PostgreSQL savers' own async methods raise.
    """

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, object]], task_id: str,
                          task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


class FileCheckedSqliteSaver(AsyncOnThreads, SqliteSaver):
    """A SQLite checkpointer that stops writing when its file was deleted or replaced (`ensure_same_file`).

    After each write it also checks that the files can still be written (`ensure_writable`): the
    write landed, and the run stops (drained, or at once) before it pays for steps it could not keep.
    """

    def __init__(self, conn: sqlite3.Connection, path: str | Path, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(conn, serde=serde)
        self.path = absolute(path)
        self.identity = file_identity(self.path)

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        ensure_same_file(self.path, self.identity)
        saved = super().put(config, checkpoint, metadata, new_versions)
        ensure_writable(self.path, landed=True)
        return saved

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, object]], task_id: str,
                   task_path: str = "") -> None:
        ensure_same_file(self.path, self.identity)
        super().put_writes(config, writes, task_id, task_path)
        ensure_writable(self.path, landed=True)

    def _run(self, statements: maintenance.Statements) -> None:
        """Run maintenance statements in one transaction, checked as every write is."""
        if not statements:
            return
        ensure_same_file(self.path, self.identity)
        with self.cursor() as cur:
            for sql, params in statements:
                cur.execute(sql, params)
        ensure_writable(self.path, landed=True)

    def delete_thread(self, thread_id: str) -> None:
        ensure_same_file(self.path, self.identity)
        super().delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints of ``run_ids`` and their writes (`swm.checkpoints.maintenance`)."""
        self._run(maintenance.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another."""
        self._run(maintenance.copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: every checkpoint (``delete``) or all but the newest per namespace (``keep_latest``)."""
        statements = maintenance.prune(thread_ids, strategy)
        if statements and strategy == "keep_latest":
            sql, params = maintenance.delta_threads(thread_ids)
            with self.cursor(transaction=False) as cur:
                maintenance.refuse_delta([row[0] for row in cur.execute(sql, params)])
        self._run(statements)


class MaintainedAsyncSqliteSaver(AsyncSqliteSaver):
    """LangGraph's async SQLite saver with ``adelete_for_runs``, ``acopy_thread`` and ``aprune`` (`maintenance`)."""

    async def _run(self, statements: maintenance.Statements) -> None:
        if not statements:
            return
        async with self.lock:  # set up already, when the saver was opened
            for sql, params in statements:
                await self.conn.execute(sql, params)
            await self.conn.commit()

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._run(maintenance.delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._run(maintenance.copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        statements = maintenance.prune(thread_ids, strategy)
        if statements and strategy == "keep_latest":
            sql, params = maintenance.delta_threads(thread_ids)
            async with self.lock, self.conn.execute(sql, params) as cur:
                maintenance.refuse_delta([row[0] async for row in cur])
        await self._run(statements)


@contextmanager
def sqlite_saver(path: str | Path) -> Iterator[SqliteSaver]:
    """Yield a SQLite checkpointer on ``path`` and close it afterwards."""
    conn = connect(path)
    try:
        saver = FileCheckedSqliteSaver(conn, path, serde=SERDE)
        saver.setup()
        yield saver
    finally:
        conn.close()


@asynccontextmanager
async def async_sqlite_saver(path: str | Path) -> AsyncIterator[AsyncSqliteSaver]:
    """Yield an async SQLite checkpointer on ``path``."""

    check_database(path)
    async with aiosqlite.connect(str(path), timeout=60) as conn:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA busy_timeout=60000")
        saver = MaintainedAsyncSqliteSaver(conn, serde=SERDE)
        await saver.setup()
        yield saver
