"""The experience store: append-only tables in SQLite through sqlite-utils.

Tables are created on first use by whoever writes them; this module creates the ones the core
needs (``parses``, the parse cache keyed by story hash, parser and prompt) and gives every
writer one lock, so graph worker threads can share a connection.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from swm.checkpoints.health import absolute, ensure_same_file, file_identity
from swm.checkpoints.savers import connect
from swm.checkpoints.writable import ensure_writable
from swm.credentials import redact_text

FAILED_REPLY_CHARS = 8_000  # a reply kept for audit is cut here: a runaway model can send megabytes
PrimaryKey = str | Iterable[str] | None  # a table's key column, or its columns, or none


def _columns(pk: PrimaryKey) -> str | tuple[str, ...] | None:
    return pk if pk is None or isinstance(pk, str) else tuple(pk)


class StoreRecords:
    """The experience store of any backend: the table primitives, and the records kept the same way.

    Domain code takes a ``StoreRecords``; SQLite and PostgreSQL implement the primitives below.
    """

    path: str

    def insert(self, table: str, row: Mapping[str, object], *, pk: PrimaryKey = None, replace: bool = False,
               ignore: bool = False) -> None:
        raise NotImplementedError

    def insert_all(self, table: str, rows: Iterable[Mapping[str, object]], *, pk: PrimaryKey = None,
                   replace: bool = False, ignore: bool = False) -> None:
        raise NotImplementedError

    def rows(self, sql: str, params: Iterable[object] | Mapping[str, object] = ()) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def count(self, table: str, where: str | None = None, params: Iterable[object] = ()) -> int:
        raise NotImplementedError

    def has_table(self, table: str) -> bool:
        raise NotImplementedError

    def columns(self, table: str) -> set[str]:
        raise NotImplementedError

    def create_table(self, table: str, columns: Mapping[str, type], *, pk: PrimaryKey = None,
                     indexes: Iterable[Iterable[str]] = ()) -> None:
        raise NotImplementedError

    def create_index(self, table: str, columns: Iterable[str]) -> None:
        raise NotImplementedError

    def execute(self, sql: str, params: Iterable[object] = ()) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def get(self, table: str, key_column: str, key: object, json_columns: Iterable[str] = ()) -> dict[str, Any] | None:
        """Return the row whose ``key_column`` is ``key`` with its JSON columns decoded, or None."""
        if not self.has_table(table):
            return None
        found = list(self.rows(f'select * from "{table}" where "{key_column}" = ? limit 1', [key]))
        if not found:
            return None
        row = dict(found[0])
        for column in json_columns:
            if isinstance(row.get(column), str):
                try:
                    row[column] = json.loads(row[column])
                except ValueError:
                    pass
        return row

    # ---- the parse cache ----------------------------------------------------------------
    def get_parse(self, key: str) -> dict[str, Any] | None:
        """Return a cached parse row, with ``s3ap`` and ``report`` decoded, or None."""
        found = list(self.rows("select * from parses where key = ?", [key]))
        if not found:
            return None
        row = found[0]
        return {**row, "s3ap": json.loads(row["s3ap"]), "report": json.loads(row["report"])}

    def put_parse(self, key: str, *, story_hash: str, parser: str, prompt: str, task: str,
                  s3ap: Mapping[str, object], report: Mapping[str, object], attempts: int) -> None:
        self.insert("parses", {"key": key, "story_hash": story_hash, "parser": parser, "prompt": prompt,
                               "task": task, "s3ap": dict(s3ap), "report": dict(report),
                               "attempts": attempts, "created": time.time()}, pk="key", replace=True)

    # ---- replies that did not fit, kept for audit ---------------------------------------
    def put_failed_reply(self, *, node: str, model: str, error: str, raw: str, key: str = "") -> None:
        """Keep a model reply that did not fit its schema, cut to `FAILED_REPLY_CHARS` characters.

        ``key`` names what it was for (a story hash, an episode id); ``raw_chars`` is the full length.
        """
        self.insert("failed_replies", {"node": node, "key": key, "model": model, "error": error[:1000],
                                       "raw": raw[:FAILED_REPLY_CHARS], "raw_chars": len(raw),
                                       "created": time.time()})

    def failed_replies(self, key: str | None = None) -> list[dict[str, Any]]:
        """Return the kept replies that did not fit (those for ``key`` when given), oldest first."""
        if not self.has_table("failed_replies"):
            return []
        where, params = ("where key = ?", [key]) if key is not None else ("", [])
        return list(self.rows(f"select * from failed_replies {where} order by created", params))



class ExperienceStore(StoreRecords):
    """One SQLite file of runs, parses, episodes, turns, pairs and metrics."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        self.conn = connect(path)
        self.identity_path = absolute(path)
        self.identity = file_identity(self.identity_path)
        self.db = sqlite_utils.Database(self.conn)
        self.lock = threading.RLock()
        self._ensure_core_tables()

    def _ensure_core_tables(self) -> None:
        with self.lock:
            if "parses" not in self.db.table_names():
                self.db.table("parses").create(
                    {"key": str, "story_hash": str, "parser": str, "prompt": str, "task": str,
                     "s3ap": str, "report": str, "attempts": int, "created": float},
                    pk="key",
                )
                self.db.table("parses").create_index(["story_hash"])

    # ---- generic rows -------------------------------------------------------------------
    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the store lock and SQLite's write lock (``BEGIN IMMEDIATE``) for one write.

        sqlite-utils writes in a deferred transaction that may read before it writes; when the
        checkpointer's connection to the same file commits in between, SQLite refuses the upgrade
        with "database is locked" at once, without waiting (WAL's busy-snapshot rule). Taking the
        write lock first makes the write wait its turn instead (bench/README.md: store writes).
        """
        with self.lock:
            ensure_same_file(self.identity_path, self.identity)
            if not self.conn.in_transaction:
                self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.rollback()
                raise
            if self.conn.in_transaction:
                self.conn.commit()
            ensure_writable(self.identity_path, landed=True)

    def insert(self, table: str, row: Mapping[str, object], *, pk: PrimaryKey = None,
               replace: bool = False, ignore: bool = False) -> None:
        """Append a row (dict/list values are stored as JSON text)."""
        clean = {k: _jsonable(v) for k, v in row.items()}
        with self._writing():
            self.db[table].insert(clean, pk=_columns(pk), replace=replace, ignore=ignore, alter=True)  # type: ignore[union-attr]

    def insert_all(self, table: str, rows: Iterable[Mapping[str, object]], *, pk: PrimaryKey = None,
                   replace: bool = False, ignore: bool = False) -> None:
        with self._writing():
            self.db[table].insert_all(  # type: ignore[union-attr]
                ({k: _jsonable(v) for k, v in r.items()} for r in rows),
                pk=_columns(pk), replace=replace, ignore=ignore, alter=True)

    def rows(self, sql: str, params: Iterable[object] | Mapping[str, object] = ()) -> Iterator[dict[str, Any]]:
        with self.lock:
            result = list(self.db.query(sql, params))  # type: ignore[arg-type]
        return iter(result)

    def count(self, table: str, where: str | None = None, params: Iterable[object] = ()) -> int:
        with self.lock:
            if table not in self.db.table_names():
                return 0
            return int(self.db[table].count_where(where or "1", list(params)))  # type: ignore[union-attr]

    def has_table(self, table: str) -> bool:
        with self.lock:
            return table in self.db.table_names()

    def columns(self, table: str) -> set[str]:
        """Return a table's column names (empty when it does not exist)."""
        with self.lock:
            return set(self.db.table(table).columns_dict) if table in self.db.table_names() else set()

    def create_table(self, table: str, columns: Mapping[str, type], *, pk: PrimaryKey = None,
                     indexes: Iterable[Iterable[str]] = ()) -> None:
        """Create a table (and its indexes) unless it exists; columns map names to Python types."""
        with self._writing():
            if table not in self.db.table_names():
                self.db.table(table).create(dict(columns), pk=_columns(pk))  # type: ignore[union-attr]
            for index in indexes:
                self.db.table(table).create_index(list(index), if_not_exists=True)  # type: ignore[union-attr]

    def create_index(self, table: str, columns: Iterable[str]) -> None:
        with self._writing():
            self.db.table(table).create_index(list(columns), if_not_exists=True)  # type: ignore[union-attr]

    def execute(self, sql: str, params: Iterable[object] = ()) -> None:
        """Run one write statement (update, delete) in its own transaction."""
        with self._writing():
            self.conn.execute(sql, list(params))

    def close(self) -> None:
        self.conn.close()


_SERVED: list[StoreRecords] = []  # the store a server process opened for every run (at most one)


def serve_store(store: StoreRecords | None) -> None:
    """Make ``store`` the experience store of every run in this process that brings none (None: stop).

    `checkpoints.studio` calls it when ``langgraph dev`` or a server starts, so server runs read
    and write the same database as the CLI, not a store that dies with the run.
    """
    _SERVED.clear()
    if store is not None:
        _SERVED.append(store)


def served_store() -> StoreRecords | None:
    """Return the store `serve_store` set, or None (a library or CLI process)."""
    return _SERVED[0] if _SERVED else None


def _jsonable(value: object) -> object:
    """A value as the store keeps it: containers and models as JSON text, every text with its keys hidden."""
    if isinstance(value, dict | list | tuple):
        value = json.dumps(value, ensure_ascii=False, default=str)
    elif hasattr(value, "model_dump_json"):
        value = value.model_dump_json()
    return redact_text(value) if isinstance(value, str) else value
