"""The ``swm`` command line: one group; each command is imported when it runs or shows its own help.

`COMMANDS` and `BENCH_COMMANDS` name where each command lives and its one-line help, so ``swm --help``
imports no command module (nor LangGraph, LangChain or a model client): it stays a fraction of a
CPU-second (``python -m bench.cli_startup`` measures it). A new command is a row there;
tests/test_cli.py checks every row against the command it names. Every `SWMError` is printed as
one line with a hint and a non-zero exit code; nothing already checkpointed is lost.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any, NoReturn

import click

from swm import drain
from swm.credentials import redact_stderr
from swm.errors import SWMError

# name -> ("module:attribute", the command's one-line help as `swm --help` shows it)
COMMANDS: dict[str, tuple[str, str]] = {
    "ask": ("swm.commands.parse_ask:ask_command",
            "Answer a theory-of-mind question about a story; S3AP modes parse it first (cached per story)."),
    "bench": ("swm.cli:bench", "Benchmarks: theory-of-mind QA, parser quality, SOTOPIA episodes, performance."),
    "engine": ("swm.commands.engine_cmd:engine_group",
               "The embedded model's server: llama.cpp's llama-server (batched slots, adapters per request) or the "
               "Python one."),
    "graphs": ("swm.commands.graphs_cmd:graphs_command",
               "Print each graph as Mermaid and draw it as a PNG (pygraphviz, which bundles Graphviz)."),
    "learn": ("swm.commands.learn:learn_command",
              "Run the lifelong loop: verifiable tasks, self-play episodes, gated pairs, updates, retention metrics."),
    "parse": ("swm.commands.parse_ask:parse_command",
              "Parse STORY_FILE ('-' for stdin) into its social state and print it as the paper's S3AP JSON."),
    "play": ("swm.commands.play:play_command",
             "Play one social episode and print its transcript, predicted mental states and judge scores."),
    "selfplay": ("swm.commands.selfplay_cmd:selfplay_command",
                 "Self-play RL: one LoRA policy plays every seat of a verifiable task; PPO on per-role rewards."),
    "ui": ("swm.commands.ui_cmd:ui_command",
           "Browse runs, episodes, social states, games and learning curves in a web page (read-only)."),
}
BENCH_COMMANDS: dict[str, tuple[str, str]] = {
    "games": ("swm.commands.bench_games:games_command",
              "Play hidden-role games per policy setting and write win rates per side (95% CI) and game metrics."),
    "parse": ("swm.commands.bench_tom:parse_bench_command",
              "Score S3AP parses against gold states: 0.3 × structural + 0.7 × exact observation fidelity."),
    "perf": ("swm.commands.bench_perf:perf_command",
             "Measure every graph's overhead, calls against the floor, concurrency, resume cost, store growth and "
             "the embedded model's speed, against a loopback fake model; prints ratios side by side."),
    "sotopia": ("swm.commands.bench_sotopia:sotopia_command",
                "Run SOTOPIA episodes per policy and write goal and every SOTOPIA-EVAL dimension (mean ± 95% CI)."),
    "tom": ("swm.commands.bench_tom:tom_command",
            "Run the paper's Table 1 protocol: accuracy per mode and question type, with cost and 95% CIs."),
}


def load_command(target: str) -> click.Command:
    """Import the command ``module:attribute`` names."""
    module, _, attribute = target.partition(":")
    command = getattr(importlib.import_module(module), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{target} is not a click command")
    return command


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name, each imported from its row (``module:attribute``, one-line help) on first
    use: its names and one-line helps need no import, so neither does the group's ``--help``."""

    def __init__(self, rows: dict[str, tuple[str, str]]) -> None:
        self.rows = dict(rows)
        self.loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.loaded:
            if name not in self.rows:
                raise KeyError(name)
            self.loaded[name] = load_command(self.rows[name][0])
        return self.loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self.loaded[name] = command
        self.rows.pop(name, None)

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self.loaded.pop(name, None)
        self.rows.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self.rows or name in self.loaded

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self.rows, *self.loaded]))

    def __len__(self) -> int:
        return len({*self.rows, *self.loaded})

    def short_help(self, name: str, limit: int) -> str:
        """Return the command's one-line help for a listing, from its row while it is not imported."""
        if name in self.rows and name not in self.loaded:
            return click.Command(name, help=self.rows[name][1]).get_short_help_str(limit)
        return self[name].get_short_help_str(limit)


class SWMGroup(click.Group):
    """A click group that turns swm's errors into one-line messages and exit codes; given `LazyCommands`,
    it lists its commands without importing them."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if not isinstance(self.commands, LazyCommands):
            return super().format_commands(ctx, formatter)
        names = [n for n in self.list_commands(ctx) if n in self.commands.rows or not self.commands[n].hidden]
        if names:
            limit = formatter.width - 6 - max(len(n) for n in names)
            with formatter.section("Commands"):
                formatter.write_dl([(n, self.commands.short_help(n, limit)) for n in names])
        return None

    def invoke(self, ctx: click.Context) -> Any:
        redact_stderr()  # a key a server quoted back in an error is never printed (swm.credentials)
        try:
            with drain.handling_signals():  # SIGTERM / SIGHUP stop at the next step, as documented in swm.drain
                return super().invoke(ctx)
        except SWMError as exc:
            click.echo(f"error: {exc.one_line()}", err=True)
            sys.exit(exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort):  # click's own: --help, a bad option
            raise
        except Exception as exc:
            if drain.is_drained(exc):
                self.drained(exc)
            from swm.checkpoints.environment import environment_fault  # noqa: PLC0415 - only on a failure

            fault = environment_fault(exc)
            if fault is None:
                raise
            click.echo(f"error: {fault.one_line()}", err=True)
            sys.exit(fault.exit_code)
        except KeyboardInterrupt as exc:
            click.echo("interrupted: finished steps are checkpointed; rerun with the same --db and "
                       "--thread-id to resume", err=True)
            if isinstance(exc, drain.SignalInterrupt):  # a second signal: threads still waiting are not joined
                drain.exit_now(128 + exc.signum)
            sys.exit(130)

    @staticmethod
    def drained(exc: Exception) -> NoReturn:
        """Say why a drained run stopped (LangGraph's ``GraphDrained``) and exit with its code."""
        cause = drain.drained_by()
        if isinstance(cause, SWMError):  # drained for a fault of what the run stands on (swm.drain.stop_for)
            click.echo(f"error: {cause.one_line()}", err=True)
            sys.exit(cause.exit_code)
        reason = getattr(exc, "reason", None)
        click.echo(f"stopped on {reason}: finished steps are checkpointed; rerun with the same --db and "
                   "--thread-id to resume", err=True)
        sys.exit(drain.drained_exit_code(reason))


@click.group(cls=SWMGroup, commands=LazyCommands(COMMANDS), context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="social-world-models")
def main() -> None:
    """swm: social world models for language agents (S3AP, Foresee-and-Act, lifelong learning)."""


@click.group(cls=SWMGroup, commands=LazyCommands(BENCH_COMMANDS))
def bench() -> None:
    """Benchmarks: theory-of-mind QA, parser quality, SOTOPIA episodes, performance."""


if __name__ == "__main__":  # python -m swm.cli
    main()
