"""Report a run's numbers to an experiment tracker, opened once a run: TensorBoard, wandb, MLflow or trackio.

`open_tracker` (or the context manager `tracking`) opens the tracker a run's ``--report-to`` names and returns a
`Tracker`: its `Tracker.log` writes a dict of numbers at a step (a ``None``, a text or a nested dict is left out:
`scalars` flattens a nested one first), `Tracker.close` ends the run. ``swm learn`` logs each cycle on the axis
``cycle``, ``swm selfplay`` each iteration on ``iteration``, and a trainer inside them each of its logging steps
on ``train/<policy>/step``. TensorBoard, MLflow and trackio take the step as it is; wandb keeps one step counter a
run, so each key is plotted against its own axis (``define_metric``), which is logged beside it.

`REPORTERS` is the table, one row per tracker: the modules any one of which it needs, the package to install, and
its `Tracker` class. `reporter_missing` says in one line what to install, before a run starts. Each tracker reads
its own environment for the rest (``WANDB_MODE=offline``, ``WANDB_PROJECT``, ``MLFLOW_TRACKING_URI``,
``MLFLOW_EXPERIMENT_NAME``, ``TRACKIO_PROJECT``, ``TRACKIO_DIR``); the project or experiment is ``swm`` unless
the environment names another.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard, get_args

from swm.errors import InputError

Reporter = Literal["none", "tensorboard", "wandb", "mlflow", "trackio"]
REPORTER_NAMES: tuple[str, ...] = get_args(Reporter)
PROJECT = "swm"  # the wandb / trackio project and the MLflow experiment, unless the environment names one


@dataclass(frozen=True)
class RunInfo:
    """What a tracker is opened with: the run's name, the folder it may write to, and the settings it records."""

    name: str
    logging_dir: Path
    config: Mapping[str, Any] = field(default_factory=dict)


class Tracker:
    """Where a run's numbers go: nowhere (``--report-to none``). Each tracker of `REPORTERS` overrides `write`."""

    reporter: str = "none"

    def __init__(self, run: RunInfo | None = None) -> None:
        self._lock = threading.Lock()  # a run's nodes log from the threads LangGraph runs them on

    def log(self, values: Mapping[str, object], step: int, axis: str = "step") -> None:
        """Write ``values``' numbers (bools as 0/1; None, NaN and everything else left out) at ``step`` on ``axis``."""
        numbers = {key: float(v) for key, v in values.items() if _number(v)}
        if numbers:
            with self._lock:
                self.write(numbers, int(step), axis)

    def write(self, numbers: dict[str, float], step: int, axis: str) -> None:
        """Write the numbers; the base tracker drops them."""

    def close(self) -> None:
        """End the run (flushing what is buffered)."""


def _number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a number a tracker plots (a bool counts as 0 or 1; NaN does not count)."""
    return isinstance(value, int | float) and not (isinstance(value, float) and math.isnan(value))


def scalars(tree: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Flatten a nested dict into ``a/b`` keys with its numbers: ``{"reward": {"buyer": 0.5}}`` → ``reward/buyer``."""
    out: dict[str, float] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(scalars(value, f"{name}/"))
        elif _number(value):
            out[name] = float(value)
    return out


class TensorBoardTracker(Tracker):
    """Event files in the run's logging folder (tensorboardX, or torch's writer where only tensorboard is there)."""

    reporter = "tensorboard"

    def __init__(self, run: RunInfo) -> None:
        super().__init__(run)
        try:
            from tensorboardX import SummaryWriter  # noqa: PLC0415 - the tracker's own package
        except ImportError:
            from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 - needs tensorboard installed
        run.logging_dir.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(run.logging_dir))
        if run.config:
            self.writer.add_text("config", "```json\n" + json.dumps(run.config, indent=1, default=str) + "\n```")

    def write(self, numbers: dict[str, float], step: int, axis: str) -> None:
        for key, value in numbers.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # a killed run keeps every step it logged

    def close(self) -> None:
        self.writer.close()


class WandbTracker(Tracker):
    """A wandb run (its files under the logging folder); each key plotted against its own axis."""

    reporter = "wandb"

    def __init__(self, run: RunInfo) -> None:
        super().__init__(run)
        import wandb  # noqa: PLC0415 - the tracker's own package

        run.logging_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", PROJECT), name=run.name,
                              config=dict(run.config), dir=str(run.logging_dir))
        self.defined: set[str] = set()  # the axes and the keys plotted against them

    def write(self, numbers: dict[str, float], step: int, axis: str) -> None:
        if axis not in self.defined:
            self.run.define_metric(axis)
            self.defined.add(axis)
        for key in numbers.keys() - self.defined:
            self.run.define_metric(key, step_metric=axis)
            self.defined.add(key)
        self.run.log({**numbers, axis: step})

    def close(self) -> None:
        self.run.finish()


