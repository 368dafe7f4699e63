"""Bad input is refused in one line with exit code 2: binary or mis-encoded stories, JSONL rows, --db files."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from swm.checkpoints.health import quick_check
from swm.cli import main

UNREACHABLE = "m@http://127.0.0.1:9/v1"  # any model call would fail with exit 3, not 2


def refused(result: Result, *fragments: str) -> str:
    """Assert a one-line error with exit code 2 that contains every fragment; return the line."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    # swm's own errors, or click's for an option value it checks itself (a folder as --db)
    errors = [line for line in result.output.splitlines() if line.startswith(("error: ", "Error: "))]
    assert len(errors) == 1, result.output
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def parse(story: Path, db: Path, *extra: str) -> Result:
    return CliRunner().invoke(main, ["parse", str(story), "--db", str(db), "--model", UNREACHABLE, *extra])


def test_a_binary_story_is_refused(tmp_path: Path) -> None:
    story = tmp_path / "story.bin"
    story.write_bytes(bytes(range(256)) * 8)
    refused(parse(story, tmp_path / "a.db"), "story.bin looks binary (it holds NUL bytes)")


def test_a_latin1_story_needs_its_encoding(tmp_path: Path) -> None:
    story = tmp_path / "story.txt"
    story.write_bytes("Zoé put the café key in the box. Max left.".encode("latin-1"))
    refused(parse(story, tmp_path / "a.db"), "story.txt is not valid utf-8 text (byte 2: b'\\xe9')", "--encoding")
    accepted = parse(story, tmp_path / "a.db", "--encoding", "latin-1", "--max-retries", "0")
    assert accepted.exit_code == 3 and "cannot reach the model" in accepted.output  # read, then sent
    refused(parse(story, tmp_path / "a.db", "--encoding", "klingon"), "unknown text encoding 'klingon'")


def test_a_jsonl_row_missing_its_question_names_file_line_and_field(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    rows = [{"id": "1", "story": "A. B.", "question": "Where?", "answer": "box"}, {},
            {"id": "2", "story": "A. B.", "answer": "box"}]
    data.write_text("\n".join(json.dumps(r) if r else "" for r in rows) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["bench", "tom", "--benchmark", "tomi", "--data", str(data), "--model",
                                       UNREACHABLE, "--db", str(tmp_path / "a.db")])
    refused(result, "rows.jsonl:3: the row has no 'question' field", "every row needs id, story, question, answer")


def test_a_scenario_row_that_is_not_an_object_names_its_line(tmp_path: Path) -> None:
    data = tmp_path / "scenarios.jsonl"
    data.write_text('["not", "an", "object"]\n', encoding="utf-8")
    result = CliRunner().invoke(main, ["play", "--scenario", str(data), "--model", UNREACHABLE,
                                       "--db", str(tmp_path / "a.db")])
    refused(result, "scenarios.jsonl:1 is a JSON list, not an object")


@pytest.mark.parametrize("make, fragment", [
    (lambda p: p.write_text("just some notes\n"), "is not a SQLite database"),
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: None, "cannot create the database"),
], ids=["text file", "folder", "under a file"])
def test_an_unusable_db_is_one_line(tmp_path: Path, make: object, fragment: str) -> None:
    db = tmp_path / "notes.db"
    if fragment == "cannot create the database":
        (tmp_path / "file").write_text("x")
        db = tmp_path / "file" / "swm.db"
    else:
        make(db)  # type: ignore[operator]
    story = tmp_path / "story.txt"
    story.write_text("Max hid the key. Zoe left.", encoding="utf-8")
    refused(parse(story, db), fragment)


def test_a_read_only_db_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from swm.checkpoints import health

    db = tmp_path / "ro.db"
    sqlite3.connect(db).execute("create table t (x)").connection.close()
    db.chmod(0o444)
    if os.geteuid() == 0:  # root writes read-only files anyway: make the check see what a user would
        real = os.access
        monkeypatch.setattr(health.os, "access", lambda path, mode: mode != os.W_OK and real(path, mode)
                            if Path(path) == db else real(path, mode))
    story = tmp_path / "story.txt"
    story.write_text("Max hid the key. Zoe left.", encoding="utf-8")
    refused(parse(story, db), "ro.db is read-only: its file cannot be written")


def _damage_the_middle(db: Path) -> None:
    """Overwrite one page in the middle of the file, as a bad disk sector would."""
    conn = sqlite3.connect(db)
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.close()
    with db.open("r+b") as handle:
        handle.seek(page * (pages // 2))
        handle.write(b"\xde\xad\xbe\xef" * (page // 4))


def test_a_db_damaged_in_the_middle_is_refused_before_use(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    conn = sqlite3.connect(db)  # written by another process, as far as this one knows
    conn.execute("create table notes (id integer primary key, text text)")
    conn.executemany("insert into notes values (?, ?)", ((i, f"row {i} " * 40) for i in range(600)))
    conn.commit()
    conn.close()
    assert quick_check(db) == []
    _damage_the_middle(db)
    assert quick_check(db), "SQLite sees the damage"
    story = tmp_path / "story.txt"
    story.write_text("Max hid the key. Zoe left.", encoding="utf-8")
    line = refused(parse(story, db), "run.db is damaged: ", "restore it from a copy")
    assert len(line) < 400


def test_two_scenarios_with_one_id_are_refused_naming_both_lines(tmp_path: Path) -> None:
    from swm.scenarios import SHIPPED

    first, second = SHIPPED.read_text(encoding="utf-8").splitlines()[:2]
    twin = json.dumps({**json.loads(second), "id": json.loads(first)["id"]})
    data = tmp_path / "scenarios.jsonl"
    data.write_text(f"{first}\n\n{twin}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["bench", "sotopia", "--data", str(data), "--model", UNREACHABLE,
                                       "--db", str(tmp_path / "a.db"), "--out", str(tmp_path / "out")])
    refused(result, f"duplicate scenario id '{json.loads(first)['id']}' at {data}:1 and {data}:3")


def test_two_questions_with_one_id_are_refused_naming_both_lines(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    rows = [{"id": str(i % 2), "story": "A. B.", "question": "Where?", "answer": "box"} for i in range(3)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["bench", "tom", "--benchmark", "tomi", "--data", str(data), "--model",
                                       UNREACHABLE, "--db", str(tmp_path / "a.db"), "--out", str(tmp_path / "o")])
    refused(result, f"duplicate question id '0' at {data}:1 and {data}:3")
