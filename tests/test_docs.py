"""The documentation stays true: the site builds strictly, the CLI reference covers every command and
option, every graph has a page, runnable examples run, and nothing points outside the repository.

In the spirit of sqlite-utils' ``test_docs.py``: the CLI reference is generated from the click
commands when the site is built, so the test checks that the generated page names every command
and option of the installed CLI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from swm.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
DOCUMENTS = [ROOT / "README.md", ROOT / "bench" / "README.md", *PAGES]


def commands(group: click.Command, path: tuple[str, ...] = ("swm",)) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(path), group
    if isinstance(group, click.Group):
        for name, sub in group.commands.items():
            yield from commands(sub, (*path, name))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_site_builds_strictly_offline(site: Path) -> None:
    assert (site / "index.html").is_file() and (site / "cli" / "index.html").is_file()


def test_the_cli_reference_names_every_command_and_option(site: Path) -> None:
    page = (site / "cli" / "index.html").read_text()
    for path, command in commands(main):
        assert f">{path}<" in page or f">{path}\n" in page, f"{path} is missing from the CLI reference"
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert opt in page, f"{path} {opt} is missing from the CLI reference"


def test_every_graph_in_langgraph_json_has_an_api_page() -> None:
    graphs = json.loads((ROOT / "langgraph.json").read_text())["graphs"]
    text = "\n".join(p.read_text() for p in PAGES)
    from swm.graphs.served import graph_module

    for name, target in graphs.items():
        module = graph_module(target)
        assert f"::: {module}\n" in text or f"::: {module.removeprefix('swm.')}\n" in text, \
            f"graph {name} ({module}) has no page"


# A Python block in a document is marked on the line before it:
#   <!-- runnable -->                     run here against the loopback fake server, and must call it
#   <!-- runnable offline needs=a,b -->   run here, no endpoint (skipped without the packages a, b)
#   <!-- runnable by tests/test_x.py -->  run whole by that test
#   <!-- excerpt of PATH -->              part of a program; PATH (a file of the repository) is the runnable version
MARK = re.compile(r"<!-- (runnable(?: offline)?(?: needs=[\w,.]+)?|runnable by \S+|excerpt of \S+) -->")
# the address an example names for "your OpenAI-compatible server"; the test points it at the fake one
EXAMPLE_SERVER = "http://127.0.0.1:8000/v1"


def python_blocks(path: Path) -> list[tuple[int, str | None, str]]:
    """Return (line, mark or None, code) for every fenced Python block of a Markdown file (indented ones too)."""
    lines, found, i = path.read_text().splitlines(), [], 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            indent = len(lines[i]) - len(lines[i].lstrip())
            before = next((ln.strip() for ln in reversed(lines[:i]) if ln.strip()), "")
            mark = MARK.fullmatch(before)
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            found.append((i + 1, mark.group(1) if mark else None, "\n".join(ln[indent:] for ln in lines[i + 1:end])
                          + "\n"))
            i = end
        i += 1
    return found


def runnable_blocks() -> list[tuple[str, str, str]]:
    return [(f"{p.relative_to(ROOT)}#{line}", mark, code) for p in DOCUMENTS for line, mark, code in python_blocks(p)
            if mark is not None and (mark == "runnable" or mark.startswith("runnable offline"))]


def test_there_are_runnable_examples() -> None:
    assert any(name.startswith("README.md") for name, _, _ in runnable_blocks())
    assert any(name.startswith("docs/scaling.md") for name, _, _ in runnable_blocks())


@pytest.mark.parametrize("doc", DOCUMENTS, ids=[str(p.relative_to(ROOT)) for p in DOCUMENTS])
def test_every_python_block_runs_in_ci_or_is_an_excerpt_naming_its_runnable_version(doc: Path) -> None:
    for line, mark, _ in python_blocks(doc):
        where = f"{doc.relative_to(ROOT)}:{line}"
        assert mark is not None, f"{where}: mark the block runnable, or an excerpt naming its runnable version"
        named = mark.removeprefix("runnable by ").removeprefix("excerpt of ")
        if named != mark:
            assert (ROOT / named.split("#")[0]).is_file(), f"{where}: {named} is not a file of the repository"


@pytest.mark.parametrize(("name", "mark", "code"), runnable_blocks(), ids=[n for n, _, _ in runnable_blocks()])
def test_a_runnable_example_runs_against_the_loopback_test_double(name: str, mark: str, code: str,
                                                                   tmp_path: Path) -> None:
    """Run the block as a script from a scratch folder (with the checkout's examples/ beside it), the model
    endpoints at the loopback fake server: ``SWM_MODEL``, and the example server's address rewritten."""
    from swm.testing import FakeOpenAIServer

    for needed in (mark.partition("needs=")[2].split(",") if "needs=" in mark else []):
        pytest.importorskip(needed)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    script = tmp_path / "example.py"
    with FakeOpenAIServer() as server:
        script.write_text(code.replace(EXAMPLE_SERVER, server.base_url))
        env = {**os.environ, "SWM_MODEL": server.model_spec, "SWM_DB": str(tmp_path / "swm.db"),
               "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                              timeout=600, env=env)
        assert done.returncode == 0, f"{name}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        if "offline" not in mark:
            assert server.requests > 0  # it called the model: the example ran, not only imported


OUTSIDE = re.compile(r"\.\./shared|/work/|/tmp/|/root/|this 2-core|this VM\b|this machine\b|these machines\b", re.I)


@pytest.mark.parametrize("doc", DOCUMENTS, ids=[str(p.relative_to(ROOT)) for p in DOCUMENTS])
def test_no_document_names_a_machine_or_a_path_outside_the_repository(doc: Path) -> None:
    found = [f"{doc.name}:{i + 1}: {line.strip()[:120]}" for i, line in enumerate(doc.read_text().splitlines())
             if OUTSIDE.search(line)]
    assert not found, "\n".join(found)


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    head = "\n".join(lines[:20])
    assert "bash scripts/install" in head and "swm ask" in head and "python -m pytest" in head


# ---- every `swm` command line in the documents' code blocks --------------------------------------
SHELLS = ("", "bash", "sh", "shell", "console")
SHELL_STOP = {"|", "||", "&&", ";", ">", ">>", "2>", "&"}
# commands cheap enough to run against the loopback test double (the others are parsed only)
RUN = {("ask",), ("parse",)}


def shell_blocks(text: str) -> list[str]:
    """Return the fenced code blocks of a Markdown text that are shell (or untagged), opening and closing
    fences told apart by reading the lines in order."""
    blocks, current, info = [], list[str](), None
    for line in text.splitlines():
        fence = line.strip()
        if fence.startswith("```"):
            if info is None:
                info, current = fence[3:].strip(), []
            else:
                if info in SHELLS:
                    blocks.append("\n".join(current))
                info = None
        elif info is not None:
            current.append(line)
    return blocks


def cli_examples() -> list[tuple[str, list[str]]]:
    """Return (where, argv) for every line of a fenced block that runs ``swm``, comments and shell syntax cut."""
    import shlex

    found = []
    for doc in DOCUMENTS:
        for block in shell_blocks(doc.read_text()):
            text = block.replace("\\\n", " ")
            for line in text.splitlines():
                line = line.strip().removeprefix("$ ")
                if not line.startswith("swm ") or " — " in line.split("#")[0]:
                    continue  # a command line, not a program's output quoted in the block
                words = shlex.split(line, comments=True)
                cut = next((i for i, w in enumerate(words) if w in SHELL_STOP), len(words))
                argv = [w for w in words[1:cut] if w not in ("...", "…", "[same", "options]")]
                found.append((f"{doc.relative_to(ROOT)}: {line[:70]}", argv))
    return found


def _resolve(argv: list[str]) -> tuple[list[str], click.Command, list[str]]:
    command: click.Command = main
    path: list[str] = []
    rest = list(argv)
    while isinstance(command, click.Group) and rest and rest[0] in command.commands:
        path.append(rest[0])
        command = command.commands[rest.pop(0)]
    return path, command, rest


def test_the_documents_show_swm_command_lines() -> None:
    assert len(cli_examples()) >= 25


@pytest.mark.parametrize(("where", "argv"), cli_examples(), ids=[w for w, _ in cli_examples()])
def test_every_cli_example_in_the_docs_parses(where: str, argv: list[str]) -> None:
    """Each documented command line names a real command, real options and valid values (parsed by click
    itself, callbacks included); a file the example names as the user's own may be missing here."""
    path, command, rest = _resolve(argv)
    assert path, f"{where}: no such swm command"
    ctx = click.Context(main, info_name="swm")
    try:
        command.make_context(path[-1], rest, parent=ctx)
    except click.BadParameter as exc:
        if "does not exist" not in exc.format_message():
            raise AssertionError(f"{where}: {exc.format_message()}") from exc
    except click.UsageError as exc:
        raise AssertionError(f"{where}: {exc.format_message()}") from exc
    except click.exceptions.Exit:
        pass


def _runnable() -> list[tuple[str, list[str]]]:
    out = []
    for where, argv in cli_examples():
        path, _, rest = _resolve(argv)
        files = [a for a in rest if a.endswith(".txt")]
        if tuple(path) in RUN and "--model" not in rest and all((ROOT / f).is_file() for f in files):
            out.append((where, argv))
    return out


@pytest.mark.parametrize(("where", "argv"), _runnable(), ids=[w for w, _ in _runnable()])
def test_the_cheap_cli_examples_run_against_the_loopback_test_double(where: str, argv: list[str],
                                                                       tmp_path: Path) -> None:
    from helpers import good_parse

    from swm.testing import FakeOpenAIServer

    with FakeOpenAIServer(scripts={"S3APParse": good_parse().model_dump()}) as server:
        env = {**os.environ, "SWM_MODEL": server.model_spec, "SWM_DB": str(tmp_path / "swm.db"),
               "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-m", "swm", *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=300, env=env)
        assert done.returncode == 0, f"{where}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        assert server.requests > 0


def test_the_cli_reference_shows_real_defaults(site: Path) -> None:
    page = (site / "cli" / "index.html").read_text()
    assert "Sentinel" not in page and "UNSET" not in page
