"""`swm.tracking`: one tracker a run, a dict of numbers at a step, read back; a missing package refused in one line.

TensorBoard is read back from its event files (tests/tensorboard_events.py); wandb, MLflow and trackio run
offline where they are installed (wandb in offline mode, MLflow on a file store, trackio's local database) and
are skipped, saying so, where they are not.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tensorboard_events import needs_tensorboard, read_scalars

from swm.cli import main
from swm.commands.invocation import config_of, rerun_line
from swm.errors import InputError
from swm.tracking import REPORTER_NAMES, REPORTERS, Tracker, check_reporter, open_tracker, scalars, tracking

MISSING = [name for name, row in REPORTERS.items() if not any(importlib.util.find_spec(m) for m in row.modules)]


def hide(reporter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the reporter's package missing for this test, installed or not (``sys.modules[name] = None``: found by
    no ``find_spec`` and imported by nobody), as on a machine without it."""
    import sys

    for module in REPORTERS[reporter].modules:
        monkeypatch.setitem(sys.modules, module, None)


class Recorder(Tracker):
    """A tracker that keeps what it is given: (numbers, step, axis) per call."""

    reporter = "recorder"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[dict[str, float], int, str]] = []

    def write(self, numbers: dict[str, float], step: int, axis: str) -> None:
        self.calls.append((numbers, step, axis))


def test_a_log_keeps_numbers_only_and_flattens_nested_dicts() -> None:
    recorder = Recorder()
    recorder.log({"a": 1, "b": None, "c": "text", "d": True, "e": math.nan, "f": 0.25}, step=3, axis="cycle")
    recorder.log({"only": None}, step=4)
    assert recorder.calls == [({"a": 1.0, "d": 1.0, "f": 0.25}, 3, "cycle")], "nothing to write is no call"
    assert scalars({"reward": {"buyer": 0.5, "seller": {"mean": 1, "n": None}}, "kl": 0.1, "note": "x"}) == {
        "reward/buyer": 0.5, "reward/seller/mean": 1.0, "kl": 0.1}


def test_none_opens_nothing_and_every_reporter_is_a_row() -> None:
    assert set(REPORTER_NAMES) == {"none", *REPORTERS} == {"none", "tensorboard", "wandb", "mlflow", "trackio"}
    tracker = open_tracker("none", "run", "unused")
    assert type(tracker) is Tracker and tracker.reporter == "none"
    with pytest.raises(InputError, match="unknown reporter 'comet'"):
        check_reporter("comet")


def test_tensorboard_writes_event_files_read_back_step_by_step(tmp_path: Path) -> None:
    needs_tensorboard()
    with tracking("tensorboard", "t1", tmp_path / "runs", {"cycles": 2}) as tracker:
        for step in range(3):
            tracker.log({"R/deployed/pass/easy": step / 4, "ACC/deployed/pass": None}, step=step, axis="cycle")
        tracker.log({"train/p1/loss": 0.7}, step=1, axis="train/p1/step")
    events = read_scalars(tmp_path / "runs")
    assert events["R/deployed/pass/easy"] == {0: 0.0, 1: 0.25, 2: 0.5}
    assert events["train/p1/loss"] == {1: pytest.approx(0.7)} and "ACC/deployed/pass" not in events


@pytest.mark.parametrize("reporter", ["wandb", "mlflow", "trackio"])
def test_a_reporter_whose_package_is_missing_is_refused_in_one_line(reporter: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    hide(reporter, monkeypatch)
    package = REPORTERS[reporter].package
    with pytest.raises(InputError, match=f"needs the {package} package \\(pip install {package}\\)") as err:
        open_tracker(reporter, "run", "unused")
    assert "\n" not in str(err.value) and err.value.hint == "install it, or run with --report-to none"


def _offline(reporter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if reporter in MISSING:
        pytest.skip(f"{REPORTERS[reporter].package} is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the default: a store in the run's logging folder
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))


@pytest.mark.parametrize("reporter", ["wandb", "mlflow", "trackio"])
def test_the_other_trackers_take_a_run_offline(reporter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _offline(reporter, tmp_path, monkeypatch)
    with tracking(reporter, "t1", tmp_path / "runs", {"cycles": 2}) as tracker:
        tracker.log({"R/deployed/pass/easy": 0.5}, step=0, axis="cycle")
        tracker.log({"train/p1/loss": 0.7}, step=1, axis="train/p1/step")
        tracker.log({"R/deployed/pass/easy": 0.75}, step=1, axis="cycle")
    if reporter == "mlflow":
        import mlflow

        uri = getattr(tracker, "uri", "")
        assert str(tmp_path / "runs") in uri, f"the store is in the run's folder, not the working directory: {uri}"
        client = mlflow.MlflowClient(tracking_uri=uri)
        run = client.search_runs([client.get_experiment_by_name("swm").experiment_id])[0]
        history = client.get_metric_history(run.info.run_id, "R/deployed/pass/easy")
        assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 0.75)]
    elif reporter == "wandb":
        assert list((tmp_path / "runs").rglob("*.wandb")), "an offline run file"


@pytest.mark.parametrize("command", ["learn", "selfplay"])
def test_the_commands_refuse_a_missing_tracker_before_the_run_starts(command: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    reporter = "trackio"  # TRL's newest tracker
    hide(reporter, monkeypatch)
    result = CliRunner().invoke(main, [command, "--report-to", reporter, "--db", str(tmp_path / "x.db"), "--out",
                                       str(tmp_path / "o")])
    assert result.exit_code == 2, result.output
    package = REPORTERS[reporter].package
    assert f"needs the {package} package (pip install {package})" in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("error")]) == 1
    assert not (tmp_path / "x.db").exists(), "refused before the run is recorded or its store opened"


@pytest.mark.parametrize("command", ["learn", "selfplay"])
def test_report_to_is_an_option_of_both_trainers_their_rerun_line_and_config(command: str) -> None:
    from test_rerun import invoke

    help_text = CliRunner().invoke(main, [command, "--help"]).output
    assert "--report-to [none|tensorboard|wandb|mlflow|trackio]" in help_text
    ctx = invoke(command, ["--report-to", "tensorboard"])
    assert "--report-to tensorboard" in rerun_line(ctx) and config_of(ctx)["report-to"] == "tensorboard"


def test_report_to_is_read_from_a_config_file(tmp_path: Path) -> None:
    from test_rerun import invoke

    file = tmp_path / "run.toml"
    file.write_text('report-to = "tensorboard"\n', encoding="utf-8")
    params: dict[str, Any] = invoke("selfplay", ["--config", str(file)]).params
    assert params["report_to"] == "tensorboard"
    assert invoke("learn", ["--config", str(file), "--report-to", "none"]).params["report_to"] == "none"
