"""Persistence: checkpointers for every graph and the experience store, in one SQLite file or PostgreSQL.

``--db`` / ``SWM_DB`` chooses the file (or a ``postgresql://`` URL: `checkpoints.postgres`).
The checkpointer (``langgraph-checkpoint-sqlite``) holds
graph state so a killed run resumes at the last finished node; the experience store
(``sqlite-utils``) holds bulk, append-only data: parses, episodes, turns, pairs, metrics.

A checkpointer of your own needs swm's serializer, `SERDE` (``InMemorySaver(serde=SERDE)``), to revive swm's types
without LangGraph's warning (`ALLOWED_MSGPACK_MODULES`) and to write every key swm knows as ``***``: each string in
a state, a task's writes and an interrupt (`swm.checkpoints.serde`). Types of your own:
``SERDE.with_msgpack_allowlist([(module, name)])``, which keeps the masking a new ``JsonPlusSerializer`` lacks.
"""

from swm.checkpoints.backends import Target, open_async_saver, open_saver, open_store
from swm.checkpoints.lease import LeaseHeld, LeaseLost, hold_lease
from swm.checkpoints.postgres import PostgresExperienceStore, is_postgres
from swm.checkpoints.runs import (
    differences,
    pending_nodes,
    pin_run_options,
    run_options_for,
    run_thread,
    thread_status,
)
from swm.checkpoints.savers import (
    ALLOWED_MSGPACK_MODULES,
    SERDE,
    async_sqlite_saver,
    connect,
    default_db_path,
    sqlite_saver,
)
from swm.checkpoints.store import ExperienceStore

__all__ = ["ALLOWED_MSGPACK_MODULES", "SERDE", "ExperienceStore", "LeaseHeld", "LeaseLost", "PostgresExperienceStore",
           "Target", "async_sqlite_saver", "connect", "default_db_path", "differences", "hold_lease", "is_postgres",
           "open_async_saver", "open_saver", "open_store", "pending_nodes", "pin_run_options", "run_options_for",
           "run_thread", "sqlite_saver", "thread_status"]
