"""The locked install: every range of pyproject.toml pinned in requirements/lock.txt, and the README = CI.

The lock is what every install here uses (scripts/install, run by the README's first command and by
.ci/run); `bash .ci/lock` refreshes it. These checks need no network: they read the files.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    found = re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)", (ROOT / "requirements" / "lock.txt").read_text(), re.M)
    return {canonicalize_name(name): version for name, version in found}


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"]) + [s for extra in project["optional-dependencies"].values() for s in extra]
    return [r for r in map(Requirement, specs) if canonicalize_name(r.name) != canonicalize_name(project["name"])]


def test_every_dependency_is_pinned_within_its_range() -> None:
    locked = pins()
    missing = [str(r) for r in requirements() if canonicalize_name(r.name) not in locked]
    assert not missing, f"not in requirements/lock.txt (run bash .ci/lock): {missing}"
    outside = [f"{r} locked at {locked[canonicalize_name(r.name)]}" for r in requirements()
               if not r.specifier.contains(locked[canonicalize_name(r.name)], prereleases=True)]
    assert not outside, f"the lock is older than pyproject.toml (run bash .ci/lock): {outside}"


def test_the_lock_pins_the_cpu_torch_and_no_cuda_wheels() -> None:
    locked = pins()
    torch = (ROOT / "requirements" / "torch.txt").read_text().split("torch==")[1].split()[0]
    assert locked["torch"] == torch
    assert not [n for n in locked if n.startswith(("nvidia-", "cuda-")) or n == "triton"]


def test_ci_runs_the_readmes_two_commands_on_the_lock() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    install, tests = blocks[0].strip(), blocks[1].strip()
    assert install.startswith("bash scripts/install && . .venv/bin/activate && swm ask ")
    assert tests == ". .venv/bin/activate && python -m pytest"
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert "bash scripts/install" in ci and ". .venv/bin/activate" in ci
    assert ci[-1] == "python -m pytest", "CI's last step is the README's test command"
    script = (ROOT / "scripts" / "install").read_text()
    assert "-c requirements/lock.txt" in script and "-r requirements/torch.txt" in script
    assert "swm engine build" in script, "the tests of the default engine need llama-server"
