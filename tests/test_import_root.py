"""One import root: swm installs nothing at the top level but ``swm`` (and ``swm_social``, the name verifiers
imports swm's environment by), so a user's own modules named ``graphs``, ``nodes``, ``prompts`` or
``checkpoints`` beside their script change nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import graphs, nodes, prompts, checkpoints
assert graphs.MINE and nodes.MINE and prompts.MINE and checkpoints.MINE
from swm.graphs import ask
from swm import prompts as swm_prompts
from swm.context import SWMContext
from swm.testing import ScriptedChatModel
assert "parse" in swm_prompts.available(), "swm's prompt files"
ctx = SWMContext(task="tomi", llm=ScriptedChatModel(replies=["basket"] * 4))
out = ask.build().compile().invoke({"narrative": "Sally puts the marble in the basket.", "question": "Where?",
                                    "mode": "cot"}, context=ctx)
print("ANSWER", out["answer"] or out["answer_error"])
"""


def test_a_users_same_named_modules_change_nothing(tmp_path: Path) -> None:
    for name in ("graphs", "nodes", "prompts", "checkpoints"):
        (tmp_path / f"{name}.py").write_text("MINE = True\ndef available(*a, **k):\n    raise AssertionError('mine')\n")
    (tmp_path / "script.py").write_text(SCRIPT)
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ANSWER" in done.stdout


def test_only_swm_is_a_top_level_package() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["swm*"]
    from setuptools import find_packages

    tops = {name.split(".")[0] for name in find_packages(root, include=["swm*"])}
    assert tops == {"swm", "swm_social"}, tops
    assert [p.name for p in (root / "swm_social").glob("*.py")] == ["__init__.py"], "swm_social only re-exports"
    for name in ("graphs", "nodes", "prompts", "checkpoints"):
        link = root / name
        assert link.is_symlink() and link.resolve() == (root / "swm" / name).resolve(), name


def test_nothing_imports_the_checkouts_links() -> None:
    """The top-level links exist for the layout only: importing through them would load a second copy of a module."""
    import ast

    root = Path(__file__).resolve().parents[1]
    bad = []
    for folder in ("swm", "bench", "tests", "examples", "scripts"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
                bad += [f"{path.relative_to(root)}: {n}" for n in names
                        if n.split(".")[0] in ("graphs", "nodes", "prompts", "checkpoints")]
    assert not bad, bad
