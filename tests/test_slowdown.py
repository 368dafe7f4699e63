"""`swm.testing.slowdown`: the factor a test's wall-clock bounds and the per-test timeout are stretched by."""

from __future__ import annotations

import os

import pytest

from swm.testing import scaled, slowdown


def test_the_setting_gives_the_factor_never_below_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWM_TEST_SLOWDOWN", "4")
    assert slowdown() == 4.0 and scaled(30) == 120.0
    monkeypatch.setenv("SWM_TEST_SLOWDOWN", "0.5")
    assert slowdown() == 1.0, "a bound is never shortened"
    monkeypatch.setenv("SWM_TEST_SLOWDOWN", "fast")
    with pytest.raises(ValueError, match="SWM_TEST_SLOWDOWN must be a number"):
        slowdown()


def test_unset_it_is_the_load_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWM_TEST_SLOWDOWN", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (20.0, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert slowdown() == 10.0
    monkeypatch.setattr(os, "getloadavg", lambda: (0.3, 0.0, 0.0))
    assert slowdown() == 1.0

