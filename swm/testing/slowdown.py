"""How much slower than an idle machine this one runs now: the factor a test's wall-clock bounds are scaled by.

A test waits on events (a process's exit, a file, a request answered); a bound on such a wait only keeps a
broken run from hanging, and on a busy machine (a CI runner shared with other jobs, a load of 10 on two
cores) a fixed one fails runs that are merely slow. `scaled` stretches a bound by `slowdown`: the
``SWM_TEST_SLOWDOWN`` setting when given (``1`` keeps every bound as written), else the load average per
core over the last minute, never below 1. The suite's per-test timeout (pytest-timeout's ``--timeout``) is
scaled the same way, at each test's start (tests/conftest.py).
"""

from __future__ import annotations

import os

SETTING = "SWM_TEST_SLOWDOWN"


def slowdown() -> float:
    """The factor, at least 1: ``SWM_TEST_SLOWDOWN`` if set, else the 1-minute load average per core."""
    given = os.environ.get(SETTING, "").strip()
    if given:
        try:
            return max(1.0, float(given))
        except ValueError as exc:
            raise ValueError(f"{SETTING} must be a number (a factor, 1 or more), not {given!r}") from exc
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def scaled(seconds: float) -> float:
    """``seconds`` stretched by the machine's `slowdown`."""
    return seconds * slowdown()
