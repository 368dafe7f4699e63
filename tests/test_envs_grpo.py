"""TRL's GRPOTrainer learns an swm decision through `swm.envs.grpo`: the reward is swm's checker, nothing else.

The environment is swm's persuasion decisions (the partner states a worry; the move must answer it,
`swm.tasks.checkers.check_persuasion_decision`), rows from `decision_dataset`, the reward
`checker_reward`. The policy is a tiny random Llama made here whose word-level vocabulary holds the
words of the partners' worries and of the objections the checker accepts (read from swm's generator,
`swm.tasks.families.WORRIES` and ``OBJECTIONS``); every other word of the prompt reads as ``<unk>``,
so what the model can condition on is the worry. A move is one word.

The reward is measured exactly, as `test_learning_sanity` does: the probability the policy puts on
each one-word move times swm's reward for that move (the env's own reward function), averaged over
held-out tasks (another split), before and after training. GRPO raises it by at least `MARGIN`;
the same training with the checker's rewards shuffled within each batch (the control) stays under
`CONTROL_CEILING`. Measured here (CPU, one thread; 40 steps of 4 prompts × 8 moves, about 15 s of
CPU each): from 0.120 to 0.821 (+0.70); with shuffled rewards 0.052 (−0.07: the policy collapses onto
words that answer no worry in particular). The gain is the method's, not a knife edge: step sizes
0.9e-2 and 1.1e-2 gave +0.69 and +0.69, and MKL's AVX2 kernels (``MKL_ENABLE_INSTRUCTIONS=AVX2``) the
same +0.70.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from toy_task import tiny_llama  # noqa: E402

from swm.envs.grpo import checker_reward, decision_dataset, decision_rows, grpo_args, move_text  # noqa: E402
from swm.tasks.families import OBJECTIONS, WORRIES  # noqa: E402

STEPS = 40
MARGIN = 0.4
CONTROL_CEILING = 0.05
SPECIALS = ["<unk>", "<pad>", "<s>", "</s>"]


@pytest.fixture(scope="module", autouse=True)
def one_thread(one_torch_thread: None) -> None:
    """torch on one thread for the whole module (conftest.one_torch_thread)."""


def make_policy(path: Path, seed: int = 0) -> Path:
    """Save a seeded random two-layer Llama whose vocabulary is the worries' and the objections' words."""
    words = {w for ws in OBJECTIONS.values() for w in ws}
    words |= {w for sentence in WORRIES.values() for w in re.findall(r"\w+|[^\w\s]+", sentence)}
    return tiny_llama(path, SPECIALS + sorted(words), seed, whitespace_only=False, max_positions=256)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_policy(tmp_path_factory.mktemp("grpo") / "policy")


def load(path: Path) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(path)), AutoTokenizer.from_pretrained(str(path))


def expected_reward(model: Any, tok: Any, rows: list[dict[str, Any]]) -> float:
    """Exact expected reward of a one-word move at temperature 1: Σ_word p(word | prompt) · swm's reward(word)."""
    words = [tok.decode([i]) for i in range(len(tok))]
    total = 0.0
    model.eval()
    for row in rows:
        ids = tok(row["prompt"], add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=ids).logits[0, -1].float(), dim=-1)
        rewards = checker_reward(completions=words, **{k: [row[k]] * len(words)
                                                         for k in ("family", "level", "seed", "split", "prefill")})
        total += float(sum(float(p) * r for p, r in zip(probs, rewards, strict=True)))
    return total / len(rows)


def shuffled(seed: int) -> Any:
    """The control's reward: the checker's rewards of a batch, shuffled among its completions."""
    rng = random.Random(seed)

    def reward(**kwargs: Any) -> list[float]:
        values = checker_reward(**kwargs)
        rng.shuffle(values)
        return values

    return reward


def grpo_gain(policy_dir: Path, out: Path, control: bool = False) -> tuple[float, float]:
    """Train with GRPO on persuasion decisions; return (expected reward before, after) on held-out tasks."""
    model, tok = load(policy_dir)
    held_out = decision_rows(["persuasion"], range(24), split="dev", tokenizer=tok)
    before = expected_reward(model, tok, held_out)
    args = trl.GRPOConfig(**grpo_args(output_dir=str(out), max_steps=STEPS, learning_rate=1e-2,
                                      per_device_train_batch_size=32, num_generations=8, max_completion_length=1,
                                      temperature=1.0, beta=0.0, logging_steps=5, seed=0, disable_tqdm=True))
    trainer = trl.GRPOTrainer(model=model, processing_class=tok, args=args,
                              reward_funcs=shuffled(0) if control else checker_reward,
                              train_dataset=decision_dataset(["persuasion"], range(200), tokenizer=tok))
    trainer.train()
    return before, expected_reward(trainer.model, tok, held_out)


def test_the_reward_is_swms_checker() -> None:
    """A move that answers the stated worry earns 1, one that does not 0 (the checker's verdict), prefill included."""
    rows = decision_rows(["persuasion"], range(8))
    for row in rows:
        worry = next(k for k, v in WORRIES.items() if v in row["prompt"][0]["content"])
        right, wrong = OBJECTIONS[worry][0], next(v[0] for k, v in OBJECTIONS.items() if k != worry)
        args = {k: [row[k]] * 2 for k in ("family", "level", "seed", "split", "prefill")}
        assert checker_reward(completions=[f"No {right} trouble.", f"No {wrong} trouble."], **args) == [1.0, 0.0]
    assert move_text("ANSWER:", " Ava Chen") == "ANSWER: Ava Chen"
    assert move_text("ANSWER:", [{"role": "assistant", "content": "ANSWER: Ava Chen"}]) == "ANSWER: Ava Chen"


def test_grpo_raises_swms_checker_reward(policy_dir: Path, tmp_path: Path) -> None:
    before, after = grpo_gain(policy_dir, tmp_path / "grpo")
    assert after - before >= MARGIN, f"GRPO raised the expected reward by only {after - before:.3f} ({before:.3f})"


def test_grpo_on_shuffled_rewards_does_not(policy_dir: Path, tmp_path: Path) -> None:
    before, after = grpo_gain(policy_dir, tmp_path / "control", control=True)
    assert after - before < CONTROL_CEILING, f"GRPO on shuffled rewards raised the reward by {after - before:.3f}"
