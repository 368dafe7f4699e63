"""The PostgreSQL backend: the experience store speaks the SQLite store's dialect, DDL is safe across processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from swm.checkpoints import ExperienceStore, open_store
from swm.checkpoints.postgres import PostgresExperienceStore, is_postgres, redact
from swm.cli import main


def test_urls_choose_postgres_and_passwords_never_show() -> None:
    assert is_postgres("postgresql://u@h/db") and is_postgres("postgres://h/db")
    assert not is_postgres("/tmp/postgresql.db")
    assert redact("postgresql://swm:s3cret@db.example:5432/runs") == "postgresql://swm:***@db.example:5432/runs"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_both_stores_answer_the_same_queries(kind: str, tmp_path: object, request: pytest.FixtureRequest) -> None:
    target = tmp_path / "s.db" if kind == "sqlite" else request.getfixturevalue("pg_url")  # type: ignore[operator]
    store = open_store(target)
    assert isinstance(store, ExperienceStore if kind == "sqlite" else PostgresExperienceStore)
    store.insert("things", {"id": "a", "n": 1, "ok": True, "meta": {"k": [1, 2]}, "score": 0.5}, pk="id")
    store.insert("things", {"id": "b", "n": 2, "ok": False, "meta": {}, "score": 1.5}, pk="id")
    store.insert("things", {"id": "a", "n": 9, "extra": "new column"}, pk="id", replace=True)
    store.insert("things", {"id": "b", "n": 99}, pk="id", ignore=True)
    rows = {r["id"]: r for r in store.rows("select * from things order by id")}
    assert rows["a"]["n"] == 9 and rows["a"]["extra"] == "new column"
    assert rows["a"]["ok"] is None and rows["a"]["score"] is None  # replace = the whole row, as INSERT OR REPLACE
    assert rows["b"]["n"] == 2 and rows["b"]["ok"] == 0 and rows["b"]["meta"] == "{}"
    assert list(store.rows("select sum(n) as s from things where ok = ? or ok is null", [0])) == [{"s": 11}]
    assert store.count("things", "n > ?", [1]) == 2 and store.count("missing") == 0
    store.insert("cells", {"run": "r", "cycle": 1, "v": "x"}, pk=("run", "cycle"), replace=True)
    store.insert("cells", {"run": "r", "cycle": 1, "v": "y"}, pk=("run", "cycle"), replace=True)
    assert [r["v"] for r in store.rows("select v from cells")] == ["y"]
    store.execute("update cells set v = ? where run = ?", ["z", "r"])
    store.execute("delete from things where id = ?", ["b"])
    assert [r["v"] for r in store.rows("select v from cells")] == ["z"] and store.count("things") == 1
    store.put_parse("k", story_hash="h", parser="p", prompt="parse@v1", task="tomi", s3ap={"a": 1},
                    report={"ok": True}, attempts=1)
    assert (store.get_parse("k") or {})["s3ap"] == {"a": 1} and store.get_parse("nope") is None
    store.close()


WRITER = textwrap.dedent("""
    import sys
    from swm.checkpoints import open_store
    store = open_store(sys.argv[1])
    for i in range(40):
        store.insert("shared", {"id": f"{sys.argv[2]}-{i}", "worker": sys.argv[2], "i": i,
                                f"col_{i % 5}": i}, pk="id")
    store.close()
""")


def test_two_processes_create_and_widen_one_table_without_collisions(pg_url: str) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, pg_url, w], stderr=subprocess.PIPE, text=True)
             for w in ("a", "b")]
    for p in procs:
        assert p.wait(120) == 0, p.stderr.read() if p.stderr else ""
    store = open_store(pg_url)
    assert store.count("shared") == 80
    assert {r["worker"]: r["n"] for r in store.rows("select worker, count(*) as n from shared group by worker")} \
        == {"a": 40, "b": 40}


def test_an_unreachable_database_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWM_POSTGRES_WAIT", "0.5")  # the default waits 10 s for a server that is starting
    result = CliRunner().invoke(main, ["parse", "-", "--db",
                                       "postgresql://swm:hunter2@127.0.0.1:1/none"], input="Sally left.")
    assert result.exit_code == 2, result.output
    assert "cannot open the PostgreSQL database" in result.output and "hunter2" not in result.output
    assert "after 0.5 s: connection to server at \"127.0.0.1\", port 1 failed: Connection refused" in result.output
