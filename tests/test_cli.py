"""The CLI: every command has help and is documented; bad input gives one line and an exit code."""

from __future__ import annotations

import importlib
import pkgutil
import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import swm.commands
from swm.cli import BENCH_COMMANDS, COMMANDS, bench, main

ROOT = Path(__file__).resolve().parents[1]
# what a reader is pointed to: the README and the documentation pages written by hand (the generated CLI
# reference lists every command anyway, which tests/test_docs.py checks)
DOCS = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])


def all_commands() -> list[tuple[str, click.Command]]:
    found = [(name, cmd) for name, cmd in main.commands.items() if name != "bench"]
    found += [(f"bench {name}", cmd) for name, cmd in bench.commands.items()]
    return found


@pytest.mark.parametrize(("name", "command"), all_commands(), ids=[n for n, _ in all_commands()])
def test_every_command_has_help_and_is_documented(name: str, command: click.Command) -> None:
    result = CliRunner().invoke(main, [*name.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert (command.help or "").strip(), f"swm {name} has no help text"
    assert f"swm {name}" in DOCS, f"`swm {name}` is mentioned neither in README.md nor in docs/"


def test_core_commands_exist() -> None:
    assert {"parse", "ask", "graphs"} <= set(main.commands)


@pytest.mark.parametrize(("rows", "group"), [(COMMANDS, main), (BENCH_COMMANDS, bench)], ids=["swm", "swm bench"])
def test_every_row_names_its_command_and_that_command_s_own_help(rows: dict[str, tuple[str, str]],
                                                                   group: click.Group) -> None:
    for name, (_, help_line) in rows.items():
        command = group.commands[name]
        assert command.name == name
        assert click.Command(name, help=help_line).get_short_help_str(500) == command.get_short_help_str(500), name


def test_every_command_in_swm_commands_has_a_row() -> None:
    defined: dict[str, click.Command] = {}
    for module in pkgutil.iter_modules(swm.commands.__path__):
        loaded = importlib.import_module(f"swm.commands.{module.name}")
        defined |= {f"{loaded.__name__}:{attr}": value for attr, value in vars(loaded).items()
                    if isinstance(value, click.Command)}
    inside = {id(sub) for c in defined.values() if isinstance(c, click.Group) for sub in c.commands.values()}
    rows = {target for target, _ in (*COMMANDS.values(), *BENCH_COMMANDS.values())}
    missing = {target for target, c in defined.items() if id(c) not in inside} - rows
    assert not missing, f"commands without a row in swm.cli: {missing}"


def test_help_imports_no_command_model_client_or_checkpoint_code() -> None:
    code = ("import sys\nfrom click.testing import CliRunner\nfrom swm.cli import main\n"
            "assert CliRunner().invoke(main, ['--help']).exit_code == 0\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'langchain_core', "
            "'langchain_openai', 'langgraph', 'sqlite_utils') or m.startswith(('swm.commands.', "
            "'swm.checkpoints')))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", done.stdout


# what running a command loads and declaring its options must not (swm/commands/_common.py, "Deferred imports")
HEAVY = ("openai", "langchain_core", "langchain_openai", "langgraph", "sqlite_utils", "psycopg", "torch",
         "transformers", "trl", "peft", "numpy", "httpx")


def _help_paths() -> list[tuple[str, ...]]:
    """Every command and subcommand's words (``("bench", "tom")``), from the rows and the groups they name."""
    paths: list[tuple[str, ...]] = []
    for name in COMMANDS:
        command = main.commands[name]
        paths.append((name,))
        if isinstance(command, click.Group):
            paths += [(name, sub) for sub in command.commands]
    return paths


@pytest.mark.parametrize("words", _help_paths(), ids=" ".join)
def test_each_command_s_help_loads_no_model_client_graph_store_or_training_code(words: tuple[str, ...]) -> None:
    code = ("import sys\nfrom swm.cli import main\ntry:\n    main([*sys.argv[1:], '--help'], prog_name='swm')\n"
            "except SystemExit as exc:\n    assert exc.code in (0, None), exc.code\n"
            f"print('LOADED', *sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    done = subprocess.run([sys.executable, "-c", code, *words], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert f"Usage: swm {' '.join(words)}" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "LOADED", done.stdout.splitlines()[-1]


def test_the_postgres_modules_import_no_driver_until_a_database_is_opened() -> None:
    """swm.checkpoints.postgres and the results browser's store read psycopg only when a PostgreSQL URL is opened
    (the [postgres] extra, pyproject's deferred imports): importing them loads no driver."""
    code = ("import sys\nimport swm.checkpoints.postgres, swm.ui.store\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'psycopg_pool'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", done.stdout


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_empty_story_is_one_line_and_exit_2(tmp_path: Path) -> None:
    story = tmp_path / "empty.txt"
    story.write_text("  \n")
    result = CliRunner().invoke(main, ["parse", str(story), "--model", "m@http://127.0.0.1:9/v1",
                                       "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 2
    assert "error: the narrative is empty" in result.output
    assert "Traceback" not in result.output


def test_missing_story_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["ask", "--story", str(tmp_path / "nope.txt"), "--question", "Q?",
                                       "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 2 and "no such file" in result.output


def test_oversized_story_names_the_limit(tmp_path: Path) -> None:
    story = tmp_path / "big.txt"
    story.write_text("Sally walks. " * 50)
    result = CliRunner().invoke(main, ["parse", str(story), "--max-chars", "100", "--model",
                                       "m@http://127.0.0.1:9/v1", "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 2 and "over the limit of 100" in result.output


def test_model_endpoint_down_is_exit_3_with_what_to_do(tmp_path: Path) -> None:
    story = tmp_path / "s.txt"
    story.write_text("Sally puts the marble in the basket.")
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    result = CliRunner().invoke(main, ["ask", "--story", str(story), "--question", "Where?", "--mode", "cot",
                                       "--model", f"m@{url}", "--max-retries", "0", "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 3, result.output
    assert f"cannot reach the model at {url}: connection refused (1 attempt)" in result.output
    assert "Traceback" not in result.output


def test_named_model_without_key_says_how_to_configure(tmp_path: Path) -> None:
    story = tmp_path / "s.txt"
    story.write_text("Sally puts the marble in the basket.")
    result = CliRunner().invoke(main, ["ask", "--story", str(story), "--question", "Where?", "--mode", "cot",
                                       "--model", "gpt-4o", "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 2 and "needs OPENAI_API_KEY" in result.output
