"""Busy cores on demand: run a test while every core is also busy with other work, as on a loaded CI machine.

Used by the ``under_load`` marker (tests/conftest.py): a module or test marked with it runs with one
spinning process per core beside it, started before the test and killed after, so the timing-sensitive
tests (leases, request batching, interrupts) are checked on a busy machine in every run, not only when
CI happens to be busy. ``python -m pytest --under-load tests/test_x.py`` runs any chosen tests that way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); print(flush=True)\nwhile True: pass"


@contextmanager
def busy_cores(n: int | None = None) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Keep ``n`` processes (default: one per core) spinning for the block; each has started when it is entered."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE)
             for _ in range(n or os.cpu_count() or 2)]
    try:
        for proc in procs:  # an event, not a sleep: each prints a line once it is spinning
            assert proc.stdout is not None
            proc.stdout.readline()
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
