"""Two processes setting up one PostgreSQL database at once must not hang each other.

The checkpointer's set-up runs ``CREATE INDEX CONCURRENTLY``, which waits for every open
transaction; a second process blocked inside ``pg_advisory_lock`` is one, and it waits for the
first one's lock: a hang PostgreSQL's deadlock detector cannot see. The lock is polled instead.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")
pytest.importorskip("langgraph.checkpoint.postgres")

from swm.checkpoints.postgres import _pool, advisory_lock  # noqa: E402
from swm.testing import scaled  # noqa: E402


@pytest.fixture
def own_database(pg_url: str) -> Iterator[str]:
    """A database of its own: ``CREATE INDEX CONCURRENTLY`` waits for every transaction of its database."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(pg_url)
    params.pop("options", None)
    name = f"swm_locks_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(make_conninfo("", **params), autocommit=True) as conn:
        conn.execute(f"create database {name}")  # type: ignore[arg-type]
    yield make_conninfo("", **{**params, "dbname": name})
    with psycopg.connect(make_conninfo("", **params), autocommit=True) as conn:
        conn.execute(f"drop database {name} with (force)")  # type: ignore[arg-type]


def test_a_waiting_process_does_not_block_the_holders_concurrent_index_build(own_database: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    pg_url = own_database

    holder, waiter = psycopg.connect(pg_url, autocommit=True), psycopg.connect(pg_url, autocommit=True)
    got_it = threading.Event()
    refused = threading.Event()  # the waiter asked for the lock and was refused: it is waiting for it now
    ask = waiter.execute

    def execute(query: Any, params: Any = None, **kwargs: Any) -> Any:
        cursor = ask(query, params, **kwargs)
        if "advisory_lock" in str(query):
            refused.set()
        return cursor

    waiter.execute = execute  # type: ignore[method-assign]

    def wait_for_the_lock() -> None:
        with advisory_lock(waiter, "checkpoint-setup"):
            got_it.set()

    pool = _pool(pg_url)
    set_up = threading.Event()

    def set_up_checkpoints() -> None:
        PostgresSaver(pool).setup()  # CREATE INDEX CONCURRENTLY on a fresh schema
        set_up.set()

    try:
        with advisory_lock(holder, "checkpoint-setup"):
            waiting = threading.Thread(target=wait_for_the_lock, daemon=True)
            waiting.start()
            assert refused.wait(scaled(60)), "the waiter's request for the lock never came back: it blocks, not polls"
            assert not got_it.is_set()
            setup = threading.Thread(target=set_up_checkpoints, daemon=True)
            setup.start()
            setup.join(scaled(30))  # seconds, on a quiet machine, for what takes well under one
            hung = not set_up.is_set()
        setup.join(30)  # released: a hung set-up goes on now
        waiting.join(10)
    finally:
        pool.close()
        holder.close()
        waiter.close()
    assert not hung, "the set-up waited for a process that waited for the set-up's lock"
    assert got_it.is_set()