def local_store(folder: Path) -> str:
    """MLflow's store when ``MLFLOW_TRACKING_URI`` names none: SQLite in the run's logging folder (MLflow 3 refuses to
    start a file store, its old default ``./mlruns``, unless told to), or the file store there, allowed for this
    process, where SQLAlchemy, which the SQLite store needs, is not installed (``mlflow-skinny``)."""
    folder.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("sqlalchemy") is not None:
        return f"sqlite:///{(folder / 'mlflow.db').as_posix()}"
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return (folder / "mlruns").as_uri()


class MLflowTracker(Tracker):
    """An MLflow run, through the client (a node logs from another thread than the one that opened the run)."""

    reporter = "mlflow"

    def __init__(self, run: RunInfo) -> None:
        super().__init__(run)
        import mlflow  # noqa: PLC0415 - the tracker's own package
        from mlflow.entities import Metric  # noqa: PLC0415 - the tracker's own package

        self.uri = os.environ.get("MLFLOW_TRACKING_URI") or local_store(run.logging_dir)
        self.client = mlflow.MlflowClient(tracking_uri=self.uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME", PROJECT)
        found = self.client.get_experiment_by_name(name)
        experiment = found.experiment_id if found is not None else self.client.create_experiment(name)
        self.run_id = self.client.create_run(experiment, run_name=run.name).info.run_id
        self.metric = Metric
        if run.config:
            self.client.log_dict(self.run_id, json.loads(json.dumps(run.config, default=str)), "config.json")

    def write(self, numbers: dict[str, float], step: int, axis: str) -> None:
        now = int(time.time() * 1000)
        # MLflow's names take letters, digits and _ - . / and spaces
        self.client.log_batch(self.run_id, metrics=[self.metric(re.sub(r"[^\w\-./ ]", "_", key), value, now, step)
                                                    for key, value in numbers.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class TrackioTracker(Tracker):
    """A trackio run (a local database under ``TRACKIO_DIR`` unless a Space is named)."""

    reporter = "trackio"

    def __init__(self, run: RunInfo) -> None:
        super().__init__(run)
        import trackio  # noqa: PLC0415 - the tracker's own package

        self.run = trackio.init(project=os.environ.get("TRACKIO_PROJECT", PROJECT), name=run.name,
                                config=dict(run.config))

    def write(self, numbers: dict[str, float], step: int, axis: str) -> None:
        self.run.log(numbers, step=step)

    def close(self) -> None:
        self.run.finish()


@dataclass(frozen=True)
class ReporterRow:
    """One tracker: the modules any one of which it needs, the package that gives them, and its `Tracker`."""

    name: str
    modules: tuple[str, ...]
    package: str
    tracker: type[Tracker]


REPORTERS: dict[str, ReporterRow] = {row.name: row for row in (
    ReporterRow("tensorboard", ("tensorboardX", "tensorboard"), "tensorboard", TensorBoardTracker),
    ReporterRow("wandb", ("wandb",), "wandb", WandbTracker),
    ReporterRow("mlflow", ("mlflow",), "mlflow", MLflowTracker),
    ReporterRow("trackio", ("trackio",), "trackio", TrackioTracker))}


def reporter_missing(reporter: str) -> str | None:
    """Say what is missing for a run to report to ``reporter`` (None: nothing, or ``none``)."""
    row = REPORTERS.get(reporter)
    if row is None or any(importlib.util.find_spec(m) is not None for m in row.modules):
        return None
    return f"--report-to {reporter} needs the {row.package} package (pip install {row.package})"


def check_reporter(reporter: str, off: str = "--report-to none") -> None:
    """Refuse, in one line, a reporter that is not one of `REPORTER_NAMES` or whose package is not installed
    (the hint names ``off``, the way to turn reporting off)."""
    if reporter not in REPORTER_NAMES:
        raise InputError(f"unknown reporter {reporter!r}", f"use one of {', '.join(REPORTER_NAMES)}")
    missing = reporter_missing(reporter)
    if missing:
        raise InputError(missing, f"install it, or run with {off}")


def open_tracker(reporter: str, name: str, logging_dir: str | Path, config: Mapping[str, Any] | None = None) -> Tracker:
    """Open the tracker ``reporter`` names for the run ``name`` (`Tracker` itself for ``none``)."""
    check_reporter(reporter)
    run = RunInfo(name=name, logging_dir=Path(logging_dir).expanduser(), config=dict(config or {}))
    row = REPORTERS.get(reporter)
    return row.tracker(run) if row is not None else Tracker(run)


@contextmanager
def tracking(reporter: str, name: str, logging_dir: str | Path,
             config: Mapping[str, Any] | None = None) -> Iterator[Tracker]:
    """Open the tracker for one run (`open_tracker`) and close it when the run ends, however it ends."""
    tracker = open_tracker(reporter, name, logging_dir, config)
    try:
        yield tracker
    finally:
        tracker.close()
