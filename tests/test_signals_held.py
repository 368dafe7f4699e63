"""SIGTERM is answered while the main thread is held inside C and the signal lands on another thread.

Python runs signal handlers in the main thread between bytecodes; libpq polling a frozen PostgreSQL
(tests/test_frozen_postgres.py) never returns to one. Here the main thread blocks SIGTERM and waits
in ``os.read`` on a pipe nobody writes: the kernel hands the signal to another thread, so only
swm.drain's watcher (the interpreter's wakeup descriptor) can hear it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from swm import drain
from swm.testing import scaled

pytestmark = pytest.mark.timeout(60)

# "held" is said once the main thread is inside read(2) on the pipe (its /proc syscall line names the pipe's
# descriptor as first argument): said before, a signal could land while it still ran bytecode, and its handler
# would run there, as it would in any command whose main thread is not held
HELD = """
import os, signal, threading, time
from swm import drain

def say_held(tid, fd):
    while True:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
        if len(fields) > 1 and fields[1] == hex(fd):
            break
        time.sleep(0.005)
    print("held", flush=True)

with drain.handling_signals():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})
    r, w = os.pipe()
    threading.Thread(target=say_held, args=(threading.get_native_id(), r), daemon=True).start()
    os.read(r, 1)
"""


def _held() -> subprocess.Popen[str]:
    root = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen([sys.executable, "-c", HELD], env={**os.environ, "PYTHONPATH": root},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_the_first_signal_is_answered_and_the_second_stops_at_once_with_the_main_thread_held() -> None:
    proc = _held()
    try:
        assert proc.stderr is not None
        proc.send_signal(signal.SIGTERM)
        first = proc.stderr.readline()  # blocks until said: before the watcher, it never was
        assert first.startswith("SIGTERM: stopping at the next step") and "send it again" in first
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=scaled(10))
        rest = proc.stderr.read()
    finally:
        proc.kill()
    assert rc == 143, rest
    assert rest.startswith("SIGTERM again: stopped at once"), rest


def test_one_signal_alone_only_drains() -> None:
    """The watcher hears one arrival once: no hard stop is started by the first signal."""
    proc = _held()
    try:
        assert proc.stderr is not None
        proc.send_signal(signal.SIGHUP)
        assert proc.stderr.readline().startswith("SIGHUP: stopping at the next step")
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3 * drain.HARD_STOP_S)  # the drain waits for a next step the held thread never reaches
    finally:
        proc.kill()
        proc.wait()


def test_a_drained_command_exits_with_128_plus_its_signal() -> None:
    assert [drain.drained_exit_code(name) for name in ("SIGTERM", "SIGHUP", "SIGINT")] == [143, 129, 130]
    assert drain.drained_exit_code(None) == drain.drained_exit_code("GraphDrained") == 130
