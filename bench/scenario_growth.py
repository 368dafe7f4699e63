"""Database growth of a large scenario: bytes an episode adds per turn, on SQLite and PostgreSQL.

A scenario whose text (or one profile field) is megabytes long is played for two turns of the
episode graph against a scripted model (plain policies, no judge), with the checkpointer and the
experience store in one database, as the CLI runs them. The graph stops after each ``commit``
(``interrupt_after``, so the step's checkpoint is written) and the database is measured: the
SQLite file after a WAL checkpoint, or the total relation size of every table in the run's own
PostgreSQL schema. Growth is reported in copies of the scenario (its JSON size).

Variants: ``ref`` passes the scenario by reference (`swm.social.scenario_store`, as the CLI and the
SOTOPIA benchmark do), ``inline`` passes the scenario itself (Studio, ``graph.invoke``). Only the
public API is used, so ``--before PATH`` runs the same measurement against another checkout (an
older commit) in a subprocess and prints its rows beside this one's.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.results import results_page
from swm.checkpoints import open_saver, open_store
from swm.context import SWMContext
from swm.graphs.episode import build
from swm.social.models import AgentActionForModel, AgentProfile, Scenario, ScenarioAgent
from swm.testing import ScriptedChatModel

MB = 1_000_000
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass
class GrowthRow:
    backend: str
    variant: str
    where: str  # the field that holds the bulk: "scenario" (the shared text) or "profile"
    scenario_bytes: int
    empty: int  # the database with its tables, before the episode
    after: list[int]  # after turn 1, after turn 2, after the episode finished

    @property
    def copies(self) -> list[float]:
        return [(b - self.empty) / self.scenario_bytes for b in self.after]


def bulk_text(chars: int, seed: int = 0) -> str:
    """Return ``chars`` characters of random base64: incompressible, so no backend hides a copy."""
    return base64.b64encode(random.Random(seed).randbytes(chars * 3 // 4 + 3)).decode()[:chars]


def big_scenario(chars: int, where: str = "scenario") -> Any:
    """Return a two-seat scenario whose shared text (or Ann's personality notes) is ``chars`` long."""

    text = bulk_text(chars)
    return Scenario(
        id="big-lamp", scenario=text if where == "scenario" else "A lamp is for sale at a flea market.",
        agents=[ScenarioAgent(name="Ann", goal="sell the lamp for 40", profile=AgentProfile(
                    first_name="Ann", personality_and_values=text if where == "profile" else "calm")),
                ScenarioAgent(name="Bob", goal="buy the lamp for 20", profile=AgentProfile(first_name="Bob"))])


def scripted_model() -> Any:
    return ScriptedChatModel(respond=lambda prompt, tool: AgentActionForModel(action_type="speak", argument="hi"))


def scenario_input(store: Any, scenario: Any, variant: str) -> Any:
    """Return the episode's ``scenario`` input: a reference (the scenario put in the store) or the scenario."""
    if variant == "ref":
        from swm.social.scenario_store import put_scenario

        return put_scenario(store, scenario)
    return scenario.model_dump(mode="json")


@contextmanager
def pg_schema(server: str) -> Iterator[str]:
    """Yield a URL on a fresh schema of ``server``'s database, dropped afterwards."""
    import psycopg

    schema = f"swm_growth_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"create schema {schema}")  # type: ignore[arg-type]
    sep = "&" if "?" in server else "?"
    try:
        yield f"{server}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"drop schema {schema} cascade")  # type: ignore[arg-type]


def pg_server(url: str | None = None) -> str | None:
    """Return the PostgreSQL server to measure on (``SWM_TEST_PG`` or the local one), or None when none answers."""
    url = url or os.environ.get("SWM_TEST_PG", PG_DEFAULT)
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3):
            return url
    except Exception:  # noqa: BLE001 - no driver, no server: measure SQLite alone
        return None


def db_bytes(target: str | Path) -> int:
    """Return what the database holds on disk: the SQLite file (WAL folded in) or the schema's relations."""
    if str(target).startswith("postgresql://"):
        import psycopg

        with psycopg.connect(str(target), autocommit=True) as conn:
            row = conn.execute("select coalesce(sum(pg_total_relation_size(c.oid)), 0) from pg_class c "
                               "join pg_namespace n on n.oid = c.relnamespace "
                               "where n.nspname = current_schema() and c.relkind = 'r'").fetchone()
        return int(row[0]) if row else 0

    lite = sqlite3.connect(str(target))
    try:
        lite.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        lite.close()
    return Path(target).stat().st_size


