"""The database's files made read-only under a running command: one line naming them, then a rerun pays no call twice.

Root writes a file whatever its mode, so as root the command runs as ``nobody`` for the permission
case (``chmod 444``), with its run folder its own. An immutable file (``chattr +i``) refuses root too,
and SQLite's shared memory mapped from it ends the process with SIGBUS at its first write; that case
needs a file system and a capability that allow ``chattr`` and is skipped where they do not.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bench.extra_graphs import SCRIPTS
from swm.cli import main
from swm.testing import FakeOpenAIServer

NOBODY = 65534
FILES = ("run.db", "run.db-wal", "run.db-shm")
CLI = "import sys; from swm.cli import main; sys.exit(main(sys.argv[1:]))"
COMMANDS = {
    "sotopia": (["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "2", "--max-turns", "2",
                 "--seats", "first", "--concurrency", "1", "--no-progress", "--thread-id", "R"],
                "select episode_id from episodes where status = 'done'"),
    "learn": (["learn", "--cycles", "1", "--levels", "easy", "--families", "negotiation", "--episodes-per-level",
               "2", "--samples-per-task", "2", "--max-turns", "2", "--heldout-per-cell", "1", "--concurrency", "1",
               "--no-progress", "--thread-id", "R"],
              "select episode_id from lifelong_episodes"),
}
FAULT_AT = 3  # the acting call during which the files become read-only


def _chmod(folder: Path, mode: int) -> None:
    for name in FILES:
        if (folder / name).exists():
            os.chmod(folder / name, mode)


def _chattr(folder: Path, flag: str) -> None:
    for name in FILES:
        if (folder / name).exists():
            subprocess.run(["chattr", flag, str(folder / name)], check=True, capture_output=True)


@pytest.fixture
def run_folder() -> Iterator[Path]:
    """A folder the command's user owns, outside pytest's own (which only root may enter)."""
    with tempfile.TemporaryDirectory(prefix="swm-read-only-") as name:
        folder = Path(name)
        if os.geteuid() == 0:
            os.chown(folder, NOBODY, NOBODY)
        yield folder
        _chattr_quietly(folder)


def _chattr_quietly(folder: Path) -> None:
    """Leave no immutable file behind (it could not be deleted)."""
    for name in FILES:
        if (folder / name).exists():
            try:
                subprocess.run(["chattr", "-i", str(folder / name)], capture_output=True)
            except FileNotFoundError:  # no chattr: nothing was made immutable
                return


# as root: the command runs as nobody, still able to read (never write) what root reads, since the interpreter
# and the checkout may sit in root's home; without that capability (not in the bounding set), as plain nobody
AS_NOBODY = [["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=+dac_read_search",
              "--ambient-caps=+dac_read_search"],
             ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]]


def _run_user() -> list[str]:
    """Return the prefix that runs swm as a user whom file permissions bind: none unless this is root."""
    if os.geteuid() != 0:
        return []
    tried = []
    for prefix in AS_NOBODY:
        probe = subprocess.run([*prefix, sys.executable, "-c", "import swm.cli"], capture_output=True, text=True)
        if probe.returncode == 0:
            return prefix
        tried.append(f"{' '.join(prefix[:4])}…: {probe.stderr.strip()[-300:]}")
    pytest.fail(f"cannot run swm as uid {NOBODY} (needed: root writes read-only files): {'; '.join(tried)}")


def _swm(args: list[str], folder: Path, prefix: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-c", CLI, *args], env={**os.environ, "HOME": str(folder)},
                          capture_output=True, text=True, timeout=300)


def _stored(db: Path, sql: str) -> list[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [row[0] for row in conn.execute(sql)]


def _baseline(command: str, server: FakeOpenAIServer) -> int:
    """Run the command fault-free (here, in a folder of its own); return the requests it needs."""
    args, _ = COMMANDS[command]
    with tempfile.TemporaryDirectory(prefix="swm-baseline-") as name:
        result = CliRunner().invoke(main, [*args, "--model", server.model_spec, "--db", f"{name}/run.db", "--out",
                                           f"{name}/out"])
    assert result.exit_code == 0, result.output
    needed = server.requests
    server.reset()
    return needed


def _read_only_mid_run(command: str, folder: Path, fault: Callable[[], None], restore: Callable[[], None],
                       prefix: list[str]) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str],
                                                 int, int]:
    """Run ``command`` with the files made read-only (``fault``) during an acting call; ``restore`` them; rerun.

    Returns both runs, the requests the fault-free run needs and the requests both runs made.
    """
    calls: list[int] = []

    def act(prompt: str, body: dict[str, Any]) -> Any:
        calls.append(1)
        if len(calls) == FAULT_AT + baseline_calls:
            fault()
        return SCRIPTS["AgentActionForModel"]

    args, _ = COMMANDS[command]
    with FakeOpenAIServer(scripts={"AgentActionForModel": act}) as fake:
        baseline_calls = 0
        needed = _baseline(command, fake)
        baseline_calls = len(calls)
        run = [*args, "--model", fake.model_spec, "--db", str(folder / "run.db"), "--out", str(folder / "out")]
        first = _swm(run, folder, prefix)
        assert len(calls) >= FAULT_AT + baseline_calls, "the fault fired"
        restore()
        second = _swm(run, folder, prefix)
        made = fake.requests
    return first, second, needed, made


def _one_clear_line(result: subprocess.CompletedProcess[str], folder: Path, what: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: the database's files in {folder} cannot be written: "), last
    assert what in last and "then rerun with the same --db and --thread-id" in last, last
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", list(COMMANDS))
def test_files_made_read_only_stop_the_run_in_one_line(run_folder: Path, command: str) -> None:
    first, second, needed, made = _read_only_mid_run(command, run_folder, lambda: _chmod(run_folder, 0o444),
                                                     lambda: _chmod(run_folder, 0o644), _run_user())
    _one_clear_line(first, run_folder, "chmod u+w")
    kept = _stored(run_folder / "run.db", COMMANDS[command][1])
    assert second.returncode == 0, second.stderr[-3000:]
    rows = _stored(run_folder / "run.db", COMMANDS[command][1])
    assert set(kept) <= set(rows) and len(rows) == len(set(rows)), "nothing stored before is lost or doubled"
    assert made == needed, "no call is paid twice: what finished before the stop was written"


def _can_chattr(folder: Path) -> bool:
    probe = folder / "probe"
    probe.write_text("x")
    try:
        made = subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode == 0
    except FileNotFoundError:  # no chattr (e2fsprogs) on this machine
        made = False
    if made:
        subprocess.run(["chattr", "-i", str(probe)], check=True)
    probe.unlink()
    return made


def test_files_made_immutable_stop_the_run_in_one_line_not_sigbus(run_folder: Path) -> None:
    if not _can_chattr(run_folder):
        pytest.skip("chattr +i needs root with CAP_LINUX_IMMUTABLE and a file system that has the flag")
    first, second, needed, made = _read_only_mid_run("sotopia", run_folder, lambda: _chattr(run_folder, "+i"),
                                                     lambda: _chattr(run_folder, "-i"), prefix=[])
    _one_clear_line(first, run_folder, "chattr -i")
    assert second.returncode == 0, second.stderr[-3000:]
    rows = _stored(run_folder / "run.db", COMMANDS["sotopia"][1])
    assert len(rows) == len(set(rows)) == 2
    assert made <= needed + 1, "only the call in flight is paid again: its answer could not be written"
