"""``python -m bench.faults --replaced``: another database renamed over a running ``swm learn``'s file, measured.

What a user does by mistake or a sync tool does on its own: ``cp donor.db t.db && mv t.db run.db`` while
``swm learn`` writes ``run.db``. The file that arrives is a new inode; the run's write-ahead log and shared
memory stay under the names SQLite pairs with it. The case runs ``swm learn`` once fault-free on the
donor's file (its episodes are the rows that arrive), then again on ``run.db`` with the donor renamed over
it during the 3rd acting call, then reruns the same command. It counts the donor's episodes left in
``run.db`` after the first run and after the rerun (lost = the donor's episodes minus those), and the
stopped run's own episodes kept, where swm says it kept them (``run.db.replaced-*``) or in ``run.db``.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.extra_graphs import SCRIPTS
from swm.testing import FakeOpenAIServer

LEARN = ["learn", "--cycles", "1", "--levels", "easy", "--families", "negotiation", "--episodes-per-level", "2",
         "--samples-per-task", "2", "--max-turns", "2", "--heldout-per-cell", "1", "--concurrency", "1",
         "--no-progress"]
CLI = "import sys; from swm.cli import main; sys.exit(main(sys.argv[1:]))"


@dataclass
class SwapOutcome:
    donor_episodes: int  # the rows the file that arrived held
    first_rc: int
    first_line: str
    donor_left_after_first: int
    rerun_rc: int
    donor_left_after_rerun: int
    own_kept: int  # the stopped run's episodes found afterwards
    own_where: str

    @property
    def lost_after_first(self) -> int:
        return self.donor_episodes - self.donor_left_after_first

    @property
    def lost_after_rerun(self) -> int:
        return self.donor_episodes - self.donor_left_after_rerun


def _episodes(db: Path, run: str) -> int | None:
    """Count ``run``'s episodes in ``db``, read-only (None: no such file, no table, or the file is damaged)."""
    if not db.exists():
        return None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("select count(*) from lifelong_episodes where run_id = ?", [run]).fetchone()[0])
    except sqlite3.DatabaseError:
        return None
    finally:
        conn.close()


def run_swap(at: int = 3) -> SwapOutcome:
    """Rename a donor database over ``swm learn``'s file during acting call ``at``, rerun; count what was kept."""
    calls: list[int] = []
    armed: list[Path] = []

    def act(prompt: str, body: dict[str, Any]) -> Any:
        calls.append(1)
        if armed and len(calls) == at:
            db = armed[0]
            shutil.copyfile(db.with_name("donor.db"), db.with_name("t.db"))
            os.replace(db.with_name("t.db"), db)
        return SCRIPTS["AgentActionForModel"]

    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory(prefix="swm-db-swap-") as name, \
            FakeOpenAIServer(scripts={**SCRIPTS, "AgentActionForModel": act}) as server:
        folder = Path(name)

        def swm(db: Path, thread: str) -> subprocess.CompletedProcess[str]:
            run = [*LEARN, "--model", server.model_spec, "--db", str(db), "--thread-id", thread,
                   "--out", str(folder / f"out-{thread}")]
            return subprocess.run([sys.executable, "-c", CLI, *run], env=env, capture_output=True, text=True,
                                  timeout=600)

        donor = swm(folder / "donor.db", "D")
        if donor.returncode != 0:
            raise RuntimeError(f"the donor's run failed: {donor.stderr[-2000:]}")
        donor_episodes = _episodes(folder / "donor.db", "D") or 0
        db = folder / "run.db"
        calls.clear()
        armed.append(db)
        first = swm(db, "R")
        armed.clear()
        after_first, own_in_place = _episodes(db, "D") or 0, _episodes(db, "R")
        rerun = swm(db, "R")
        after_rerun = _episodes(db, "D") or 0
        aside = sorted(folder.glob("run.db.replaced-*"))
        kept_aside = _episodes(aside[0], "R") if aside else None
        own, where = (kept_aside, aside[0].name) if kept_aside is not None else \
            (own_in_place, "in run.db, over the donor's pages") if own_in_place else (0, "nowhere")
    lines = first.stderr.strip().splitlines()
    return SwapOutcome(donor_episodes, first.returncode, lines[-1] if lines else "", after_first,
                       rerun.returncode, after_rerun, own, where)


def swap_markdown(o: SwapOutcome) -> str:
    return "\n".join([
        "Another `swm learn` database renamed over the running one's file during its 3rd acting call "
        "(`cp donor.db t.db && mv t.db run.db`), then the same command again:", "",
        "| donor's episodes | first run: exit | its last line | donor's lost after it | rerun exit | "
        "donor's lost after the rerun | the stopped run's episodes kept |", "|---|---|---|---|---|---|---|",
        f"| {o.donor_episodes} | {o.first_rc} | `{o.first_line[:200]}…` | {o.lost_after_first} | {o.rerun_rc} | "
        f"{o.lost_after_rerun} | {o.own_kept} ({o.own_where}) |", ""])
