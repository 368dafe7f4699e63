"""The database's files made read-only under a running command: one line naming them, then a rerun pays no call twice.

Root writes a file whatever its mode, so as root the command runs as ``nobody`` for the permission
case (``chmod 444``), with its run folder its own (`bench.faults.run_user`). An immutable file
(``chattr +i``) refuses root too, and SQLite's shared memory mapped from it ended the process with
SIGBUS at its next write; that case needs a file system and a capability that allow ``chattr`` and
is skipped where they do not.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bench.faults import READ_ONLY_COMMANDS, ReadOnlyOutcome, can_chattr, run_read_only


def _one_clear_line(outcome: ReadOnlyOutcome, fix: str) -> None:
    assert outcome.first_rc == 2, (outcome.first_rc, outcome.first_stderr[-3000:])
    assert outcome.first_line.startswith("error: the database's files in "), outcome.first_line
    assert "cannot be written: run.db, run.db-wal, run.db-shm " in outcome.first_line, outcome.first_line
    assert fix in outcome.first_line and "then rerun with the same --db and --thread-id" in outcome.first_line
    assert "Traceback" not in outcome.first_stderr and "lease" not in outcome.first_stderr, outcome.first_stderr


@pytest.mark.parametrize("command", list(READ_ONLY_COMMANDS))
def test_files_made_read_only_stop_the_run_in_one_line(command: str) -> None:
    outcome = run_read_only(command, "chmod")
    _one_clear_line(outcome, "(chmod u+w run.db run.db-wal run.db-shm)")
    assert outcome.rerun_rc == 0, outcome.rerun_stderr[-3000:]
    assert outcome.kept and set(outcome.kept) <= set(outcome.rows), "nothing stored before the stop is lost"
    assert len(outcome.rows) == len(set(outcome.rows)), "nor stored twice"
    assert outcome.made == outcome.needed, "no call is paid twice: the steps in flight were written"


def test_files_made_immutable_stop_the_run_in_one_line_not_sigbus() -> None:
    with tempfile.TemporaryDirectory() as probe:
        if not can_chattr(Path(probe)):
            pytest.skip("chattr +i needs root with CAP_LINUX_IMMUTABLE and a file system that has the flag")
    outcome = run_read_only("sotopia", "chattr")
    _one_clear_line(outcome, "(chattr -i run.db run.db-wal run.db-shm)")
    assert outcome.rerun_rc == 0, outcome.rerun_stderr[-3000:]
    assert set(outcome.kept) <= set(outcome.rows) and len(outcome.rows) == len(set(outcome.rows)) == 2
    assert outcome.made <= outcome.needed + 1, "only the call in flight is paid again: its answer could not be written"
