"""``swm bench perf``: the performance suite of ``bench/`` (the same runner as ``python -m bench``)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import click

from swm.errors import SWMError

SECTIONS = ("overhead", "concurrency", "resume", "store", "embedded")


def load_runner() -> Any:
    """Import ``bench.runner`` from the source checkout, or say plainly why it is missing.

    ``bench/`` sits beside the package in the repository and is not part of the installed
    distribution, so this works from a source checkout (an editable install finds it from any
    directory) and not from a wheel.
    """
    try:
        return importlib.import_module("bench.runner")
    except ModuleNotFoundError as exc:
        if exc.name not in ("bench", "bench.runner"):
            raise
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "bench" / "runner.py").is_file():
        sys.path.insert(0, str(checkout))
        return importlib.import_module("bench.runner")
    raise SWMError("the performance suite (bench/) is not installed with swm",
                   "run it from a source checkout of the repository: python -m bench (or swm bench perf there)")


@click.command("perf")
@click.option("--quick", is_flag=True, help="A small, fast smoke run (CI).")
@click.option("--only", default=",".join(SECTIONS), show_default=True,
              help="Comma-separated sections to run.")
@click.option("--latency", type=float, default=None, help="Fake model latency in seconds [default 0.2; --quick 0.05].")
@click.option("--runs", type=int, default=None, help="Timed runs per graph and checkpointer.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write every measurement to this JSON file.")
def perf_command(quick: bool, only: str, latency: float | None, runs: int | None, json_path: Path | None) -> None:
    """Measure every graph's overhead, calls against the floor, concurrency, resume cost, store growth
    and the embedded model's speed, against a loopback fake model; prints ratios side by side."""
    sections = tuple(s.strip() for s in only.split(",") if s.strip())
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise click.BadParameter(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}",
                                 param_hint="--only")
    runner = load_runner()
    settings = runner.Settings.quick() if quick else runner.Settings()
    if latency is not None:
        settings.latency = latency
    if runs is not None:
        settings.runs = runs
    runner.run(sections, settings, echo=click.echo, json_path=json_path)
