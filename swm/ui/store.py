"""Read the experience store and the checkpoints without ever writing them: SQLite or PostgreSQL.

The browser opens a SQLite file through SQLite's read-only URI (``mode=ro``: any write fails in
SQLite itself) and a PostgreSQL database on a session whose transactions are read-only
(``default_transaction_read_only``), so no view, bug or crafted URL can change a run's data.
Queries use the store's dialect (``?`` placeholders; JSON kept as text) on both backends.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from swm.checkpoints.postgres import is_postgres, redact
from swm.checkpoints.store import StoreRecords
from swm.errors import InputError

PAGE = 50


def decode(value: object) -> Any:
    """Return a JSON text column as its value (other values as they are)."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class ReadOnlyStore:
    """A read-only connection to one ``--db`` (a SQLite file or a PostgreSQL URL)."""

    def __init__(self, target: str | Path) -> None:
        self.target = str(target)
        self.label = redact(self.target) if is_postgres(self.target) else str(Path(self.target).resolve())
        self.postgres = is_postgres(self.target)
        self._lock = threading.Lock()
        self._tables: set[str] | None = None
        if self.postgres:
            self._conn = self._connect_postgres()
        else:
            path = Path(self.target).expanduser()
            if not path.is_file():
                raise InputError(f"no store at {path}", "pass the --db a run wrote")
            self._conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
            self._conn.row_factory = sqlite3.Row

    def _connect_postgres(self) -> Any:
        import psycopg  # optional: the [postgres] extra
        from psycopg.conninfo import conninfo_to_dict, make_conninfo  # optional: the [postgres] extra
        from psycopg.rows import dict_row  # optional: the [postgres] extra

        params = conninfo_to_dict(self.target)  # keep the URL's own options (a search_path, say)
        params["options"] = f"{params.get('options') or ''} -c default_transaction_read_only=on".strip()
        try:
            return psycopg.connect(make_conninfo("", **params), autocommit=True, row_factory=dict_row)
        except psycopg.OperationalError as exc:
            raise InputError(f"cannot reach {self.label}: {str(exc).strip().splitlines()[0]}",
                             "start PostgreSQL or pass another --db") from exc

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[dict[str, Any]]:
        """Run one query and return its rows as dicts."""
        with self._lock:
            if self.postgres:
                query = sql.replace("%", "%%").replace("?", "%s")
                return [dict(r) for r in self._conn.execute(query, list(params)).fetchall()]
            return [dict(r) for r in self._conn.execute(sql, list(params)).fetchall()]

    def tables(self) -> set[str]:
        """Return the names of the store's tables (read once: a store only gains tables)."""
        if self._tables is None:
            sql = ("select table_name as name from information_schema.tables where table_schema = current_schema()"
                   if self.postgres else "select name from sqlite_master where type = 'table'")
            self._tables = {r["name"] for r in self.rows(sql)}
        return self._tables

    def has(self, table: str) -> bool:
        if table not in self.tables():
            self._tables = None  # a run may have created it since
        return table in self.tables()

    def select(self, table: str, where: str = "1 = 1", params: Iterable[object] = (), *, order: str = "",
               limit: int | None = None, offset: int = 0, json_columns: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Select rows of a table (none when the table does not exist), JSON columns decoded."""
        if not self.has(table):
            return []
        sql = f'select * from "{table}" where {where}' + (f" order by {order}" if order else "")
        if limit is not None:
            sql += f" limit {int(limit)} offset {int(offset)}"
        out = self.rows(sql, list(params))
        columns = list(json_columns)
        for row in out:
            for c in columns:
                row[c] = decode(row.get(c))
        return out

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class RecordsView(StoreRecords):
    """A `ReadOnlyStore` seen as the domain packages' `StoreRecords` (reads only), so the browser's
    summaries are the very functions the commands' reports use (`swm.games.metrics`, ...).
    """

    def __init__(self, store: ReadOnlyStore) -> None:
        self.store = store
        self.path = store.label

    def rows(self, sql: str, params: Iterable[object] | Mapping[str, object] = ()) -> Iterator[dict[str, Any]]:
        return iter(self.store.rows(sql, list(params) if not isinstance(params, Mapping) else []))

    def has_table(self, table: str) -> bool:
        return self.store.has(table)

    def count(self, table: str, where: str | None = None, params: Iterable[object] = ()) -> int:
        if not self.store.has(table):
            return 0
        sql = f'select count(*) as n from "{table}"' + (f" where {where}" if where else "")
        return int(self.store.rows(sql, list(params))[0]["n"])
