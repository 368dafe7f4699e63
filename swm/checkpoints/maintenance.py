"""Delete a run's checkpoints, copy a thread, prune threads: the SQLite savers' share of LangGraph's contract.

LangGraph's savers may offer ``delete_for_runs``, ``copy_thread`` and ``prune`` (the server calls
``adelete_for_runs`` when a run is cancelled or rolled back, ``aprune`` to keep threads small, and
warns when they are missing); ``langgraph-checkpoint-sqlite`` offers none of them. Each is a few
statements over the saver's two tables (``checkpoints``, ``writes``), the same for the sync saver's
``sqlite3`` connection and the async one's ``aiosqlite``; ``tests/test_conformance.py`` runs
LangGraph's own conformance suite (``langgraph-checkpoint-conformance``) over every saver swm opens.

``prune(strategy="keep_latest")`` keeps the newest checkpoint of each namespace of a thread, with its
pending writes, as ``PostgresSaver.prune`` does; like it, it refuses a thread that uses a
``DeltaChannel`` (its state is rebuilt from the writes of older checkpoints), which swm's graphs never do.
"""

from __future__ import annotations

from collections.abc import Sequence

Statements = list[tuple[str, list[str]]]
PRUNE_STRATEGIES = ("keep_latest", "delete")
_RUN_ID = "json_extract(CAST(metadata AS TEXT), '$.run_id')"
_DELTA = ("json_extract(CAST(metadata AS TEXT), '$.counters_since_delta_snapshot') IS NOT NULL OR "
          "json_extract(CAST(metadata AS TEXT), '$.delta_writes_versioned') IS NOT NULL")


def _marks(values: Sequence[str]) -> str:
    return ", ".join("?" * len(values))


def _ids(values: Sequence[str], what: str) -> list[str]:
    if isinstance(values, str):
        raise TypeError(f"{what} must be a sequence of ids, not a str")
    return [str(v) for v in values]


def delete_for_runs(run_ids: Sequence[str]) -> Statements:
    """Return the statements that delete the checkpoints of ``run_ids`` (metadata ``run_id``) and their writes."""
    runs = _ids(run_ids, "run_ids")
    if not runs:
        return []
    return [(f"DELETE FROM writes WHERE (thread_id, checkpoint_ns, checkpoint_id) IN (SELECT thread_id, "
             f"checkpoint_ns, checkpoint_id FROM checkpoints WHERE {_RUN_ID} IN ({_marks(runs)}))", runs),
            (f"DELETE FROM checkpoints WHERE {_RUN_ID} IN ({_marks(runs)})", runs)]


def copy_thread(source: str, target: str) -> Statements:
    """Return the statements that copy every checkpoint and write of thread ``source`` to thread ``target``."""
    return [("INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, "
             "type, checkpoint, metadata) SELECT ?, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
             "checkpoint, metadata FROM checkpoints WHERE thread_id = ?", [str(target), str(source)]),
            ("INSERT OR REPLACE INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, "
             "channel, type, value) SELECT ?, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, "
             "type, value FROM writes WHERE thread_id = ?", [str(target), str(source)])]


def delta_threads(thread_ids: Sequence[str]) -> tuple[str, list[str]]:
    """Return the query for those of ``thread_ids`` that use a ``DeltaChannel`` (keep_latest refuses them)."""
    threads = _ids(thread_ids, "thread_ids")
    return f"SELECT DISTINCT thread_id FROM checkpoints WHERE thread_id IN ({_marks(threads)}) AND ({_DELTA})", threads


def prune(thread_ids: Sequence[str], strategy: str = "keep_latest") -> Statements:
    """Return the statements that prune ``thread_ids``: all their checkpoints (``delete``), or all but the newest
    of each namespace (``keep_latest``), with the writes of those deleted. Check `delta_threads` first."""
    threads = _ids(thread_ids, "thread_ids")
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"Unknown prune strategy: {strategy!r} (one of {', '.join(PRUNE_STRATEGIES)})")
    if not threads:
        return []
    where = f"thread_id IN ({_marks(threads)})"
    if strategy == "delete":
        return [(f"DELETE FROM writes WHERE {where}", threads), (f"DELETE FROM checkpoints WHERE {where}", threads)]
    older = (f"{where} AND (thread_id, checkpoint_ns, checkpoint_id) NOT IN (SELECT thread_id, checkpoint_ns, "
             f"MAX(checkpoint_id) FROM checkpoints WHERE {where} GROUP BY thread_id, checkpoint_ns)")
    return [(f"DELETE FROM writes WHERE {older}", threads * 2), (f"DELETE FROM checkpoints WHERE {older}", threads * 2)]


def refuse_delta(found: Sequence[str]) -> None:
    """Raise as ``PostgresSaver.prune`` does when keep_latest meets threads that use a ``DeltaChannel``."""
    if found:
        raise NotImplementedError(f"keep_latest can't prune threads that use a DeltaChannel: {', '.join(found)}")
