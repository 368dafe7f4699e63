"""The interrupt suite: `swm learn` as a real process, stopped by Ctrl-C or kill -9, or run twice at once.

Each case reruns the same command and checks that the run completes with every episode stored
exactly once and no more model calls than the requests in flight when it stopped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.interrupts import MAX_TURNS, Reference, interrupt_and_rerun, reference_run, two_processes
from swm.testing import FakeOpenAIServer

# Seconds a model call takes. The interrupt at request 7 of 32 lands with ≥ 25 calls still to go: at least
# 25 x LATENCY / CONCURRENCY = 0.6 s of waiting, besides swm's own ~2 s of CPU for them, against the ~20 ms the test
# takes to see the request and signal. The test checks that it landed mid-run (some episodes stored, not all).
LATENCY = 0.05
CONCURRENCY = 2  # the plan's --concurrency: episodes in flight when it stops


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeOpenAIServer, Path, Reference]]:
    folder = tmp_path_factory.mktemp("interrupts")
    with FakeOpenAIServer(latency=LATENCY) as server:
        yield server, folder, reference_run(server, folder)


# SIGHUP takes SIGTERM's path through swm.drain (DRAINED_BY; its exit code 128 + the signal): tests/test_signals_held.py
# sends it to a drained command and checks its code, without a whole learn run (~15 s of the suite) of its own
EXIT = {"SIGINT": 130, "SIGKILL": -9, "SIGTERM": 143, "SIGTERM as PID 1": 143}


def _can_unshare() -> bool:
    import shutil
    import subprocess

    from bench.interrupts import as_pid1

    return bool(shutil.which("unshare")) and subprocess.run(as_pid1(["true"]), capture_output=True).returncode == 0


@pytest.mark.parametrize("kind", list(EXIT))
def test_an_interrupted_learn_run_finishes_on_rerun(loop: tuple[FakeOpenAIServer, Path, Reference], kind: str) -> None:
    if kind.endswith("PID 1") and not _can_unshare():
        pytest.skip("no PID namespaces here (unshare --pid needs root or user namespaces)")
    server, folder, reference = loop
    outcome = interrupt_and_rerun(server, folder, kind, at=7, reference=reference,
                                  thread=kind.lower().replace(" ", "-"))
    notes = outcome.notes
    assert notes["first_rc"] == EXIT[kind], notes["first_err"]
    if kind.startswith(("SIGTERM", "SIGHUP")):  # drained at the next step, with the way back said
        name = kind.split()[0]
        assert f"{name}: stopping at the next step" in notes["first_err"]
        assert f"stopped on {name}: finished steps are checkpointed; rerun with the same --db" in notes["first_err"]
        assert "Traceback" not in notes["first_err"]
    assert notes["rc"] == 0, notes["err"]
    assert "resuming thread" in notes["err"] and "already finished" not in notes["err"]
    assert outcome.completed, "the rerun wrote a report with evaluations"
    assert (outcome.lost, outcome.duplicated) == (0, 0)
    # the interrupt landed mid-run (some episodes stored, not all), and what was stored then is kept
    assert 0 < len(notes["kept"]) < reference.episodes, notes["kept"]
    assert set(notes["kept"]) <= set(notes["stored"])
    assert reference.episodes >= 10 and f'"episodes": {reference.episodes}' in notes["stdout"]
    assert 0 <= outcome.extra_calls <= CONCURRENCY * MAX_TURNS  # an episode in flight is replayed whole
    if kind == "SIGKILL":  # the dead process's lease was left behind and taken over
        assert notes["stale_lease_pid"] == notes["killed_pid"]


def test_a_second_process_on_a_running_thread_refuses(loop: tuple[FakeOpenAIServer, Path, Reference]) -> None:
    server, folder, reference = loop
    outcome = two_processes(server, folder, reference, LATENCY)
    notes = outcome.notes
    assert notes["second_rc"] == 5
    lines = notes["second_err"].strip().splitlines()
    assert lines[-1].startswith("error: thread twin is already running (pid ")
    assert f"pid {notes['first_pid']} on " in lines[-1] and "started 20" in lines[-1]
    assert not notes["second_out_written"]
    assert notes["rc"] == 0, notes["err"]
    assert (outcome.lost, outcome.duplicated, outcome.extra_calls) == (0, 0, 0)


def test_sigterm_to_the_process_group_drains_learn_and_never_restarts_its_server(tmp_path: Path) -> None:
    """``kill -TERM -PGID`` (a scheduler, a terminal) meant the run: the embedded server is not a crash to revive.

    llama-server is played by the fake endpoint behind a script of that name; before the fix it shared the
    run's process group, died of the same signal, and the run started it again and went on.
    """
    import os
    import signal
    import subprocess
    import sys

    from bench.interrupts import episode_ids, finished, learn_command, wait_for_episode

    server = tmp_path / "llama-server"
    server.write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = --port ] && port=$2; [ "$1" = --model ] && model=$2; '
                      'shift; done\n'
                      f'exec {sys.executable} -m swm.testing.server --port "$port" --model "$model" '
                      f'--latency {LATENCY}\n')
    server.chmod(0o755)
    (tmp_path / "base.gguf").write_bytes(b"GGUF")
    db = tmp_path / "g.db"
    env = {**os.environ, "SWM_LLAMA_SERVER": str(server), "SWM_EMBEDDED_ENGINE": "llama-server",
           "SWM_LOCAL_GGUF": str(tmp_path / "base.gguf"), "LANGSMITH_TRACING": "false",
           "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]),
                                                     os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.Popen(learn_command("embedded", db, "g", tmp_path / "out"), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    stored = wait_for_episode(db, "g", proc)  # the event: a first episode stored
    os.killpg(proc.pid, signal.SIGTERM)
    rc, _, err = finished(proc, timeout=120)  # scaled inside
    assert rc == 143, err[-3000:]
    assert "SIGTERM: stopping at the next step" in err and "Traceback" not in err
    assert "starting it again" not in err, err[-3000:]
    assert stored <= set(episode_ids(db, "g")), "finished episodes are kept"
