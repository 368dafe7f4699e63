"""A PostgreSQL server that stops answering without closing its sockets: a one-line exit within the bounds.

The server is the real one, behind `FreezingProxy` (a loopback proxy that stops forwarding and keeps
every socket open: a network partition, a frozen host). The bounds are made small through the
environment, as an operator would set them (docs/checkpoints.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from swm.cli import main
from swm.testing import FakeOpenAIServer, scaled
from swm.testing.frozen_proxy import FreezingProxy

pytest.importorskip("psycopg_pool")
pytestmark = pytest.mark.timeout(180)  # a hang (the fault this file is about) fails instead of holding the suite

BOUNDS = {"SWM_POSTGRES_WAIT": "1", "SWM_POSTGRES_CONNECT_TIMEOUT": "1", "SWM_POSTGRES_STATEMENT_TIMEOUT": "1",
          "SWM_POSTGRES_CHECKOUT_TIMEOUT": "1"}
LEARN = ["learn", "--cycles", "2", "--levels", "easy", "--families", "negotiation,secret", "--episodes-per-level",
         "2", "--samples-per-task", "2", "--max-turns", "2", "--no-progress", "--thread-id", "F"]
CLI = "import sys; from swm.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.fixture
def proxy(pg_url: str) -> Iterator[FreezingProxy]:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(pg_url)
    # after 1000 chunks the client sent: the schema is set up and episodes are being played (the run sends ~2000)
    with FreezingProxy((str(params.get("host", "127.0.0.1")), int(params.get("port") or 5432)), freeze_after=1000) \
            as running:
        yield running


def _frozen_mid_run(proc: subprocess.Popen[str], proxy: FreezingProxy) -> None:
    """Wait for the proxy to freeze (its event), failing at once should the run end first."""
    while not proxy.frozen.wait(0.1):
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before the proxy froze: "
                        f"{proc.stderr.read() if proc.stderr else ''}")


def _learn(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    root = str(Path(__file__).resolve().parents[1])
    return subprocess.Popen([sys.executable, "-c", CLI, *args], env={**os.environ, **env, "PYTHONPATH": root},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stopped(proc: subprocess.Popen[str], within: float) -> tuple[float, list[str]]:
    """Wait at most ``within`` seconds for ``proc``; return how long it took and its stderr lines (killed if late)."""
    start = time.monotonic()
    try:
        _, err = proc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"still running {within:.0f} s later; stderr: {err[-2000:]}")
    return time.monotonic() - start, err.strip().splitlines()


def test_a_frozen_server_mid_run_is_one_line_within_the_bounds(proxy: FreezingProxy, pg_url: str,
                                                               tmp_path: Path) -> None:
    with FakeOpenAIServer() as fake:
        proc = _learn([*LEARN, "--model", fake.model_spec, "--db", proxy.url(pg_url), "--out", str(tmp_path)], BOUNDS)
        try:
            _frozen_mid_run(proc, proxy)
            assert fake.requests > 0, "frozen mid-run: after the first model calls"
            took, lines = _stopped(proc, scaled(30))
        finally:
            proc.kill()
    assert proc.returncode == 3, lines
    assert lines[-1].startswith("error: PostgreSQL sent no answer within 2 s: a frozen server or a network partition")
    assert "SWM_POSTGRES_STATEMENT_TIMEOUT" in lines[-1] and "rerun with the same --db" in lines[-1]
    assert len(lines) <= 2, "the thread line and the one error line: no pool warnings, no traceback"
    print(f"one line {took:.1f} s after the freeze")


def test_a_second_sigterm_stops_at_once_while_the_server_is_frozen(proxy: FreezingProxy, pg_url: str,
                                                                   tmp_path: Path) -> None:
    """Bounds far longer than the test: only the second signal can end it in time."""
    long = {**BOUNDS, "SWM_POSTGRES_STATEMENT_TIMEOUT": "300", "SWM_POSTGRES_CHECKOUT_TIMEOUT": "300"}
    with FakeOpenAIServer() as fake:
        proc = _learn([*LEARN, "--model", fake.model_spec, "--db", proxy.url(pg_url), "--out", str(tmp_path)], long)
        try:
            _frozen_mid_run(proc, proxy)
            assert proc.stderr is not None
            proc.send_signal(signal.SIGTERM)
            told = ""
            while "send it again" not in told:  # the first signal is answered: draining, now waiting on the server
                told = proc.stderr.readline()
                assert told, "stderr closed before the drain was announced"
            proc.send_signal(signal.SIGTERM)
            took, lines = _stopped(proc, scaled(10))
        finally:
            proc.kill()
    assert proc.returncode == 143, lines
    assert lines and lines[-1].startswith(("SIGTERM again: stopped at once", "interrupted: finished steps")), lines
    assert took < scaled(5), f"{took:.1f} s after the second SIGTERM"


def test_a_server_frozen_from_the_start_is_one_line(proxy: FreezingProxy, pg_url: str, tmp_path: Path) -> None:
    proxy.freeze()
    with FakeOpenAIServer() as fake:
        proc = _learn([*LEARN, "--model", fake.model_spec, "--db", proxy.url(pg_url), "--out", str(tmp_path)], BOUNDS)
        took, lines = _stopped(proc, scaled(30))
    assert proc.returncode == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: cannot open the PostgreSQL database")
    assert "after 1 s: connection timeout expired" in lines[0]


@pytest.mark.parametrize("value", ["abc", "inf", "-1", "nan"])
def test_a_postgres_wait_that_is_no_bound_is_refused_in_one_line(value: str, monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("SWM_POSTGRES_WAIT", value)
    result = CliRunner().invoke(main, [*LEARN, "--db", "postgresql://swm@127.0.0.1:1/none", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"error: SWM_POSTGRES_WAIT={value!r} is not a number of seconds — set a finite "
                                     "number ≥ 0 (default 10): every wait on the database has a bound")


def test_swm_learn_waits_postgres_wait_for_a_server_that_refuses(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("SWM_POSTGRES_WAIT", "1.5")
    start = time.monotonic()
    result = CliRunner().invoke(main, [*LEARN, "--db", "postgresql://swm@127.0.0.1:1/none", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert time.monotonic() - start >= 1.2, "tried again for the wait, not once"
    assert "after 1.5 s: connection to server at \"127.0.0.1\", port 1 failed: Connection refused" in result.output


def test_the_lease_watchdog_fires_while_the_server_is_frozen(proxy: FreezingProxy, pg_url: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Its renewals wait their bounds and fail, so the run is stopped before another process could take over."""
    from swm.checkpoints import lease

    for name, value in BOUNDS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(lease, "RENEW_S", 0.1)
    monkeypatch.setattr(lease, "STALE_S", 2.0)
    never = threading.Event()
    start = time.monotonic()
    with pytest.raises(lease.LeaseLost, match="the lease could not be renewed for"):  # noqa: PT012
        with lease.hold_lease(proxy.url(pg_url), "frozen"):
            proxy.freeze()
            while not never.wait(0.05) and time.monotonic() - start < scaled(30):  # the run's work, interruptible
                pass
    assert time.monotonic() - start < scaled(30)
