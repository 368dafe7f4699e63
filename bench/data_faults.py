"""``python -m bench.data_faults``: faults of the data and the ground a run stands on, counted.

Each case runs the real ``swm bench tom`` (the simulated ToMi set, 6 questions, CoT) in a child
process against the loopback fake server, injects one fault, reruns the same command when the
fault stopped it, and counts rows lost (questions the run never stored as done), rows duplicated
and requests beyond the 6 the work needs (calls paid twice). Cases: a NUL character in every
reply (SQLite and PostgreSQL), every PostgreSQL connection of the run terminated mid-way, the
disk filling up part-way (``RLIMIT_FSIZE``, the process's own full disk), an ``--out`` that
cannot be written, and the database file deleted mid-run::

    python -m bench.data_faults [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.results import results_page
from swm.checkpoints import open_store
from swm.testing import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = 6
LIMITED = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from swm.cli import main
sys.exit(main(sys.argv[2:]))
"""


@dataclass
class Outcome:
    case: str
    backend: str
    first_rc: int
    first_line: str
    reruns: int
    rows: int
    lost: int
    duplicated: int
    extra_calls: int


def _run(args: list[str], limit: int | None = None) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "LANGSMITH_TRACING": "false"}
    command = [sys.executable, "-c", LIMITED, str(limit), *args] if limit else [sys.executable, "-m", "swm", *args]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stderr


def _tom(spec: str, db: str, out: Path) -> list[str]:
    return ["bench", "tom", "--benchmark", "sim", "--n", "1", "--modes", "cot", "--concurrency", "1",
            "--no-progress", "--max-retries", "1", "--model", spec, "--db", db, "--thread-id", "F", "--out", str(out)]


def _rows(db: str) -> list[str]:
    store = open_store(db)
    try:
        return [r["key"] for r in store.rows("select key from tom_results where status = 'done'")] \
            if store.has_table("tom_results") else []
    finally:
        store.close()


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    return (lines[-1][:90] + "…") if lines else ("Traceback" if "Traceback" in stderr else "")


def _case(name: str, backend: str, db: str, out: Path, answer: Callable[..., Any] | None = None,
          limit: int | None = None, before: Callable[[], None] | None = None) -> Outcome:
    """Run once with the fault, then rerun without it until done (at most twice); count."""
    scripts = {"ReasonedAnswer": answer} if answer else {}
    with FakeOpenAIServer(scripts=scripts) as server:
        if before is not None:
            before()
        first_rc, err = _run(_tom(server.model_spec, db, out), limit)
        reruns = 0
        while reruns < 2 and (len(set(_rows(db))) < QUESTIONS):
            reruns += 1
            _run(_tom(server.model_spec, db, root_of(out) / "rerun-out"))  # a writable --out
        attempts = server.stats()["attempts"]
    got = _rows(db)
    return Outcome(name, backend, first_rc, _error_line(err), reruns, len(set(got)), QUESTIONS - len(set(got)),
                   len(got) - len(set(got)), attempts - QUESTIONS)


def root_of(out: Path) -> Path:
    """Return the case's temporary folder (``--out`` may sit under a file there)."""
    return out.parent.parent if out.parent.is_file() else out.parent


def _nul(prompt: str, body: dict[str, Any]) -> dict[str, str]:
    return {"reasoning": "The ball\x00 moved.", "answer": "bas\x00ket"}


@contextmanager
def pg_schema(pg: str) -> Iterator[str]:
    """Yield a URL on a fresh schema of the PostgreSQL server ``pg`` (dropped afterwards)."""
    import psycopg

    schema = f"swm_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f"create schema {schema}")  # type: ignore[arg-type]
    try:
        yield f"{pg}{'&' if '?' in pg else '?'}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f"drop schema {schema} cascade")  # type: ignore[arg-type]


def _terminator(pg: str, name: str) -> Callable[..., dict[str, str]]:
    seen: list[int] = []

    def answer(prompt: str, body: dict[str, Any]) -> dict[str, str]:
        import psycopg

        seen.append(1)
        if len(seen) == 3:
            with psycopg.connect(pg, autocommit=True) as admin:
                admin.execute("select pg_terminate_backend(pid) from pg_stat_activity where application_name = %s",
                              [name])
        return {"reasoning": "It moved.", "answer": "basket"}

    return answer


def run(pg: str | None) -> list[Outcome]:
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="swm-data-faults-") as tmp:
        root = Path(tmp)
        outcomes.append(_case("NUL in every reply", "SQLite", str(root / "nul.db"), root / "o1", _nul))
        outcomes.append(_case("disk full part-way (RLIMIT_FSIZE 160 kB)", "SQLite", str(root / "full.db"),
                              root / "o2", limit=160_000))
        (root / "file").write_text("x")
        blocked = root / "file" / "out"  # under a file: no one can create it
        outcomes.append(_case("--out cannot be written", "SQLite", str(root / "out.db"), blocked))
        deleted = root / "gone.db"

        def delete_at_third(prompt: str, body: dict[str, Any], seen: list[int] = []) -> dict[str, str]:  # noqa: B006
            seen.append(1)
            if len(seen) == 3:
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{deleted}{suffix}").unlink(missing_ok=True)
            return {"reasoning": "It moved.", "answer": "basket"}

        outcomes.append(_case("database file deleted mid-run", "SQLite", str(deleted), root / "o4", delete_at_third))
        if pg:
            with pg_schema(pg) as url:
                outcomes.append(_case("NUL in every reply", "PostgreSQL", url, root / "o5", _nul))
            with pg_schema(pg) as url:
                name = f"swm-bench-{uuid.uuid4().hex[:8]}"
                outcomes.append(_case("every connection terminated at answer 3", "PostgreSQL",
                                      f"{url}&application_name={name}", root / "o6", _terminator(pg, name)))
    return outcomes


def markdown(outcomes: list[Outcome]) -> str:
    lines = ["| case | backend | first run: exit, last line | reruns | rows (of 6) | lost | duplicated | "
             "extra calls |", "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        lines.append(f"| {o.case} | {o.backend} | {o.first_rc}{', `' + o.first_line + '`' if o.first_line else ''} | "
                     f"{o.reruns} | {o.rows} | {o.lost} | {o.duplicated} | {o.extra_calls} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.data_faults", description=__doc__.splitlines()[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="PostgreSQL server for the backend cases ('' to skip them)")
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args(argv)
    with results_page("data-faults", "Data and ground faults", "bench.data_faults", argv, enabled=not args.no_page,
                      markdown=True):
        print(markdown(run(args.pg or None)))


if __name__ == "__main__":
    main()
