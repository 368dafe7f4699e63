"""The checkpointer and experience store of LangGraph Studio / ``langgraph dev`` (``langgraph.json``).

The exported graphs carry no checkpointer of their own (the server refuses those); the server
enters `checkpointer()` once and keeps the async saver (SQLite, or PostgreSQL for a
``postgresql://`` URL) open for its lifetime. The file is ``SWM_STUDIO_DB``, else ``SWM_DB``, else
the default database: the CLI's, so both see one history.

The same file holds the experience store: `checkpointer()` opens it beside the saver and serves
it to every run that brings none (`checkpoints.store.serve_store`), so a server ``ask`` reuses a
parse a CLI run cached, and episodes played on the server show up in ``swm`` reports.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from swm.checkpoints.backends import open_async_saver, open_store
from swm.checkpoints.savers import default_db_path
from swm.checkpoints.store import serve_store


@asynccontextmanager
async def checkpointer() -> AsyncIterator[Any]:
    target = os.environ.get("SWM_STUDIO_DB") or default_db_path()
    async with open_async_saver(target) as saver:
        store = open_store(target)
        serve_store(store)
        try:
            yield saver
        finally:
            serve_store(None)
            store.close()
