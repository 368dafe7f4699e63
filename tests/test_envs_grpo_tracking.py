"""`swm.envs.grpo.grpo_args` saves checkpoints and reports TRL's logs by default; `role_rewards` splits the reward by
the learner's role so that the log has it per role, and sums back to `checker_reward`."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard_events import needs_tensorboard, read_scalars

from swm.envs.grpo import SAVE_LIMIT, SAVE_STEPS, checker_reward, decision_rows, grpo_args, role_rewards
from swm.errors import InputError

FAMILIES = ["negotiation", "persuasion", "secret"]


def test_by_default_it_saves_checkpoints_and_reports_to_tensorboard() -> None:
    needs_tensorboard()
    args = grpo_args(output_dir="out", num_generations=8)
    assert args["report_to"] == ["tensorboard"] and args["output_dir"] == "out" and args["num_generations"] == 8
    assert (args["save_strategy"], args["save_steps"], args["save_total_limit"]) == ("steps", SAVE_STEPS, SAVE_LIMIT)
    off = grpo_args(report_to="none", save_strategy="no")
    assert off["report_to"] == [] and off["save_strategy"] == "no", "an override wins"
    with pytest.raises(InputError, match="unknown reporter 'comet'"):
        grpo_args(report_to="comet")


@pytest.mark.parametrize("reporter", ["wandb", "mlflow", "trackio"])
def test_a_tracker_whose_package_is_missing_is_refused_before_a_trainer_is_built(
        reporter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_tracking import hide

    hide(reporter, monkeypatch)
    with pytest.raises(InputError, match=f"pip install {reporter}") as err:
        grpo_args(report_to=reporter)
    assert err.value.hint == "install it, or run with report_to='none'"


def test_the_role_rewards_are_the_checkers_reward_split_by_the_learners_role() -> None:
    rows = decision_rows(FAMILIES, range(3))
    columns = {k: [row[k] for row in rows] for k in ("family", "level", "seed", "split", "prefill")}
    completions = ["ANSWER: Ava", "No price trouble.", "I will not say.", "ANSWER: 500", "No time trouble.", "Hm."] * 2
    completions = completions[:len(rows)]
    functions = role_rewards(FAMILIES)
    assert [f.__name__ for f in functions] == ["buyer", "persuader", "keeper"]
    split = [f(completions=completions, **columns) for f in functions]
    total = checker_reward(completions=completions, **columns)
    for i, reward in enumerate(total):
        scored = [values[i] for values in split if values[i] is not None]
        assert scored == [reward], "each row is scored by its own role's function alone"


def test_a_grpo_step_saves_a_checkpoint_and_logs_reward_per_role_kl_and_entropy(tmp_path: Path,
                                                                                one_torch_thread: None) -> None:
    trl = pytest.importorskip("trl")
    needs_tensorboard()
    from test_envs_grpo import load, make_policy

    from swm.envs.grpo import decision_dataset

    model, tok = load(make_policy(tmp_path / "policy"))
    out = tmp_path / "grpo-out"
    args = trl.GRPOConfig(**grpo_args(output_dir=str(out), max_steps=1, per_device_train_batch_size=8,
                                      num_generations=2, max_completion_length=1, beta=0.04, logging_steps=1, seed=0,
                                      disable_tqdm=True))
    trainer = trl.GRPOTrainer(model=model, processing_class=tok, args=args, reward_funcs=role_rewards(FAMILIES),
                              train_dataset=decision_dataset(FAMILIES, range(8), tokenizer=tok))
    trainer.train()
    assert (out / "checkpoint-1" / "trainer_state.json").is_file(), "the last step is saved"
    events = read_scalars(out / "runs")
    assert {"train/reward", "train/kl", "train/entropy", "train/loss"} <= set(events)
    assert {f"train/rewards/{role}/mean" for role in ("buyer", "persuader", "keeper")} <= set(events)
    assert any(key.startswith("train/clip_ratio/") for key in events)
