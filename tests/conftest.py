"""Shared fixtures: scripted models, an isolated SWM_DB, and no network but loopback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# property tests draw the same examples on every run and machine (a failure found once is found again)
settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

sys.path.insert(0, str(Path(__file__).parent))

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep tests off the user's database and any real endpoint."""
    monkeypatch.setenv("SWM_DB", str(tmp_path / "swm.db"))
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "SWM_MODEL"):
        monkeypatch.delenv(key, raising=False)
    os.environ.setdefault("LANGSMITH_TRACING", "false")


@pytest.fixture
def shared_dir() -> Path:
    """The shared benchmark folder beside the checkout (skips when absent)."""
    if not SHARED.is_dir():
        pytest.skip("../shared is not beside this checkout")
    return SHARED
