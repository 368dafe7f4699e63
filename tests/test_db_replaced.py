"""A SQLite file deleted or replaced under a running command stops it in one line, never reported as success."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_episode_scripts import Responder

from swm.cli import main
from swm.testing import FakeOpenAIServer, ScriptedChatModel


def _delete(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _replace(db: Path) -> None:
    fresh = db.with_name("fresh.db")
    sqlite3.connect(fresh).execute("create table other (x)").connection.close()
    _delete(db)
    os.replace(fresh, db)


def _other_run(path: Path) -> Path:
    """Write another run's database, six episodes in it, at ``path``."""
    with sqlite3.connect(path) as conn:
        conn.execute("create table other_run (episode text)")
        conn.executemany("insert into other_run values (?)", [(f"e{i}",) for i in range(6)])
    conn.close()
    return path


def _overwrite(db: Path) -> None:
    """``cp other.db run.db``: another database's bytes written over the file in place (same inode)."""
    shutil.copyfile(_other_run(db.with_name("other.db")), db)


WHAT = {_delete: "deleted", _replace: "replaced by another file", _overwrite: "overwritten in place by another file"}


def _at_call(n: int, act: Callable[[], None], respond: Any) -> Any:
    calls: list[int] = []

    def wrapped(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == n:
            act()
        return respond(*args)

    return wrapped


@pytest.mark.parametrize("fault", [_delete, _replace, _overwrite], ids=["deleted", "replaced", "overwritten"])
def test_bench_sotopia_stops_when_its_file_goes(tmp_path: Path, fault: Callable[[Path], None]) -> None:
    db = tmp_path / "run.db"
    llm = ScriptedChatModel(respond=_at_call(3, lambda: fault(db), Responder()))
    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "2", "--max-turns", "2",
            "--seats", "first", "--concurrency", "1", "--no-progress", "--db", str(db), "--thread-id", "S",
            "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(main, args, obj={"llm": llm})
    assert result.exit_code == 2, result.output
    assert f"error: the database {db} was {WHAT[fault]} while this run was writing to it" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out" / "sotopia.md").exists()
    if fault is _overwrite:  # the file that came in is kept whole, its rows with it
        aside = list(tmp_path.glob("run.db.arrived-*"))
        assert len(aside) == 1 and str(aside[0]) in result.output
        with sqlite3.connect(aside[0]) as conn:
            assert conn.execute("select count(*) from other_run").fetchone()[0] == 6


def test_learn_stops_when_its_file_is_deleted(tmp_path: Path) -> None:
    from bench.extra_graphs import SCRIPTS

    db, out = tmp_path / "run.db", tmp_path / "out"
    scripts = {**SCRIPTS, "AgentActionForModel": _at_call(4, lambda: _delete(db),
                                                          lambda prompt, body: SCRIPTS["AgentActionForModel"])}
    with FakeOpenAIServer(scripts=scripts) as fake:
        result = CliRunner().invoke(main, ["learn", "--cycles", "1", "--levels", "easy", "--families", "negotiation",
                                           "--episodes-per-level", "2", "--samples-per-task", "2", "--max-turns",
                                           "2", "--heldout-per-cell", "1", "--concurrency", "1", "--model",
                                           fake.model_spec, "--db", str(db), "--thread-id", "L", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"error: the database {db} was deleted while this run was writing to it" in result.output
    assert not (out / "report.md").exists() and "Traceback" not in result.output


def test_the_success_path_writes_the_episode_id(tmp_path: Path) -> None:
    from swm.checkpoints import ExperienceStore

    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "1", "--max-turns", "1",
            "--seats", "first", "--no-progress", "--db", str(tmp_path / "r.db"), "--thread-id", "S",
            "--out", str(tmp_path / "out")]
    assert CliRunner().invoke(main, args, obj={"llm": ScriptedChatModel(respond=Responder())}).exit_code == 0
    rows = list(ExperienceStore(tmp_path / "r.db").rows("select episode_id from episodes"))
    assert rows and all(r["episode_id"] for r in rows)


def _renamed_over(db: Path) -> None:
    """``cp donor.db t.db && mv t.db run.db``: another run's database renamed over the file (a new inode)."""
    shutil.copyfile(_other_run(db.with_name("donor.db")), db.with_name("t.db"))
    os.replace(db.with_name("t.db"), db)


def _donor_rows(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("select count(*) from other_run").fetchone()[0])


def test_learn_keeps_the_file_renamed_over_its_database_and_its_own_rows(tmp_path: Path) -> None:
    """The run's write-ahead log, left beside the file that arrived, must never be replayed into it."""
    from bench.extra_graphs import SCRIPTS

    db, out = tmp_path / "l.db", tmp_path / "out"
    scripts = {**SCRIPTS, "AgentActionForModel": _at_call(4, lambda: _renamed_over(db),
                                                          lambda prompt, body: SCRIPTS["AgentActionForModel"])}
    args = ["learn", "--cycles", "1", "--levels", "easy", "--families", "negotiation", "--episodes-per-level", "2",
            "--samples-per-task", "2", "--max-turns", "2", "--heldout-per-cell", "1", "--concurrency", "1",
            "--db", str(db), "--thread-id", "L", "--out", str(out)]
    with FakeOpenAIServer(scripts=scripts) as fake:
        first = CliRunner().invoke(main, [*args, "--model", fake.model_spec])
        assert first.exit_code == 2, first.output
        lines = [line for line in first.output.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and f"the database {db} was replaced by another file" in lines[0], first.output
        assert "Traceback" not in first.output
        assert _donor_rows(db) == 6, "the file that arrived is as it came"
        kept = list(tmp_path.glob("l.db.replaced-*"))
        assert len(kept) == 1 and f"--db {kept[0]}" in lines[0]
        with sqlite3.connect(kept[0]) as conn:  # the run's own rows: its checkpoints, whole
            assert conn.execute("select count(*) from checkpoints where thread_id = 'L'").fetchone()[0] > 0
        conn.close()
        again = CliRunner().invoke(main, [*args, "--model", fake.model_spec])
        assert again.exit_code == 0, again.output
        assert _donor_rows(db) == 6, "a rerun on the file that arrived keeps its rows"
        resumed = CliRunner().invoke(main, [*args[:-4], "--db", str(kept[0]), "--thread-id", "L", "--out",
                                            str(tmp_path / "resumed"), "--model", fake.model_spec])
        assert resumed.exit_code == 0 and "resuming thread" in resumed.output, resumed.output
