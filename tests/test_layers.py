"""The import contracts of pyproject.toml hold: the layers run one way and no siblings import each other in a cycle.

CI runs ``lint-imports`` too; this test makes the suite catch a lazy import that climbs back up
(a domain package importing ``graphs``, ``swm.state`` importing ``swm.validation``) before landing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    pytest.importorskip("importlinter")
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert ", 0 broken" in done.stdout
