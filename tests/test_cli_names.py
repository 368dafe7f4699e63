"""Options are named the same across commands; the old names still work, hidden; learn hides its bar."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from swm.cli import main
from swm.commands.selfplay_cmd import selfplay_command
from swm.testing import FakeOpenAIServer


def test_selfplay_takes_the_shared_names_and_its_old_ones_hidden() -> None:
    new = selfplay_command.make_context("selfplay", ["--train-lr", "0.2", "--train-rank", "4", "--concurrency", "3"])
    old = selfplay_command.make_context("selfplay", ["--lr", "0.2", "--lora-r=4", "--max-concurrency", "3"])
    for ctx in (new, old):
        assert (ctx.params["lr"], ctx.params["lora_r"], ctx.params["max_concurrency"]) == (0.2, 4, 3)
    shown = CliRunner().invoke(main, ["selfplay", "--help"]).output
    assert "--train-lr" in shown and "--train-rank" in shown and "--concurrency" in shown
    assert "--lr " not in shown and "--lora-r" not in shown and "--max-concurrency" not in shown
    learn = CliRunner().invoke(main, ["learn", "--help"]).output
    assert "--train-lr" in learn and "--train-rank" in learn and "--concurrency" in learn and "--no-progress" in learn


def test_an_old_name_after_a_double_dash_is_left_alone() -> None:
    import click

    from swm.commands._common import aliased

    @click.command("x", cls=aliased(lr="--train-lr"))
    @click.option("--train-lr", "lr", type=float, default=0.0)
    @click.argument("rest", nargs=-1)
    def x(lr: float, rest: tuple[str, ...]) -> None:
        click.echo(f"{lr} {' '.join(rest)}")

    out = CliRunner().invoke(x, ["--lr", "0.5", "--", "--lr"])
    assert out.exit_code == 0 and out.stdout == "0.5 --lr\n"
    assert "note: --lr is now --train-lr" in out.stderr


def test_learn_no_progress_hides_the_bar(tmp_path: Path) -> None:
    args = ["learn", "--db", str(tmp_path / "swm.db"), "--cycles", "1", "--levels", "easy", "--families",
            "mutual_friend", "--episodes-per-level", "1", "--max-turns", "2", "--heldout-per-cell", "1",
            "--dev-per-cell", "1", "--out", str(tmp_path / "out")]
    with FakeOpenAIServer() as server:
        quiet = CliRunner().invoke(main, [*args, "--model", server.model_spec, "--thread-id", "q", "--no-progress"])
        shown = CliRunner().invoke(main, [*args, "--model", server.model_spec, "--thread-id", "p"])
    assert quiet.exit_code == 0 and shown.exit_code == 0, quiet.output + shown.output
    assert "episodes:" in shown.stderr and "episodes:" not in quiet.stderr
