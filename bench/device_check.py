"""Run swm's trainers for a few steps on the device `swm.training.device` chooses, and print where everything ran.

The short prepared script for a GPU machine (it runs on a CPU too): a tiny random Llama
(`swm.testing.tiny_llama`, SmolLM2's tokenizer) takes one PPO step (`swm.training.ppo`), two TRL SFT
steps (`swm.training.trl_update.train_adapter`) and two GRPO steps on swm decisions (`swm.envs.grpo`),
and the script prints one JSON object: the placement, the device and dtype of the base's weights, the
value head and the optimiser's state, the TRL arguments' ``bf16``/``use_cpu``, and each run's loss or
reward. ``SWM_DEVICE``/``SWM_DTYPE`` override the choice as they do for every trainer.

    python -m bench.device_check --out runs/device-check
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _where(tensors: Any) -> list[str]:
    return sorted({f"{t.device}/{str(t.dtype).removeprefix('torch.')}" for t in tensors})


def ppo_step(base: Path) -> dict[str, Any]:
    """One PPO step of the LoRA policy with its value head; where its tensors were."""
    import torch

    from swm.training.config import PolicyConfig, PPOConfig
    from swm.training.policy import LoraValueModel, collate, gather
    from swm.training.ppo import Sample, make_optimizer, ppo_update

    policy = LoraValueModel.create(PolicyConfig(base=str(base), max_new_tokens=4))
    gen = policy.generate("Say hello.", seed=0)
    batch = collate([gen.prompt_ids], [gen.token_ids], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logprobs, _ = policy.score(batch)
    sample = Sample(role="speaker", prompt_ids=gen.prompt_ids, token_ids=gen.token_ids,
                    old_logprobs=gather(logprobs, batch)[0], advantages=[1.0] * len(gen.token_ids),
                    returns=[1.0] * len(gen.token_ids))
    optimizer = make_optimizer(policy, PPOConfig())
    stats = ppo_update(policy, optimizer, [sample], PPOConfig(minibatch=1))
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    return {"base_weights": _where(p for n, p in policy.model.named_parameters() if "lora_" not in n),
            "lora": _where(p for n, p in policy.model.named_parameters() if "lora_" in n),
            "value_head": _where(policy.value_head.parameters()), "optimizer_state": _where(state),
            "scores": _where([logprobs]), "loss": round(stats["loss"], 6)}


def sft_steps(base: Path, out: Path) -> dict[str, Any]:
    """Two TRL SFT steps of a LoRA adapter through `train_adapter`."""
    from swm.training.trl_update import TrainSettings, train_adapter

    rows = [{"prompt": [{"role": "user", "content": f"Say {w}."}], "completion": [{"role": "assistant",
                                                                                   "content": w}]}
            for w in ("red", "green", "blue", "gold")]
    stats = train_adapter("sft", rows, str(base), out, settings=TrainSettings(max_steps=2, batch_size=2,
                                                                              progress=False))
    return {"steps": stats.steps, "loss": stats.loss, "seconds": stats.seconds}


def grpo_steps(base: Path, out: Path) -> dict[str, Any]:
    """Two GRPO steps on swm decisions, the reward swm's checker."""
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swm.envs.grpo import checker_reward, decision_dataset, grpo_args
    from swm.training.device import choose_placement

    placement = choose_placement()
    tok = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=placement.torch_dtype())
    args = trl.GRPOConfig(**grpo_args(output_dir=str(out), max_steps=2, per_device_train_batch_size=8,
                                      num_generations=4, max_completion_length=8, logging_steps=1, disable_tqdm=True))
    trainer = trl.GRPOTrainer(model=model, processing_class=tok, reward_funcs=checker_reward, args=args,
                              train_dataset=decision_dataset(["persuasion", "secret"], range(8), tokenizer=tok))
    trainer.train()
    rewards = [e["reward"] for e in trainer.state.log_history if "reward" in e]
    return {"bf16": args.bf16, "use_cpu": args.use_cpu, "model": _where(model.parameters()),
            "reward": rewards}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.device_check", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="a fresh directory for the model and the runs")
    args = parser.parse_args(argv)
    import torch

    from swm.testing.tiny_llama import make_tiny_llama
    from swm.training.device import choose_placement

    base = make_tiny_llama(args.out / "base")
    placement = choose_placement()
    report = {"placement": {"device": placement.device, "dtype": placement.dtype},
              "torch": torch.__version__, "cuda": torch.cuda.is_available(),
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
              "ppo": ppo_step(base), "sft": sft_steps(base, args.out / "sft"),
              "grpo": grpo_steps(base, args.out / "grpo")}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
