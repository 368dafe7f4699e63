"""SQLite checkpointer factories (sync and async) over one database file."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

# Graph state holds swm's pydantic models; allow exactly these modules to be revived.
SERDE = JsonPlusSerializer(allowed_msgpack_modules=[
    ("swm.state", "SocialWorld"), ("swm.state", "SocialStep"), ("swm.state", "Issue"),
    ("swm.state", "ValidationReport"), ("swm.state", "PerspectiveEntry"),
])


def default_db_path() -> Path:
    """Return ``SWM_DB`` or ``~/.local/share/swm/swm.db``."""
    env = os.environ.get("SWM_DB")
    return Path(env).expanduser() if env else Path.home() / ".local" / "share" / "swm" / "swm.db"


def connect(path: str | Path) -> sqlite3.Connection:
    """Open a connection usable from worker threads, in WAL mode, waiting on locks."""
    if str(path) != ":memory:":
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=60)
    if str(path) != ":memory:":
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA busy_timeout=60000")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


@contextmanager
def sqlite_saver(path: str | Path) -> Iterator[SqliteSaver]:
    """Yield a SQLite checkpointer on ``path`` and close it afterwards."""
    conn = connect(path)
    try:
        saver = SqliteSaver(conn, serde=SERDE)
        saver.setup()
        yield saver
    finally:
        conn.close()


@asynccontextmanager
async def async_sqlite_saver(path: str | Path) -> AsyncIterator[AsyncSqliteSaver]:
    """Yield an async SQLite checkpointer on ``path``."""
    import aiosqlite

    if str(path) != ":memory:":
        Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
    async with aiosqlite.connect(str(path), timeout=60) as conn:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA busy_timeout=60000")
        saver = AsyncSqliteSaver(conn, serde=SERDE)
        await saver.setup()
        yield saver
