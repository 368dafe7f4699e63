"""``swm learn --report-to``: every cycle's R row, ACC/BWT/FWT, dev rates and deploy reach the run's one tracker,
and so do each training step's logs (TRL's for sft/dpo/kto, PPO's loss parts, KL and clip fraction for ppo).

The loop runs on the scripted negotiators of tests/test_lifelong_graph.py (memory updates: no training, any
model), the trainers on the tiny random models the training tests use; TensorBoard's event files are read back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tensorboard_events import needs_tensorboard, read_scalars
from test_lifelong_graph import Agents
from test_tracking import Recorder

from swm.checkpoints import ExperienceStore
from swm.cli import main
from swm.lifelong import store as ls
from swm.testing import ScriptedChatModel
from swm.tracking import tracking

ARGS = ["learn", "--cycles", "2", "--levels", "easy,medium", "--families", "negotiation,secret",
        "--episodes-per-level", "2", "--samples-per-task", "2", "--max-turns", "2", "--heldout-per-cell", "1",
        "--gate-alpha", "1.0", "--report-to", "tensorboard", "--thread-id", "tracked", "--json", "--no-progress"]


def test_each_cycle_logs_r_its_retention_metrics_the_dev_rates_and_the_deploy(tmp_path: Path) -> None:
    needs_tensorboard()
    db, out = tmp_path / "run.db", tmp_path / "out"
    args = [*ARGS, "--db", str(db), "--out", str(out)]
    result = CliRunner().invoke(main, args, obj={"llm": ScriptedChatModel(respond=Agents())})
    assert result.exit_code == 0, result.output[-3000:]
    events = read_scalars(out / "runs")
    store = ExperienceStore(db)
    for curve in ("deployed", "candidate"):  # R's rows, cycle by cycle, as the store holds them
        r = ls.matrix(store, "tracked", "pass", curve)
        for (cycle, level), cell in r.items():
            assert events[f"R/{curve}/pass/{level}"][cycle] == pytest.approx(cell.rate)
        assert set(events[f"R/{curve}/completion/easy"]) == {0, 1, 2}
    stored = {(row["curve"], row["metric"], row["name"]): row["value"]
              for row in store.rows("select * from lifelong_metrics where run_id = 'tracked'")}
    for name in ("ACC", "BWT", "FWT"):  # the last cycle's are the report's
        for curve in ("deployed", "candidate"):
            assert events[f"{name}/{curve}/pass"][2] == pytest.approx(stored[(curve, "pass", name)])
    assert set(events["ACC/deployed/pass"]) == {0, 1, 2} and set(events["BWT/deployed/pass"]) == {2}
    deploys = {row["cycle"]: row["deployed"] for row in store.rows("select * from lifelong_deploys")}
    assert events["deploy/deployed"] == {c: float(deploys[c]) for c in (0, 1, 2)}
    assert sum(events["gate/kept"].values()) == ls.gate_counts(store, "tracked")["_kept"]
    dev = ls.eval_cells(store, "tracked", "p1", "pass", "dev")
    assert events["dev/pass/easy"][1] == pytest.approx(dev["easy"].rate)
    # a finished thread rewrites its report and opens no tracker: no new event file
    files = sorted((out / "runs").rglob("events.out.tfevents.*"))
    again = CliRunner().invoke(main, args, obj={"llm": ScriptedChatModel(respond=Agents())})
    assert again.exit_code == 0 and sorted((out / "runs").rglob("events.out.tfevents.*")) == files


def test_trls_logs_go_to_the_runs_tracker_under_the_policy_and_to_a_run_of_their_own_alone(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    needs_tensorboard()
    from test_lifelong_gate import pair
    from test_lifelong_train import tiny_llama

    from swm.lifelong.update import export
    from swm.training.trl_update import TrainSettings, train_adapter

    model = tiny_llama(tmp_path / "tiny")
    pairs = [pair(), pair(chosen="Would $520 work?", rejected="No."), pair(chosen="I can offer $500.", rejected="!")]
    rows = [json.loads(line) for line in export(pairs, "dpo", tmp_path / "dpo.jsonl").read_text().splitlines()]
    settings = TrainSettings(max_steps=2, batch_size=2, max_length=128, progress=False)
    with tracking("tensorboard", "t", tmp_path / "runs") as tracker:
        train_adapter("dpo", rows, str(model), tmp_path / "p1", settings=settings, tracker=tracker,
                      section="train/p1")
    events = read_scalars(tmp_path / "runs")
    assert set(events["train/p1/loss"]) == {1, 2} and set(events["train/p1/rewards/margins"]) == {1, 2}
    assert "train/p1/learning_rate" in events and "train/p1/grad_norm" in events
    assert not list((tmp_path / "p1").rglob("events.out.tfevents.*")), "TRL reports to nothing itself"
    # called alone, with report_to and no tracker: a run of its own, kept beside the adapter
    sft = [{"prompt": r["prompt"], "completion": r["chosen"]} for r in rows]
    alone = TrainSettings(max_steps=1, batch_size=2, max_length=128, progress=False, report_to="tensorboard")
    train_adapter("sft", sft, str(model), tmp_path / "sft", settings=alone)
    own = read_scalars(tmp_path / "sft" / "runs")
    assert set(own["train/loss"]) == {1} and "train/entropy" in own, "SFT's entropy, as TRL logs it"


def test_ppo_logs_its_loss_parts_kl_and_clip_fraction_at_each_optimizer_step(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    import toy_task as toy
    from test_learn_ppo_rounds import samples

    from swm.lifelong.ppo_update import train_ppo
    from swm.training.trl_update import TrainSettings

    torch.set_num_threads(1)
    base = toy.make_toy_model(tmp_path / "base")
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps(config | {"max_position_embeddings": 256}))
    recorder = Recorder()
    settings = TrainSettings(max_steps=2, learning_rate=1e-3, batch_size=4, max_length=64, progress=False)
    stats = train_ppo(samples(), str(base), tmp_path / "p1", parent_adapter=None, settings=settings,
                      estimator="group", temperature=1.0, groups="all", iterations=2, group=2, tracker=recorder,
                      section="train/p1")
    keys = {key for numbers, _, _ in recorder.calls for key in numbers}
    assert {"train/p1/loss", "train/p1/policy", "train/p1/kl", "train/p1/clipped", "train/p1/round_pass_rate"} <= keys
    steps = [step for _, step, _ in recorder.calls]
    assert steps == sorted(steps) and steps[-1] == stats.steps
    assert {axis for _, _, axis in recorder.calls} == {"train/p1/step"}
