"""Faults of the disk, the database server and the output folder: resumed or one line, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from swm.checkpoints import open_store
from swm.cli import main
from swm.testing import FakeOpenAIServer

TOM = ["bench", "tom", "--benchmark", "sim", "--n", "1", "--modes", "cot", "--concurrency", "1", "--no-progress",
       "--max-retries", "1", "--thread-id", "E"]


def _with_options(pg_url: str, **settings: str) -> str:
    """Add ``-c name=value`` server settings and an application name to a test URL (it holds a search_path)."""
    extra = "".join(f"%20-c{k}%3D{v}" for k, v in settings.items())
    return pg_url + extra


def test_a_terminated_postgres_connection_is_replaced_and_nothing_is_lost(pg_url: str, tmp_path: Path) -> None:
    """The server ends every connection of the run mid-way (a restart, a failover, an idle timeout)."""
    import psycopg

    name = f"swm-fault-{uuid.uuid4().hex[:8]}"
    url = f"{pg_url}&application_name={name}"
    answered: list[int] = []

    def answer(prompt: str, body: dict[str, Any]) -> dict[str, str]:
        answered.append(1)
        if len(answered) == 3:
            with psycopg.connect(pg_url, autocommit=True) as admin:
                ended = admin.execute("select count(pg_terminate_backend(pid)) from pg_stat_activity "
                                      "where application_name = %s", [name]).fetchone()
            assert ended and ended[0] > 0
        return {"reasoning": "It moved.", "answer": "basket"}

    with FakeOpenAIServer(scripts={"ReasonedAnswer": answer}) as fake:
        result = CliRunner().invoke(main, [*TOM, "--model", fake.model_spec, "--db", url, "--out", str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert fake.stats()["attempts"] == 6, "no call paid twice"
    rows = list(open_store(pg_url).rows("select key, status from tom_results"))
    assert len(rows) == len({r["key"] for r in rows}) == 6 and {r["status"] for r in rows} == {"done"}


def test_a_statement_timeout_is_one_line_and_exit_3(pg_url: str, tmp_path: Path) -> None:
    import psycopg

    with FakeOpenAIServer() as fake:
        first = CliRunner().invoke(main, [*TOM, "--model", fake.model_spec, "--db", pg_url, "--out", str(tmp_path)])
        assert first.exit_code == 0, first.output
        with psycopg.connect(pg_url) as holder:  # another process holds the lease table (a long transaction)
            holder.execute("lock table swm_leases in access exclusive mode")
            result = CliRunner().invoke(main, [*TOM, "--model", fake.model_spec, "--out", str(tmp_path),
                                               "--db", _with_options(pg_url, statement_timeout="300")])
    assert result.exit_code == 3, result.output
    assert "error: the PostgreSQL server cancelled a statement (canceling statement due to statement timeout)" \
        in result.output and "raise statement_timeout" in result.output and "Traceback" not in result.output


def test_an_unwritable_out_is_refused_before_the_first_call(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with FakeOpenAIServer() as fake:
        result = CliRunner().invoke(main, [*TOM, "--model", fake.model_spec, "--db", str(tmp_path / "r.db"),
                                           "--out", str(tmp_path / "file" / "out")])
        assert fake.stats()["attempts"] == 0, "refused before any model call was paid"
    assert result.exit_code == 2 and f"error: cannot write to --out {tmp_path / 'file' / 'out'}" in result.output


DISK_LIMIT = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, as on a full disk
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from swm.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_full_disk_is_one_line_and_the_rerun_finishes(tmp_path: Path) -> None:
    """Files cannot grow past a limit (RLIMIT_FSIZE: the process's own full disk) part-way through the run."""
    db = tmp_path / "r.db"
    with FakeOpenAIServer() as fake:
        args = [*TOM, "--model", fake.model_spec, "--db", str(db), "--out", str(tmp_path / "out")]
        full = subprocess.run([sys.executable, "-c", DISK_LIMIT, str(160_000), *args], capture_output=True,
                              text=True, timeout=300)
        assert full.returncode == 2, full.stderr
        assert "error: writing the database failed (disk I/O error" in full.stderr or \
            "error: the disk holding the database is full" in full.stderr or \
            "error: no space left to write" in full.stderr, full.stderr
        assert "Traceback" not in full.stderr and "finished steps are checkpointed" in full.stderr
        paid = fake.stats()["attempts"]
        again = CliRunner().invoke(main, args)
        assert again.exit_code == 0, again.output
        assert fake.stats()["attempts"] <= 6 + 1, f"{paid} before, at most the call in flight again"
    rows = list(open_store(db).rows("select key, status from tom_results"))
    assert len(rows) == len({r["key"] for r in rows}) == 6 and {r["status"] for r in rows} == {"done"}
    assert json.loads((tmp_path / "out" / "tom_tomi-sim.json").read_text())