def measure_one(target: str | Path, scenario: Any, variant: str, where: str, backend: str) -> GrowthRow:
    """Play two turns of ``scenario`` on ``target``, measuring the database after each step that matters."""

    store = open_store(target)
    try:
        ctx = SWMContext(llm=scripted_model(), store=store)
        with open_saver(target) as saver:
            empty = db_bytes(target)
            graph = build().compile(checkpointer=saver, interrupt_after=["commit"])
            config: Any = {"configurable": {"thread_id": f"growth-{variant}"}}
            inputs: Any = {"scenario": scenario_input(store, scenario, variant), "episode_id": f"growth-{variant}",
                           "max_turns": 2, "judge": False}
            after = []
            for _ in range(3):  # turn 1, turn 2, then the finished episode
                graph.invoke(inputs, config, context=ctx, durability="sync")
                inputs = None
                after.append(db_bytes(target))
    finally:
        store.close()
    size = len(json.dumps(scenario.model_dump(mode="json"), ensure_ascii=False).encode())
    return GrowthRow(backend, variant, where, size, empty, after)


def measure(chars: int = 5 * MB, variants: tuple[str, ...] = ("ref", "inline"), where: tuple[str, ...] = ("scenario",),
            pg: str | None = PG_DEFAULT) -> list[GrowthRow]:
    """Measure every variant on SQLite, and on PostgreSQL when ``pg`` answers."""
    rows: list[GrowthRow] = []
    for place in where:
        scenario = big_scenario(chars, place)
        for variant in variants:
            with tempfile.TemporaryDirectory(prefix="swm-growth-") as tmp:
                rows.append(measure_one(Path(tmp) / "run.db", scenario, variant, place, "sqlite"))
            if pg:
                with pg_schema(pg) as url:
                    rows.append(measure_one(url, scenario, variant, place, "postgres"))
    return rows


def format_rows(rows: list[GrowthRow], label: str = "") -> list[str]:
    lines = [f"Database growth of a {rows[0].scenario_bytes / MB:.1f} MB scenario over two turns (copies of the "
             f"scenario's JSON; checkpointer and store in one database){label}",
             f"  {'backend':<9} {'input':<7} {'bulk in':<9} {'turn 1':>7} {'turn 2':>7} {'finished':>9} {'MB':>7}"]
    for r in rows:
        c = r.copies
        lines.append(f"  {r.backend:<9} {r.variant:<7} {r.where:<9} {c[0]:>7.2f} {c[1]:>7.2f} {c[2]:>9.2f} "
                     f"{(r.after[-1] - r.empty) / MB:>7.1f}")
    return lines


def _commit(checkout: Path) -> str:
    """Name a checkout by its commit (and whether files differ from it), else by its folder."""
    try:
        head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                               check=True, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return checkout.name
    return f"commit {head}" + (" with local changes" if dirty else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scenario_growth", description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0, help="size of the scenario's bulk text in MB (default 5)")
    parser.add_argument("--where", default="scenario,profile", help="fields holding the bulk (scenario, profile)")
    parser.add_argument("--variants", default="ref,inline", help="inputs to measure (ref, inline)")
    parser.add_argument("--pg", default=os.environ.get("SWM_TEST_PG", PG_DEFAULT),
                        help="PostgreSQL server URL ('' to skip PostgreSQL)")
    parser.add_argument("--before", type=Path, default=None,
                        help="another checkout (e.g. a `git worktree` of an older commit): measure it too, inline only")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON (used by --before)")
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args(argv)
    if args.json:  # run as a script against another checkout (--before), which may have no bench.results
        measure_growth(args)
        return

    with results_page("scenario-growth", "A large scenario's growth", "bench.scenario_growth", argv,
                      enabled=not args.no_page):
        measure_growth(args)


def measure_growth(args: argparse.Namespace) -> None:
    """Measure the database's growth (and, with ``--before``, the other checkout's); print the tables or JSON."""
    where = tuple(w for w in args.where.split(",") if w)
    if args.before is not None:
        # this file runs as a script there, so swm, graphs and checkpoints are the other checkout's
        env = {**os.environ, "PYTHONPATH": str(args.before.resolve())}
        cmd = [sys.executable, __file__, "--json", "--variants", "inline", "--mb", str(args.mb),
               "--where", args.where, "--pg", args.pg]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        before = [GrowthRow(**r) for r in json.loads(out)]
        print("\n".join(format_rows(before, f" — before: {_commit(args.before)}")) + "\n")
    pg = pg_server(args.pg) if args.pg else None
    if args.pg and pg is None and not args.json:
        from swm.checkpoints.postgres import redact

        print(f"PostgreSQL at {redact(args.pg)} does not answer: SQLite only")
    rows = measure(int(args.mb * MB), tuple(v for v in args.variants.split(",") if v), where, pg)
    if args.json:
        print(json.dumps([asdict(r) for r in rows]))
    else:
        print("\n".join(format_rows(rows, f" — this checkout: {_commit(Path(__file__).parents[1])}")))


if __name__ == "__main__":
    main()
