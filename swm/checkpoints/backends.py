"""Open a run's checkpointer and experience store from one ``--db`` value: a SQLite file or a PostgreSQL URL.

SQLite (``langgraph-checkpoint-sqlite`` and sqlite-utils, one file) is the embedded default; a
``postgresql://`` URL switches both to PostgreSQL (`checkpoints.postgres`), the shared backend
when several processes or machines work on one run. Callers see the same interfaces either way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from langgraph.checkpoint.base import BaseCheckpointSaver

from swm.checkpoints.postgres import async_postgres_saver, is_postgres, postgres_saver
from swm.checkpoints.savers import async_sqlite_saver, sqlite_saver
from swm.checkpoints.store import ExperienceStore, StoreRecords

Target = str | Path


def open_store(target: Target) -> StoreRecords:
    """Open the experience store on a SQLite file or a PostgreSQL URL."""
    if is_postgres(target):
        from swm.checkpoints.postgres import PostgresExperienceStore  # optional: the [postgres] extra

        return PostgresExperienceStore(str(target))

    return ExperienceStore(target)


@contextmanager
def open_saver(target: Target) -> Iterator[BaseCheckpointSaver[str]]:
    """Yield the checkpointer for a SQLite file or a PostgreSQL URL, closed afterwards."""
    with (postgres_saver(str(target)) if is_postgres(target) else sqlite_saver(target)) as saver:
        yield saver


@asynccontextmanager
async def open_async_saver(target: Target) -> AsyncIterator[BaseCheckpointSaver[str]]:
    """Yield the async checkpointer (LangGraph server, Studio) for a SQLite file or a PostgreSQL URL."""
    async with (async_postgres_saver(str(target)) if is_postgres(target) else async_sqlite_saver(target)) as saver:
        yield saver
