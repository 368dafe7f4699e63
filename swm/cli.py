"""The ``swm`` command line: one group, subcommands discovered in `swm.commands`.

Each module in ``swm/commands/`` defines ``register(main, bench)`` and adds its commands, so
new commands need no edit here. Every `SWMError` is printed as one line with a hint and a
non-zero exit code; nothing already checkpointed is lost.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any

import click

import swm.commands
from swm import drain
from swm.credentials import redact_stderr
from swm.errors import SWMError


class SWMGroup(click.Group):
    """A click group that turns swm's errors into one-line messages and exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        redact_stderr()  # a key a server quoted back in an error is never printed (swm.credentials)
        try:
            with drain.handling_signals():  # SIGTERM / SIGHUP stop at the next step, as documented in swm.drain
                return super().invoke(ctx)
        except SWMError as exc:
            click.echo(f"error: {exc.one_line()}", err=True)
            sys.exit(exc.exit_code)
        except drain.GraphDrained as exc:
            cause = drain.drained_by()
            if isinstance(cause, SWMError):  # drained for a fault of what the run stands on (swm.drain.stop_for)
                click.echo(f"error: {cause.one_line()}", err=True)
                sys.exit(cause.exit_code)
            click.echo(f"stopped on {exc.reason}: finished steps are checkpointed; rerun with the same --db and "
                       "--thread-id to resume", err=True)
            sys.exit(drain.drained_exit_code(exc.reason))
        except Exception as exc:
            from swm.checkpoints.environment import environment_fault

            fault = environment_fault(exc)
            if fault is None:
                raise
            click.echo(f"error: {fault.one_line()}", err=True)
            sys.exit(fault.exit_code)
        except KeyboardInterrupt as exc:
            click.echo("interrupted: finished steps are checkpointed; rerun with the same --db and "
                       "--thread-id to resume", err=True)
            sys.exit(128 + exc.signum if isinstance(exc, drain.SignalInterrupt) else 130)


@click.group(cls=SWMGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="social-world-models")
def main() -> None:
    """swm: social world models for language agents (S3AP, Foresee-and-Act, lifelong learning)."""


@main.group(cls=SWMGroup)
def bench() -> None:
    """Benchmarks: theory-of-mind QA, parser quality, SOTOPIA episodes, performance."""


def _discover() -> None:
    for module in sorted(pkgutil.iter_modules(swm.commands.__path__), key=lambda m: m.name):
        if module.name.startswith("_"):
            continue
        loaded = importlib.import_module(f"swm.commands.{module.name}")
        register = getattr(loaded, "register", None)
        if register is not None:
            register(main, bench)


_discover()


if __name__ == "__main__":  # python -m swm.cli
    main()
