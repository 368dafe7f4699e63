"""``python -m bench.faults --frozen``: ``swm learn`` on PostgreSQL behind a proxy that freezes, measured.

A network partition or a frozen host closes no socket: the client's statements are sent and no
answer comes. Each case runs ``swm learn`` on its own schema of a real PostgreSQL server (``--pg``,
``SWM_TEST_PG``) through `swm.testing.frozen_proxy.FreezingProxy`, which stops forwarding after
``--freeze-after`` chunks from the client (mid-run; 0: from the start) or, in the ``cut`` case,
closes every connection then; it records the exit, the seconds from the fault to it and the lines
on stderr, then reruns the same command straight on the server and counts the episodes, those
stored twice, and the model calls beyond a fault-free run's. Cases: the default bounds; every bound
at 2 s; frozen from the start; two SIGTERMs a second apart once frozen (bounds of 300 s, so only
the second signal can end it in time); the connections cut instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.data_faults import pg_schema
from swm.checkpoints import open_store
from swm.testing import FakeOpenAIServer
from swm.testing.frozen_proxy import FreezingProxy

LEARN = ["learn", "--cycles", "2", "--levels", "easy", "--families", "negotiation,secret", "--episodes-per-level",
         "2", "--samples-per-task", "2", "--max-turns", "2", "--no-progress", "--thread-id", "Z"]
CLI = "import sys; from swm.cli import main; sys.exit(main(sys.argv[1:]))"
SMALL = {f"SWM_POSTGRES_{k}": "2" for k in ("WAIT", "CONNECT_TIMEOUT", "STATEMENT_TIMEOUT", "CHECKOUT_TIMEOUT")}
LONG = {"SWM_POSTGRES_STATEMENT_TIMEOUT": "300", "SWM_POSTGRES_CHECKOUT_TIMEOUT": "300"}
# name: (what, environment, freeze mid-run, SIGTERMs once frozen, cut instead of frozen)
CASES: dict[str, tuple[str, dict[str, str], bool, int, bool]] = {
    "default": ("frozen mid-run, default bounds", {}, True, 0, False),
    "small": ("frozen mid-run, every bound 2 s", SMALL, True, 0, False),
    "start": ("frozen from the start, default bounds", {}, False, 0, False),
    "sigterm": ("frozen mid-run, SIGTERM twice, bounds of 300 s", LONG, True, 2, False),
    "cut": ("connections cut mid-run, default bounds", {}, True, 0, True),
}
GIVE_UP_S = 600


@dataclass
class FreezeOutcome:
    case: str
    rc: int | None  # None: still running after GIVE_UP_S (killed)
    seconds: float  # from the fault to the exit
    lines: list[str]  # stderr
    rerun_rc: int
    episodes: int
    duplicated: int
    calls_beyond: int  # model calls of both runs beyond the fault-free run's


def _env(extra: dict[str, str]) -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, **extra, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


def _episodes(url: str) -> list[str]:
    store = open_store(url)
    try:
        if not store.has_table("lifelong_episodes"):
            return []
        return [str(r["episode_id"]) for r in store.rows("select episode_id from lifelong_episodes")]
    finally:
        store.close()


def _learn(url: str, spec: str, out: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CLI, *LEARN, "--model", spec, "--db", url, "--out", str(out)],
                            env=_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def run_case(name: str, server: str, freeze_after: int, needed: int) -> FreezeOutcome:
    """Run case ``name`` on a fresh schema and rerun it fault-free; ``needed``: the fault-free run's model calls."""
    from psycopg.conninfo import conninfo_to_dict  # the [postgres] extra, as `pg_schema`'s psycopg

    _, env, mid_run, signals, cut = CASES[name]
    params = conninfo_to_dict(server)
    host, port = str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)
    with pg_schema(server) as url, tempfile.TemporaryDirectory(prefix="swm-frozen-") as tmp, \
            FakeOpenAIServer() as fake, \
            FreezingProxy((host, port), freeze_after=None if cut or not mid_run else freeze_after) as proxy:
        if not mid_run:
            proxy.freeze()
        proc = _learn(proxy.url(url), fake.model_spec, Path(tmp) / "out", env)
        if cut:
            while proxy.sent < freeze_after and proc.poll() is None:
                time.sleep(0.01)  # polled: the proxy counts, the cut is this side's
            proxy.cut()
        while not proxy.frozen.wait(0.1) and proc.poll() is None:
            pass
        fault = time.monotonic()
        for _ in range(signals):
            proc.send_signal(signal.SIGTERM)
            time.sleep(1)
        try:
            _, err = proc.communicate(timeout=GIVE_UP_S)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            rc = None
        took = time.monotonic() - fault
        rerun = _learn(url, fake.model_spec, Path(tmp) / "out", {})
        rerun.communicate(timeout=GIVE_UP_S)
        rows = _episodes(url)
        return FreezeOutcome(name, rc, took, err.strip().splitlines(), rerun.returncode, len(set(rows)),
                             len(rows) - len(set(rows)), fake.requests - needed)


def fault_free_calls(server: str) -> int:
    """Return the model calls a fault-free run makes."""
    with pg_schema(server) as url, tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer() as fake:
        proc = _learn(url, fake.model_spec, Path(tmp) / "out", {})
        _, err = proc.communicate(timeout=GIVE_UP_S)
        if proc.returncode != 0:
            raise RuntimeError(f"the fault-free run failed: {err[-2000:]}")
        return fake.requests


def run_freeze(cases: list[str], server: str, freeze_after: int) -> list[FreezeOutcome]:
    needed = fault_free_calls(server)
    return [run_case(name, server, freeze_after, needed) for name in cases]


def freeze_markdown(results: list[FreezeOutcome], freeze_after: int) -> str:
    lines = [f"`swm {' '.join(LEARN)}` on PostgreSQL behind a proxy that stops forwarding (keeps its sockets open) "
             f"after {freeze_after} chunks from the client, then a rerun straight on the server:", "",
             "| case | exit | seconds from the fault to the exit | stderr lines | last line | rerun exit | episodes | "
             "duplicated | model calls beyond the fault-free run |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        last = r.lines[-1][:150] + "…" if r.lines else ""
        lines.append(f"| {CASES[r.case][0]} | {'killed' if r.rc is None else r.rc} | {r.seconds:.1f} | {len(r.lines)} "
                     f"| `{last}` | {r.rerun_rc} | {r.episodes} | {r.duplicated} | {r.calls_beyond} |")
    return "\n".join(lines) + "\n"
