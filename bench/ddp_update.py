"""One TRL update of swm's adapter on two processes equals one on a single process with the doubled batch.

The update is `swm.training.trl_update`'s SFT on a LoRA adapter (`attach_adapter`, seeded, the same
start in every process) of a tiny random Llama (`swm.testing.tiny_llama`, SmolLM2's tokenizer),
on swm persuasion decisions (the decision's prompt, a move that answers the partner's worry). Every
run takes exactly one optimiser step over the whole dataset (``2 × per-device`` rows): under
``accelerate launch --num_processes 2`` each process takes half of it, on one process all of it.
The optimiser is plain SGD, so the step *is* the (scaled) gradient and the two steps are compared
directly: transformers averages the token counts across processes, so the two losses are the same
token mean, and the gradients differ only by float rounding.

    python -m bench.ddp_update make --base /tmp/ddp/base
    accelerate launch --multi_gpu --num_processes 2 -m bench.ddp_update step --base /tmp/ddp/base \\
        --per-device 4 --out /tmp/ddp/two
    python -m bench.ddp_update step --base /tmp/ddp/base --per-device 8 --out /tmp/ddp/one
    python -m bench.ddp_update compare /tmp/ddp/one /tmp/ddp/two

``--multi_gpu`` is accelerate's torchrun launcher; on a machine without a GPU its processes join over
gloo on the CPU (``accelerate launch --cpu`` starts a single process). ``compare`` prints the relative
difference ``‖Δ₁ − Δ₂‖ / ‖Δ₁‖`` of the two updates (Δ: adapter
after − before) and the largest absolute one, and exits 1 when the relative one is above ``--tol``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

SEED = 0
LR = 1.0  # SGD: the update is −LR × gradient, large enough to compare well above float32 rounding
DELTA = "delta.safetensors"


def rows(n: int) -> list[dict[str, Any]]:
    """``n`` SFT rows: a persuasion decision's prompt and a move that names the worry's first word."""
    from swm.tasks.decisions import DECISION, decision_prompt
    from swm.tasks.families import OBJECTIONS, synthesize

    out = []
    for seed in range(n):
        task = synthesize("persuasion", DECISION, seed)
        word = OBJECTIONS[task.truth["objection"]][0]
        out.append({"prompt": [{"role": "user", "content": decision_prompt(task).text}],
                    "completion": [{"role": "assistant", "content": f"I hear you about the {word}."}]})
    return out


def step(base: str, per_device: int, out: Path) -> None:
    """Take one SGD step over ``2 × per_device`` rows (on however many processes accelerate started)."""
    import torch
    import trl
    from datasets import Dataset
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    from swm.training.base import load_base
    from swm.training.device import choose_placement
    from swm.training.trl_update import TrainSettings, _config, attach_adapter

    torch.set_num_threads(1)
    placement = choose_placement()
    settings = TrainSettings(max_steps=1, batch_size=per_device, learning_rate=LR, max_length=512, seed=SEED,
                             progress=False)
    model, tok = load_base(base, placement)
    model = attach_adapter(model, None, settings)
    before = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
    world = int(os.environ.get("WORLD_SIZE", "1"))
    data = Dataset.from_list(rows(per_device * world))  # one step takes the whole dataset
    args = _config("sft", trl, out / "trainer", settings, placement, optim="sgd", lr_scheduler_type="constant",
                   warmup_steps=0, weight_decay=0.0, max_grad_norm=0.0, dataloader_drop_last=False)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    result = trainer.train()
    if trainer.accelerator.is_main_process:
        after = get_peft_model_state_dict(trainer.accelerator.unwrap_model(trainer.model))
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: (after[k].detach().float().cpu() - before[k].float().cpu()).contiguous() for k in before},
                  str(out / DELTA))
        state = trainer.accelerator.state
        (out / "step.json").write_text(json.dumps({"processes": world, "per_device": per_device,
                                                   "backend": str(state.backend),
                                                   "distributed_type": str(state.distributed_type),
                                                   "rows": len(data),
                                                   "steps": int(result.global_step),
                                                   "loss": float(result.training_loss)}))


def compare(one: Path, two: Path) -> dict[str, float]:
    """The relative and the largest absolute difference of two saved updates."""
    from safetensors.torch import load_file

    a, b = load_file(str(one / DELTA)), load_file(str(two / DELTA))
    num = sum(float(((a[k] - b[k]) ** 2).sum()) for k in a) ** 0.5
    den = sum(float((a[k] ** 2).sum()) for k in a) ** 0.5
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    meta = [json.loads((p / "step.json").read_text()) for p in (one, two)]
    return {"relative": num / den if den else float("inf"), "max_abs": worst, "update_norm": den,
            "loss_one": meta[0]["loss"], "loss_two": meta[1]["loss"]}


def make(base: Path) -> None:
    from swm.testing.tiny_llama import make_tiny_llama

    make_tiny_llama(base, seed=SEED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ddp_update", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make", help="write the tiny base model")
    p.add_argument("--base", type=Path, required=True)
    p = sub.add_parser("step", help="take one SGD step (run it under accelerate launch for several processes)")
    p.add_argument("--base", required=True)
    p.add_argument("--per-device", type=int, required=True, help="rows per process; the dataset is this times "
                   "the number of processes, all of it one step")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("compare", help="compare two saved updates")
    p.add_argument("one", type=Path)
    p.add_argument("two", type=Path)
    p.add_argument("--tol", type=float, default=1e-4)
    args = parser.parse_args(argv)
    if args.cmd == "make":
        make(args.base)
    elif args.cmd == "step":
        step(args.base, args.per_device, args.out)
    else:
        found = compare(args.one, args.two)
        print(json.dumps(found))
        return 0 if found["relative"] <= args.tol else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
