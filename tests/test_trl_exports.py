"""The TRL hand-off: ``<out>/exports`` loads as it is, replay writes each row once, rows carry the act step's tool.

The last test runs ``swm learn --update dpo`` for two cycles against the loopback server (the
runtime-LoRA stand-in, recording every request), then TRL's own ``trl dpo`` command on the
exported folder with the tiny random Llama.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from langchain_core.utils.function_calling import convert_to_openai_tool
from test_lifelong_gate import pair
from test_lifelong_graph import Agents

from swm.cli import main
from swm.lifelong.exports import COLUMNS, write_exports
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.samples import Sample, sample_rows
from swm.lifelong.update import dpo_rows, kto_rows, sft_rows
from swm.social.models import AgentActionForModel, action_schema_for
from swm.tasks.families import synthesize

datasets = pytest.importorskip("datasets")


def decision_samples(cycle: int) -> list[Sample]:
    return [Sample(episode_id=f"d{cycle}-{i}", run_id="r", cycle=cycle, task_id="train:mutual_friend:decision:0",
                   family="mutual_friend", level="decision", sample=i, policy_version="p0", prompt="Who is it?",
                   completion=f"ANSWER: {name}", passed=name == "Ann", formatted=True)
            for i, name in enumerate(["Ann", "Bob"])]


def fake_outputs(out: Path) -> None:
    """What else a trained run leaves in its folder: an adapter, a report, a plot."""
    (out / "adapters" / "p1").mkdir(parents=True)
    (out / "adapters" / "p1" / "adapter_config.json").write_text(json.dumps({"r": 8, "target_modules": ["q_proj"]}))
    (out / "report.md").write_text("# report\n")
    (out / "r_completion.png").write_bytes(b"\x89PNG")


def test_replay_writes_each_row_once_with_its_cycle_and_the_card_describes_each_window(tmp_path: Path) -> None:
    out = tmp_path / "out"
    fake_outputs(out)
    first = sample_rows("dpo", decision_samples(1))  # cycle 1: decisions only (no margins from the gate, no tools)
    second = dpo_rows([pair(cycle=2), pair(cycle=2, chosen="Would $520 work?", rejected="No.")])
    write_exports(out, "dpo", cycle=1, replay=True, rows=first)
    write_exports(out, "dpo", cycle=2, replay=True, rows=first + second)  # the window: both cycles
    files = {k: [json.loads(line) for line in (out / "exports" / "dpo" / f"cycle{k}.jsonl").read_text().splitlines()]
             for k in (1, 2)}
    assert [len(files[1]), len(files[2])] == [1, 2] and all(r["cycle"] == k for k in files for r in files[k])
    assert all(list(r) == list(COLUMNS["dpo"]) and None not in r.values() for k in files for r in files[k])
    card = (out / "exports" / "README.md").read_text()
    assert "| 1 | p1 | 1 | 1 | 1 | `dpo/cycle1.jsonl` |" in card
    assert "| 2 | p2 | 2 | 1, 2 | 3 | `dpo/cycle1.jsonl`, `dpo/cycle2.jsonl` |" in card and "Replay is on" in card
    # the folder loads as it is, beside the adapters and the report
    every = datasets.load_dataset(str(out / "exports"), split="train")
    assert every.num_rows == 3 and sorted(every["cycle"]) == [1, 2, 2]
    assert datasets.load_dataset(str(out / "exports" / "dpo"), split="train").num_rows == 3
    some = datasets.load_dataset("json", data_files=str(out / "exports" / "dpo" / "cycle*.jsonl"), split="train")
    assert some.num_rows == 3 and json.loads(some[2]["tools"])[0]["function"]["name"] == "AgentActionForModel"


def test_without_replay_a_cycle_trains_on_its_own_file_only(tmp_path: Path) -> None:
    rows = kto_rows([pair(cycle=1)]) + kto_rows([pair(cycle=2, chosen="$510?")])
    write_exports(tmp_path, "kto", cycle=1, replay=False, rows=rows[:2])
    write_exports(tmp_path, "kto", cycle=2, replay=False, rows=rows[2:])
    card = (tmp_path / "exports" / "README.md").read_text()
    assert "| 2 | p2 | 2 | 2 | 2 | `kto/cycle2.jsonl` |" in card and "Replay is off" in card
    assert datasets.load_dataset(str(tmp_path / "exports"), split="train")["cycle"] == [1, 1, 2, 2]
    with pytest.raises(ValueError, match="outside the window"):  # a row that would be trained on but not written
        write_exports(tmp_path, "kto", cycle=3, replay=False, rows=rows)


def test_sft_and_rs_sft_rows_share_one_layout_for_trl_sft(tmp_path: Path) -> None:
    from lifelong_helpers import negotiation_task, record

    task = negotiation_task()
    seller, buyer = task.names
    episode = record(task, [(seller, "I can offer it for $500."), (buyer, "Deal at $500.")], "e1").model_copy(
        update={"cycle": 1})
    rows = sample_rows("rs-sft", decision_samples(1)) + sft_rows([episode])
    path = write_exports(tmp_path, "rs-sft", cycle=1, replay=True, rows=rows)
    assert path == tmp_path / "exports" / "sft" / "cycle1.jsonl"
    loaded = datasets.load_dataset(str(tmp_path / "exports"), split="train")
    assert loaded.num_rows == 3 and loaded["source"] == ["decision", "trajectory", "trajectory"]


def test_the_tools_column_is_the_act_steps_tool_for_the_seat_that_acted() -> None:
    task = synthesize("negotiation", "easy", 1)
    seller, buyer = task.names
    (row,) = dpo_rows([pair(agent=buyer)])
    assert json.loads(row["tools"]) == [convert_to_openai_tool(action_schema_for((seller,)))]
    assert json.loads(dpo_rows([pair(track="perception", agent=buyer)])[0]["tools"]) is None
    assert json.loads(sample_rows("kto", decision_samples(1))[0]["tools"]) is None  # decisions are sampled as text


@pytest.mark.parametrize("reporter", ["wandb", "mlflow"])
def test_a_reporter_whose_package_is_missing_is_refused_in_one_line(reporter: str, tmp_path: Path) -> None:
    if importlib.util.find_spec(reporter) is not None:
        pytest.skip(f"{reporter} is installed")
    with pytest.raises(ValueError, match=f"pip install {reporter}"):
        LifelongPlan(report_to=reporter)
    result = CliRunner().invoke(main, ["learn", "--update", "dpo", "--report-to", reporter, "--db",
                                       str(tmp_path / "x.db"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and f"needs the {reporter} package (pip install {reporter})" in result.output
    assert not (tmp_path / "x.db").exists() or "learn" not in result.output.lower().split("error")[0]


@pytest.mark.parametrize("reporter", ["none", "tensorboard"])
def test_trl_reports_nowhere_itself_its_logs_go_to_the_runs_tracker(reporter: str, tmp_path: Path) -> None:
    """The run's one tracker takes TRL's logs (`tracker_callback`, tests/test_tracking_learn.py), never TRL's own
    ``report_to``, which would open a tracker run per trained policy."""
    trl = pytest.importorskip("trl")
    from swm.training.device import Placement
    from swm.training.trl_update import TrainSettings, _config

    settings = TrainSettings(report_to=reporter, run_name="t-p1")
    args = _config("dpo", trl, tmp_path, settings, Placement("cpu", "float32"))
    assert args.report_to == [] and args.run_name == "t-p1"


def test_an_unknown_reporter_is_refused_by_the_cli() -> None:
    result = CliRunner().invoke(main, ["learn", "--report-to", "comet"])
    assert result.exit_code == 2 and "'comet' is not one of" in result.output


def seller(agents: Agents) -> Any:
    """Play every model, base or adapter, by the scripted negotiators: both cycles then keep same-state pairs."""

    def act(prompt: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = agents(prompt, "AgentActionForModel")
        return reply.model_dump() if isinstance(reply, AgentActionForModel) else dict(reply)

    return act


@pytest.mark.timeout(900)  # about a minute on a quiet 2-core machine: two 1-step trainings, then `trl dpo`
def test_trl_dpo_runs_on_the_exports_of_a_real_swm_learn_run(tiny_gguf_llama: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from swm.testing import FakeOpenAIServer

    monkeypatch.setenv("SWM_TRAIN_THREADS", "1")  # a tiny model: more threads only contend

    db, out = tmp_path / "learn.db", tmp_path / "out"
    tensorboard = any(importlib.util.find_spec(m) for m in ("tensorboard", "tensorboardX"))
    with FakeOpenAIServer(lora=True, record=True, scripts={"AgentActionForModel": seller(Agents())}) as server:
        result = CliRunner().invoke(main, [
            "learn", "--update", "dpo", "--levels", "easy", "--families", "negotiation", "--cycles", "2",
            "--episodes-per-level", "2", "--samples-per-task", "2", "--max-turns", "2", "--heldout-per-cell", "1",
            "--dev-per-cell", "1", "--hf-model", str(tiny_gguf_llama), "--lora-server", server.base_url,
            "--verify-served", "identity", "--train-steps", "1", "--train-batch-size", "2",
            "--report-to", "tensorboard" if tensorboard else "none", "--model", server.model_spec,
            "--db", str(db), "--thread-id", "trl", "--out", str(out), "--json"])
        bodies = server.bodies()
    assert result.exit_code == 0, result.output[-3000:]
    exports = out / "exports"
    files = {k: [json.loads(line) for line in (exports / "dpo" / f"cycle{k}.jsonl").read_text().splitlines()]
             for k in (1, 2)}
    assert files[1] and files[2], "both cycles kept pairs"
    ids = [r["pair_id"] for k in files for r in files[k]]
    assert len(ids) == len(set(ids)) and all(r["cycle"] == k for k in files for r in files[k])
    card = (exports / "README.md").read_text()
    assert f"| 2 | p2 | {len(files[2])} | 1, 2 | {len(ids)} |" in card
    # (c) each row's tools are the tools the act step's request carried for that very prompt
    sent = {b["messages"][-1]["content"]: b["tools"] for b in bodies if b.get("tools")}
    action = [r for k in files for r in files[k] if r["track"] == "action"]
    assert action and all(json.loads(r["tools"]) == sent[r["prompt"][0]["content"]] for r in action)
    # (d) the run reported to TensorBoard, one run: each cycle's R row and each policy's TRL loss curve
    if tensorboard:
        from tensorboard_events import read_scalars

        events = read_scalars(out / "runs")
        assert set(events["R/deployed/pass/easy"]) == {0, 1, 2} and set(events["train/p1/loss"]) == {1}
        assert set(events["train/p2/rewards/margins"]) == {1}
    assert (out / "adapters" / "p1" / "adapter_config.json").is_file()
    # (a) TRL's own command reads the folder as it is, adapters beside it. It loads and tokenizes every row of both
    # cycles before its first step, so one step on one row (a batch of one) is enough to show it trains on them; on
    # the CPU TRL scores every prompt token against the whole vocabulary, which a second row doubles
    trl = Path(sys.executable).with_name("trl")
    run = subprocess.run([str(trl), "dpo", "--model_name_or_path", str(tiny_gguf_llama), "--dataset_name",
                          str(exports), "--output_dir", str(tmp_path / "trl-out"), "--max_steps", "1",
                          "--per_device_train_batch_size", "1", "--max_length", "1024", "--report_to", "none",
                          "--save_strategy", "no", "--logging_steps", "1", "--use_cpu", "true"],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "train_loss" in run.stdout + run.stderr and (tmp_path / "trl-out" / "model.safetensors").is_file()
