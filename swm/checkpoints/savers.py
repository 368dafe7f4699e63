"""SQLite checkpointer factories (sync and async) over one database file."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import aiosqlite
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from swm.checkpoints.health import (
    DatabaseRefused,
    absolute,
    check_database,
    ensure_same_file,
    file_identity,
    stamp_file,
)
from swm.checkpoints.writable import GuardedConnection, ensure_writable

# Graph state holds swm's pydantic models; allow exactly these modules to be revived.
SERDE = JsonPlusSerializer(allowed_msgpack_modules=[
    ("swm.state", "SocialWorld"), ("swm.state", "SocialStep"), ("swm.state", "Issue"),
    ("swm.state", "ValidationReport"), ("swm.state", "PerspectiveEntry"),
    ("swm.lifelong.plan", "LifelongPlan"), ("swm.selfplay.plan", "SelfPlayPlan"),
])


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


class FileCheckedSqliteSaver(SqliteSaver):
    """A SQLite checkpointer that stops writing when its file was deleted or replaced (`ensure_same_file`).

    After each write it also checks that the files can still be written (`ensure_writable`): the
    write landed, and the run stops (drained, or at once) before it pays for steps it could not keep.
    """

    def __init__(self, conn: sqlite3.Connection, path: str | Path, **kwargs: Any) -> None:
        super().__init__(conn, **kwargs)
        self.path = absolute(path)
        self.identity = file_identity(self.path)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        ensure_same_file(self.path, self.identity)
        saved = super().put(config, checkpoint, metadata, new_versions)
        ensure_writable(self.path, landed=True)
        return saved

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        ensure_same_file(self.path, self.identity)
        super().put_writes(config, writes, task_id, task_path)
        ensure_writable(self.path, landed=True)


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
        saver = AsyncSqliteSaver(conn, serde=SERDE)
        await saver.setup()
        yield saver
