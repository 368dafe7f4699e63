"""A Ray cluster started by hand with token authentication (Ray 2.52+): swm joins it with the head's token."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from swm.commands.workers import join_settings
from swm.testing import scaled

pytest.importorskip("ray", reason="the workers extra is not installed (pip install -e '.[workers]')")

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def token_head() -> Iterator[tuple[str, str]]:
    """``ray get-auth-token --generate`` then ``ray start --head`` in a home of its own; yield (address, token)."""
    base = Path(tempfile.mkdtemp(prefix="swmray", dir="/tmp"))  # Ray's socket paths must stay short
    home = base / "head"
    home.mkdir()
    # as from a login shell: none of the test process's settings (SWM_DB, pytest's variables)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "LANG": "C.UTF-8"}
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, check=True, capture_output=True,
                   timeout=scaled(120))
    token = (home / ".ray" / "auth_token").read_text().strip()
    port = _free_port()
    log = (base / "head.log").open("w")
    head = subprocess.Popen([RAY, "start", "--head", "--port", str(port), "--temp-dir", str(base / "t"),
                             "--include-dashboard=false", "--num-cpus", "2", "--block"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + scaled(120)  # the event: the head's log says it started
        while "Ray runtime started" not in (base / "head.log").read_text():
            assert head.poll() is None and time.monotonic() < deadline, (base / "head.log").read_text()[-2000:]
            time.sleep(0.5)
        assert "Token authentication is enabled" in (base / "head.log").read_text()
        yield f"127.0.0.1:{port}", token
    finally:
        os.killpg(head.pid, signal.SIGKILL)  # the head and every Ray process it started (its own session)
        head.wait(timeout=30)
        log.close()


def test_games_join_a_token_cluster_started_by_hand(token_head: tuple[str, str], pg_url: str,
                                                    tmp_path: Path) -> None:
    import uuid

    address, token = token_head
    client = tmp_path / "client-home"
    client.mkdir()
    env = {**os.environ, "HOME": str(client), "RAY_AUTH_TOKEN": token, "LANGSMITH_TRACING": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("RAY_AUTH_MODE", None)  # as a user would: only the token is given
    # The server's own database, not pg_url's fresh schema: on a cluster started by hand, workers given a
    # search_path schema in the URL hang (seen with token auth; not isolated further), so a unique run id
    # keeps this run's rows apart instead.
    db, run = pg_url.split("?")[0], f"ray-auth-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "swm", "bench", "games", "--n", "2", "--policies", "random", "--players", "6",
           "--db", db, "--thread-id", run, "--out", str(tmp_path / "out"), "--no-progress", "--json",
           "--workers", "2", "--ray-address", address]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=scaled(150))
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"no answer from the cluster: {str(exc.stderr)[-3000:]}") from exc
    assert done.returncode == 0, done.stderr[-3000:]
    assert "InvalidAuthToken" not in done.stderr and "Connected to Ray cluster" in done.stderr
    assert "ran 2, skipped 0 finished, failed 0" in done.stderr


def test_token_mode_is_chosen_only_when_a_token_is_at_hand(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(key, raising=False)
    join_settings("10.0.0.5:6379")
    assert "RAY_AUTH_MODE" not in os.environ
    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")
    join_settings("auto")  # `auto` reads the local session, token mode included
    assert "RAY_AUTH_MODE" not in os.environ
    join_settings("10.0.0.5:6379")
    assert os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    join_settings("10.0.0.5:6379")
    assert os.environ["RAY_AUTH_MODE"] == "disabled", "a mode the user chose is kept"
