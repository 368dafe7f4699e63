"""``swm selfplay``'s lines as a user reads them on stderr: each step said once an iteration, a role's reward of
one value without an interval it cannot have, a missing KL or loss as a dash, never Python's None."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
from test_lifelong_train import tiny_llama  # noqa: E402

from swm.cli import main  # noqa: E402
from swm.commands.progress import iteration_line  # noqa: E402


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


def test_each_iteration_says_playing_rollouts_once_and_no_interval_for_one_value(base_dir: Path,
                                                                                 tmp_path: Path) -> None:
    """Two rollouts at once (the custom stream on, as a served run has it): the fan-out and its tasks were two
    lines for one step; a held-out role of one task printed ``±0.00 (n=1)``."""
    args = ["selfplay", "--base", str(base_dir), "--iterations", "2", "--tasks", "1", "--group", "2", "--max-turns",
            "2", "--eval-tasks", "1", "--max-new-tokens", "3", "--train-rank", "4", "--estimator", "group",
            "--kl-coef", "0.05", "--sampler", "torch", "--concurrency", "2", "--out", str(tmp_path / "out"),
            "--db", str(tmp_path / "sp.db"), "--thread-id", "said-once"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    lines = [line.split("] ", 1)[1] for line in result.stderr.splitlines() if line.startswith("[")]
    rollouts = [line for line in lines if "rollout" in line and line != "rollout played"]
    assert rollouts == ["iteration 0: playing rollouts (2) …", "iteration 1: playing rollouts (2) …"], lines
    summaries = [line for line in result.stdout.splitlines() if line.startswith("iteration ")]
    assert len(summaries) == 2
    for line in summaries:
        held_out = line.split("held-out ", 1)[1].split(";", 1)[0]
        assert re.fullmatch(r"buyer -?\d\.\d\d \(n=1\), seller -?\d\.\d\d \(n=1\)", held_out), line
        assert "None" not in line and re.search(r"; loss -?\d", line), line  # the update's loss, shown


def test_a_missing_kl_or_loss_is_a_dash_not_a_minus_sign() -> None:
    line = iteration_line(0, {"estimator": "group", "kl": None, "loss": None,
                              "reward": {"buyer": {"mean": 0.5, "ci95": None, "n": 1}}})
    assert "KL —; loss —" in line and "reward buyer 0.50 (n=1);" in line
    assert "KL 0.0123; loss -0.5" in iteration_line(0, {"estimator": "group", "kl": 0.0123, "loss": -0.5})
