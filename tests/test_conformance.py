"""LangGraph's own checkpointer conformance suite over every saver swm opens: all eight capabilities, passed.

``langgraph-checkpoint-conformance`` checks the storage contract (round trips, metadata, namespaces,
pending writes, listing filters, thread deletion) and, where a saver offers them, deleting a run's
checkpoints, copying a thread and pruning (which LangGraph's server calls and warns about when missing).
The savers: the SQLite file's, with its file checks (`FileCheckedSqliteSaver`, sync, its async interface on
worker threads), the async SQLite saver of the server and Studio (`checkpoints.studio`), and PostgreSQL's,
sync and async.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from swm.checkpoints import studio
from swm.checkpoints.backends import open_async_saver, open_saver

conformance = pytest.importorskip("langgraph.checkpoint.conformance",
                                  reason="langgraph-checkpoint-conformance is in the dev extra")

EXPECTED = {"put", "put_writes", "get_tuple", "list", "delete_thread", "delete_for_runs", "copy_thread", "prune"}


def _sync(target: Callable[[], str | Path]) -> Callable[[], AsyncIterator[Any]]:
    async def saver() -> AsyncIterator[Any]:
        with open_saver(target()) as opened:
            yield opened
    return saver


def _async(target: Callable[[], str | Path]) -> Callable[[], AsyncIterator[Any]]:
    async def saver() -> AsyncIterator[Any]:
        async with open_async_saver(target()) as opened:
            yield opened
    return saver


def _studio(target: Callable[[], str | Path]) -> Callable[[], AsyncIterator[Any]]:
    async def saver() -> AsyncIterator[Any]:
        os.environ["SWM_STUDIO_DB"] = str(target())
        try:
            async with studio.checkpointer() as opened:
                yield opened
        finally:
            os.environ.pop("SWM_STUDIO_DB", None)
    return saver


OPENERS = {"sync": _sync, "async": _async, "studio": _studio}


def _fresh_files(folder: Path) -> Callable[[], Path]:
    count = iter(range(1_000_000))
    return lambda: folder / f"c{next(count)}.db"


def _check(name: str, factory: Callable[[], AsyncIterator[Any]]) -> None:
    registered = conformance.checkpointer_test(name=name)(factory)
    report = asyncio.run(conformance.validate(registered))
    failed = {cap: result.failures for cap, result in report.results.items() if result.passed is not True}
    assert not failed, f"{name}: {failed}"
    assert set(report.results) == EXPECTED


@pytest.mark.parametrize("opener", list(OPENERS))
def test_the_sqlite_savers_pass_langgraphs_conformance_suite(tmp_path: Path, opener: str) -> None:
    _check(f"sqlite {opener}", OPENERS[opener](_fresh_files(tmp_path)))


@pytest.mark.parametrize("opener", ["sync", "async"])
def test_the_postgres_savers_pass_langgraphs_conformance_suite(pg_url: str, opener: str) -> None:
    _check(f"postgres {opener}", OPENERS[opener](lambda: pg_url))
