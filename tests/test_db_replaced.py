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


def _overwrite(db: Path) -> None:
    """``cp other.db run.db``: another database's bytes written over the file in place (same inode)."""
    other = db.with_name("other.db")
    with sqlite3.connect(other) as conn:
        conn.execute("create table other_run (episode text)")
        conn.executemany("insert into other_run values (?)", [(f"e{i}",) for i in range(6)])
    conn.close()
    shutil.copyfile(other, db)


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
