"""``swm selfplay --report-to``: each iteration's per-role rewards, held-out rates, KL, loss and clip fraction reach
one tracker run, read back from TensorBoard's event files, equal to the summary the run prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tensorboard_events import needs_tensorboard, read_scalars

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
from test_lifelong_train import tiny_llama  # noqa: E402

from swm.cli import main  # noqa: E402
from swm.selfplay.scalars import iteration_scalars  # noqa: E402


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    return tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


def test_each_iteration_logs_its_summary_per_role_with_kl_and_clip_fraction(base_dir: Path, tmp_path: Path) -> None:
    needs_tensorboard()
    out = tmp_path / "out"
    args = ["selfplay", "--base", str(base_dir), "--iterations", "2", "--tasks", "1", "--group", "2", "--max-turns",
            "2", "--eval-tasks", "1", "--max-new-tokens", "3", "--train-rank", "4", "--estimator", "group",
            "--kl-coef", "0.05", "--sampler", "torch", "--report-to", "tensorboard", "--out", str(out), "--db",
            str(tmp_path / "sp.db"), "--thread-id", "sp-tracked", "--json", "--no-progress"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output[-3000:]
    summaries = json.loads(result.stdout)["summaries"]
    events = read_scalars(out / "sp-tracked" / "runs")
    for i in (0, 1):
        summary = summaries[str(i)]
        for role, reward in summary["reward"].items():
            assert events[f"reward/{role}"][i] == pytest.approx(reward["mean"])
        assert set(summary["reward"]) == {"buyer", "seller"}
        assert events["update/kl"][i] == pytest.approx(summary["kl"])
        assert events["update/clipped"][i] == pytest.approx(summary["clipped"])
        assert events["update/loss"][i] == pytest.approx(summary["loss"])
        assert events["heldout/pass_rate"][i] == pytest.approx(summary["eval_pass_rate"])
        assert events["seconds/iteration"][i] == pytest.approx(summary["seconds"], rel=1e-5)
    assert "update/policy" in events and "rollouts/tokens_per_s" in events


def test_the_scalars_of_a_summary_name_each_role_and_leave_out_what_is_not_a_number() -> None:
    summary = {"estimator": "group", "sampler": "torch", "group_size": 2, "temperature": 0.7,
               "reward": {"buyer": {"mean": 0.5, "ci95": 0.1, "n": 2}, "seller": {"mean": None, "ci95": None, "n": 0}},
               "pass_rate": 0.5, "eval_reward": {"buyer": {"mean": 1.0, "ci95": None, "n": 1}}, "eval_pass_rate": 1.0,
               "signals": None, "eval_signals": None, "kl": 0.01, "loss": "nan?", "clipped": 0.25,
               "filtered_rate": 0.0, "filtered": {"turns": 4}, "rollouts": 2, "failed": 0, "tokens": 12,
               "tokens_per_s": 3.0, "rows": 4.0, "skipped_rows": 0.0, "sampling_seconds": 1.0, "update_seconds": 2.0,
               "evaluate_seconds": 0.5, "seconds": 3.5}
    numbers = iteration_scalars(summary, {"policy": -0.1, "value": 0.0, "diverged": "no", "seconds": 2.0})  # type: ignore[arg-type]
    assert numbers["reward/buyer"] == 0.5 and numbers["reward/buyer/ci95"] == 0.1 and "reward/seller" not in numbers
    assert numbers["heldout/reward/buyer"] == 1.0 and numbers["heldout/pass_rate"] == 1.0
    assert numbers["update/kl"] == 0.01 and numbers["update/clipped"] == 0.25 and "update/loss" not in numbers
    assert numbers["update/policy"] == -0.1 and "update/diverged" not in numbers and "update/seconds" not in numbers
    assert numbers["seconds/update"] == 2.0 and "estimator" not in numbers
