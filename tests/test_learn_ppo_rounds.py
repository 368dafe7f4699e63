"""``swm learn --update ppo --ppo-iterations N``: later rounds sample fresh moves of the cycle's decision tasks.

A plumbing test on the tiny random model (`toy_task`): its word-level vocabulary cannot write a
name, so every fresh move fails the checker; what is checked is that each later round draws
``group`` moves a decision task from the adapter being trained, keeps them (``groups="all"``),
updates on them, and records the round. Whether the rounds raise the reward is the toy sanity
tests' business (`test_learning_sanity`, `test_selfplay_sanity`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
import toy_task as toy  # noqa: E402

from swm.lifelong.ppo_update import decision_tasks, train_ppo  # noqa: E402
from swm.lifelong.samples import Sample  # noqa: E402
from swm.tasks.families import synthesize  # noqa: E402


def samples() -> list[Sample]:
    out = []
    for seed in range(2):
        task = synthesize("mutual_friend", "decision", seed)
        for j, (reply, ok) in enumerate([("ANSWER: red", True), ("ANSWER: blue", False)]):
            out.append(Sample(episode_id=f"{task.task_id}/{j}", run_id="r", cycle=1, task_id=task.task_id,
                              family="mutual_friend", level="decision", sample=j, policy_version="p0",
                              prompt="say red", completion=reply, passed=ok, formatted=True))
    return out


def test_later_rounds_sample_fresh_moves_and_update(tmp_path: Path) -> None:
    from swm.training.trl_update import TrainSettings

    torch.set_num_threads(1)
    base = toy.make_toy_model(tmp_path / "base")
    config = json.loads((base / "config.json").read_text())  # a decision prompt is ~60 words: room for it
    (base / "config.json").write_text(json.dumps(config | {"max_position_embeddings": 256}))
    assert [t.task_id for t in decision_tasks(samples())] == ["train:mutual_friend:decision:0",
                                                              "train:mutual_friend:decision:1"]
    settings = TrainSettings(max_steps=2, learning_rate=1e-3, batch_size=4, max_length=64, progress=False)
    one = train_ppo(samples(), str(base), tmp_path / "one", parent_adapter=None, settings=settings,
                    estimator="group", temperature=1.0, groups="all")
    three = train_ppo(samples(), str(base), tmp_path / "three", parent_adapter=None, settings=settings,
                      estimator="role", temperature=1.0, groups="all", iterations=3, group=4)
    rounds = json.loads((tmp_path / "three" / "settings.json").read_text())["rounds"]
    assert [r["round"] for r in rounds] == [1.0, 2.0] and all(r["rows"] == 2 * 4 for r in rounds)
    assert all(0.0 <= r["pass_rate"] <= 1.0 for r in rounds)
    assert three.steps == one.steps + 2 * 2  # each later round: 8 rows in minibatches of 4, one epoch
