"""The checkpointer LangGraph Studio / ``langgraph dev`` uses (``langgraph.json`` → ``checkpointer``).

The exported graphs carry no checkpointer of their own (the server refuses those); the server
calls `checkpointer()` and keeps the async SQLite saver open for its lifetime. The file is
``SWM_STUDIO_DB``, else ``SWM_DB``, else the default database.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from checkpoints.savers import async_sqlite_saver, default_db_path


@asynccontextmanager
async def checkpointer() -> AsyncIterator[AsyncSqliteSaver]:
    async with async_sqlite_saver(os.environ.get("SWM_STUDIO_DB") or default_db_path()) as saver:
        yield saver
