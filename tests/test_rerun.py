"""A run's command line and config: built from click's parameters, pasted back, read back with ``--config``.

Every option of every command that records a run is given a value other than its default, its rerun
line (`swm.commands.invocation.rerun_line`) is parsed again by the real parser, and the parameters
must come out the same; the same for its config through ``--config``. ``--config`` reads TOML and YAML
under the options' names, loses to the command line, and refuses a key no option has in one line.
A run's page shows the line and offers the config, and neither holds a key.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import sqlite3
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from swm.cli import BENCH_COMMANDS, COMMANDS, load_command, main
from swm.commands._common import OrOff
from swm.commands.invocation import config_of, rerun_line, takes_config

# every command that records its runs in swm_runs (`record_run`)
RECORDING = ("ask", "parse", "play", "learn", "selfplay", "bench games", "bench sotopia", "bench tom")
LONG_RUNNING = ("learn", "selfplay", "bench games", "bench sotopia", "bench tom")
KEY = "sk-test-0123456789abcdefghij"


def command(path: str) -> click.Command:
    words = path.split()
    rows = BENCH_COMMANDS if words[0] == "bench" else COMMANDS
    return load_command(rows[words[-1]][0])


def parse(line: str) -> tuple[click.Command, dict[str, Any]]:
    """Parse a pasted ``swm …`` line as the shell and ``swm`` would: return the command it names and its parameters."""
    tokens = shlex.split(line)
    assert tokens[0] == "swm"
    group: click.Command = main
    args, path = tokens[1:], ["swm"]
    while isinstance(group, click.Group):  # swm's groups take no options of their own: the next word is a command
        name = args.pop(0)
        found = group.get_command(click.Context(group, info_name=" ".join(path)), name)
        assert found is not None, f"no command {name!r} in {' '.join(path)}"
        group = found
        path.append(name)
    with group.make_context(" ".join(path), args) as ctx:
        return group, dict(ctx.params)


def invoke(path: str, args: list[str]) -> click.Context:
    return command(path).make_context(f"swm {path}", list(args))


def _other_number(kind: type, t: click.ParamType, default: Any) -> Any:
    low, high = getattr(t, "min", None), getattr(t, "max", None)
    if kind is int:
        value = (low + 1) if low is not None else (high - 1) if high is not None else 7
        return value if value != default else value + (1 if high is None or value + 1 <= high else -1)
    value = (low + 0.25) if low is not None else (high - 0.25) if high is not None else 2e-4
    return value if value != default else value / 2


def other_value(param: click.Parameter, ctx: click.Context) -> list[str]:
    """Return the tokens that give ``param`` a value other than its default (as a user would type them)."""
    default = param.get_default(ctx)
    if isinstance(param, click.Option) and param.is_flag:
        if param.is_bool_flag and default:
            return [param.secondary_opts[0]]
        return [param.opts[0]]
    t = param.type
    if isinstance(t, click.Choice):
        choice = next(str(c) for c in t.choices if str(c) != str(default) and not (
            str(c) == "on" and default is True) and not (str(c) == "off" and default is False))
        text = choice
    elif isinstance(t, OrOff):  # a number or 'off' (--repair-seed)
        text = "off" if default is not None else "1"
    elif hasattr(t, "allowed"):  # a comma list (--levels easy,hard)
        text = ",".join(list(t.allowed)[:2][::-1])
    elif isinstance(t, click.types.IntParamType):
        text = str(_other_number(int, t, default))
    elif isinstance(t, click.types.FloatParamType):
        text = str(_other_number(float, t, default))
    elif isinstance(t, click.Path):
        text = "out dir/it's here"
    else:
        text = "a spec with 'quotes' and $HOME"
    return [text] if isinstance(param, click.Argument) else [param.opts[0], text]


def every_option_given(path: str) -> list[str]:
    cmd = command(path)
    bare = click.Context(cmd)
    args, positional = [], []
    for p in cmd.params:
        if not p.expose_value:
            continue
        (positional if isinstance(p, click.Argument) else args).extend(other_value(p, bare))
    return args + positional


@pytest.mark.parametrize("path", RECORDING)
def test_every_option_of_every_recording_command_pastes_back(path: str) -> None:
    args = every_option_given(path)
    ctx = invoke(path, args)
    line = rerun_line(ctx)
    assert line.startswith(f"swm {path} ")
    again, params = parse(line)
    assert again is ctx.command
    assert params == ctx.params
    names = {n for p in ctx.command.params if isinstance(p, click.Option) for n in p.opts + p.secondary_opts}
    typed = [t for t in shlex.split(line) if t.startswith("--")]
    assert set(typed) <= names, "every option is written as a user types it, never by its Python name"


@pytest.mark.parametrize("path", RECORDING)
def test_a_rerun_line_leaves_the_defaults_out(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWM_DB", raising=False)
    required = ["--benchmark", "sim"] if path == "bench tom" else ["--story", "s.txt", "--question", "q?"] \
        if path == "ask" else ["s.txt"] if path == "parse" else []
    ctx = invoke(path, required)
    assert rerun_line(ctx) == shlex.join(["swm", *path.split(), *required])


def test_numbers_keep_their_own_precision_and_flags_their_names() -> None:
    ctx = invoke("selfplay", ["--train-lr", "2e-4", "--temperature", "0.123456789", "--no-shared-prefix",
                              "--group", "4", "--out", "runs/a b", "--json", "--no-progress"])
    line = rerun_line(ctx)
    assert "--train-lr 0.0002" in line and "--temperature 0.123456789" in line
    assert "--no-shared-prefix" in line and "--group 4" in line and "--out 'runs/a b'" in line
    assert "--json" in line and "--no-progress" in line
    for python_name in ("--lr", "--group-size", "--out-dir", "--as-json", "--quiet", "--shared-prefix "):
        assert python_name not in line
    assert config_of(ctx)["train-lr"] == 2e-4


def test_repeated_multi_value_and_counted_options_are_written_once_per_use() -> None:
    demo = click.Command("demo", params=[
        click.Option(["--tag", "-t"], multiple=True), click.Option(["--pair"], nargs=2, type=(str, float)),
        click.Option(["-v", "--verbose"], count=True), click.Option(["--mode"], flag_value="fast"),
        click.Argument(["files"], nargs=-1)])
    args = ["-t", "a b", "--tag", "c", "--pair", "x", "1e-3", "-vv", "--mode", "--", "-weird.txt", "plain.txt"]
    ctx = demo.make_context("swm demo", list(args))
    line = rerun_line(ctx)
    assert line == "swm demo --tag 'a b' --tag c --pair x 0.001 --verbose --verbose --mode -- -weird.txt plain.txt"
    assert demo.make_context("swm demo", shlex.split(line)[2:]).params == ctx.params


def test_a_key_or_a_database_password_is_in_neither_the_line_nor_the_config() -> None:
    ctx = invoke("bench tom", ["--benchmark", "sim", "--model", f"gpt@https://{KEY}@api.example.org/v1",
                               "--db", "postgresql://swm:hunter2-password@db.example.org:5432/swm"])
    line, config = rerun_line(ctx), json.dumps(config_of(ctx))
    for text in (line, config):
        assert KEY not in text and "hunter2" not in text
        assert "gpt@https://***@api.example.org/v1" in text
        assert "postgresql://db.example.org:5432/swm?user=swm" in text
    _, params = parse(line)
    assert params["benchmark"] == "sim" and params["db"] == "postgresql://db.example.org:5432/swm?user=swm"


# ---- --config ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", LONG_RUNNING)
def test_the_long_running_commands_take_a_config_that_reads_back_as_the_options(
        path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tomli_w

    monkeypatch.delenv("SWM_DB", raising=False)  # as click orders them, an option's environment variable wins too

    assert takes_config(command(path))
    ctx = invoke(path, every_option_given(path))
    file = tmp_path / "run.toml"
    file.write_text(tomli_w.dumps(config_of(ctx)), encoding="utf-8")
    read = invoke(path, ["--config", str(file)])
    assert read.params == ctx.params
    assert rerun_line(read) == rerun_line(ctx), "values from the file are given, so the line spells them out"


def test_toml_and_yaml_take_dashes_or_underscores_and_the_command_line_wins(tmp_path: Path) -> None:
    toml = tmp_path / "learn.toml"
    toml.write_text('cycles = 5\ntrain_lr = 2e-4\nlevels = ["easy", "hard"]\ngating = "off"\n'
                    "no-replay = true\nfixed-partner = true\n", encoding="utf-8")
    yml = tmp_path / "learn.yaml"
    yml.write_text("cycles: 5\ntrain-lr: 2.0e-4\nlevels: easy,hard\ngating: 'off'\nreplay: false\n"
                   "self_play: false\n", encoding="utf-8")
    typed = invoke("learn", ["--cycles", "5", "--train-lr", "2e-4", "--levels", "easy,hard", "--gating", "off",
                             "--no-replay", "--fixed-partner"]).params
    assert invoke("learn", ["--config", str(toml)]).params == typed
    assert invoke("learn", ["--config", str(yml)]).params == typed
    wins = invoke("learn", ["--cycles", "2", "--config", str(toml)]).params
    assert wins["cycles"] == 2 and wins["train_lr"] == 2e-4
    assert invoke("learn", ["--config", str(toml), "--gating", "on"]).params["gating"] is True


def test_a_config_value_counts_as_given_for_a_preset_and_a_resumed_run(tmp_path: Path) -> None:
    from swm.commands.learn import _given_options
    from swm.commands.selfplay_cmd import apply_preset

    file = tmp_path / "c.toml"
    file.write_text('iterations = 3\npreset = "two-seat-2026-11"\n', encoding="utf-8")
    ctx = invoke("selfplay", ["--config", str(file)])
    assert apply_preset(ctx, ctx.params["preset"], dict(ctx.params))["iterations"] == 3  # the preset says 16
    (tmp_path / "l.toml").write_text("cycles = 5\n", encoding="utf-8")
    with invoke("learn", ["--config", str(tmp_path / "l.toml")]):
        assert "cycles" in _given_options()  # a thread started with other cycles is refused, not silently kept


@pytest.mark.parametrize(("text", "name", "expected"), [
    ("colour = 'blue'\n", "c.toml", "error: --config {file}: unknown key 'colour' (swm learn has no --colour)"),
    ("out_dir = 'x'\n", "c.toml", "error: --config {file}: unknown key 'out_dir' (swm learn has no --out-dir)"),
    ("cycles = 'many'\n", "c.toml", "error: --config {file}: cycles = 'many': 'many' is not a valid integer"),
    ("cycles = 2\ncycles-x = 1\n", "c.toml", "error: --config {file}: unknown key 'cycles-x'"),
    ("levels = ['easy', 'extreme']\n", "c.toml", "error: --config {file}: levels = ['easy', 'extreme']: unknown level: "
                                                  "extreme — use a comma list of "),
    ("train-lr = 1\ntrain_lr = 2\n", "c.toml", "error: --config {file}: --train-lr is given twice (key 'train_lr')"),
    ("cycles = = 2\n", "c.toml", "error: --config {file} is not valid TOML: "),
    ("- 1\n- 2\n", "c.yaml", "error: --config {file} holds a list, not a table of options"),
    ("cycles = 2\n", "c.json", "error: --config {file}: a config file ends in .toml, .yaml or .yml"),
])
def test_a_bad_config_is_refused_in_one_line(tmp_path: Path, text: str, name: str, expected: str) -> None:
    file = tmp_path / name
    file.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(main, ["learn", "--config", str(file)])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith(expected.format(file=file)), result.output


def test_a_missing_config_file_is_one_line() -> None:
    result = CliRunner().invoke(main, ["bench", "tom", "--config", "no-such.toml"])
    assert result.exit_code == 2 and result.output == (
        "error: no such file: no-such.toml — pass the path of a text file, or - for stdin\n")


# ---- the run page ----------------------------------------------------------------------------------------------

def test_a_run_page_shows_the_line_that_reruns_it_and_offers_its_config(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("starlette")
    monkeypatch.delenv("SWM_DB", raising=False)
    import tomllib

    from starlette.testclient import TestClient

    from swm.checkpoints import open_store
    from swm.commands._common import record_run
    from swm.testing import FakeOpenAIServer
    from swm.ui import create_app

    db = str(tmp_path / "runs.db")
    config = tmp_path / "tom.toml"
    config.write_text('modes = "vanilla"\nn = 1\nseed = 3\n', encoding="utf-8")
    with FakeOpenAIServer() as server:
        spec = server.model_spec.replace("http://", f"http://{KEY}@")
        args = ["bench", "tom", "--benchmark", "sim", "--config", str(config), "--model", spec, "--db", db,
                "--thread-id", "first look", "--out", str(tmp_path / "out dir"), "--no-progress", "--max-retries", "0"]
        result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    given = invoke("bench tom", args[2:]).params
    with TestClient(create_app(db)) as client:
        page = client.get("/runs/first%20look").text
        found = re.search(r'<code id="rerun">(.*?)</code>', page)
        assert found, page
        line = html.unescape(found.group(1))
        _, pasted = parse(line)
        assert {k: v for k, v in pasted.items() if k != "model"} == {k: v for k, v in given.items() if k != "model"}
        assert "--n 1" in line and "--modes vanilla" in line and "--config" not in line
        assert KEY not in page and pasted["model"] == spec.replace(KEY, "***")
        download = client.get("/config/first%20look")
        assert download.status_code == 200
        assert download.headers["content-disposition"].endswith('.toml"')
        assert KEY not in download.text
        assert tomllib.loads(download.text)["n"] == 1
        back = tmp_path / "back.toml"
        back.write_text(download.text, encoding="utf-8")
        read = invoke("bench tom", ["--config", str(back)]).params
        assert {k: v for k, v in read.items() if k != "model"} == {k: v for k, v in given.items() if k != "model"}
        assert client.get("/config/no-such-run").status_code == 404
    with sqlite3.connect(db) as conn:
        assert KEY not in " ".join(str(v) for row in conn.execute("select * from swm_runs") for v in row)

    store = open_store(db)
    with invoke("selfplay", ["--train-lr", "2e-4", "--thread-id", "lr-run"]):
        record_run(store, "lr-run", "selfplay", "selfplay")
    store.close()
    with TestClient(create_app(db)) as client:
        page = client.get("/selfplay/lr-run").text
    assert "--train-lr 0.0002" in page and "<td>--train-lr</td><td>0.0002</td>" in page and "0.000<" not in page


def test_a_run_recorded_before_rerun_lines_names_its_parameters_as_python_did(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from swm.checkpoints import open_store
    from swm.ui import create_app

    db = str(tmp_path / "old.db")
    store = open_store(db)
    store.insert("swm_runs", {"thread_id": "old", "kind": "selfplay", "graph": "selfplay", "command": "swm selfplay",
                              "options": json.dumps({"lr": 2e-4, "out_dir": "x"}), "started": "2026-01-01T00:00:00Z"},
                 pk="thread_id")
    store.close()
    with TestClient(create_app(db)) as client:
        page = client.get("/selfplay/old").text
    assert "Python names" in page and "<td>lr</td><td>0.0002</td>" in page
    assert "--out-dir" not in page and 'id="rerun"' not in page
