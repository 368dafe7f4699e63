"""Train a policy's LoRA adapter with TRL (SFT, DPO, KTO) from the incumbent's adapter, on CPU or GPU.

Device and precision are `swm.training.device`'s one choice (cuda and bf16 when present, the CPU and
float32 otherwise; ``TrainSettings.device``/``dtype`` or ``SWM_DEVICE``/``SWM_DTYPE`` override it).

The public pieces, reused by the lifelong loop and by self-play RL:

* `load_base` — a base model and tokenizer with no download: ``None``/``"embedded"`` loads the
  shipped SmolLM2 GGUF (transformers dequantises it), a ``.gguf`` file likewise, and a directory
  any local Hugging Face checkpoint.
* `attach_adapter` — a fresh LoRA on the base, or the incumbent's adapter loaded trainable, so a
  cycle continues from the deployed policy rather than from the base. Every adapter is therefore
  the whole delta from the base model: nothing stacks at serving time (one adapter per server),
  and merging one into the base (PEFT ``merge_and_unload``) gives a standalone model.
* `train_adapter` — one training run (seeded; a progress bar from the trainer) that writes the
  adapter directory in one rename, so a kill leaves either a finished adapter, which a rerun
  reuses, or nothing, which a rerun trains again; returns `TrainStats` (method, rows, steps,
  loss curve, seconds, tokens/s, adapter size). Each of the trainer's log dicts (TRL's loss,
  grad norm, learning rate, entropy and token accuracy for SFT, rewards and margins for DPO, KL
  for KTO) goes to the run's tracker (`swm.tracking`, `tracker_callback`), never to TRL's own
  ``report_to``: one tracker run holds the whole lifelong run.

With DPO and KTO on a continued adapter, TRL keeps a frozen copy of it as the reference model,
so the KL anchor is the incumbent policy too.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from swm.errors import InputError
from swm.serving.gguf_lora import ADAPTER_META, base_meta
from swm.tracking import Tracker, check_reporter, tracking
from swm.training.base import imports, load_base, shipped_gguf
from swm.training.device import Placement, choose_placement
from swm.training.stats import TrainStats

TRAIN_METHODS = ("sft", "dpo", "kto")
TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
STATS_FILE = "train.json"
TRL_COLUMNS = ("prompt", "completion", "chosen", "rejected", "label")  # what TRL's trainers read of a row


@dataclass
class TrainSettings:
    """Knobs of one training run (the CLI's --train-* options)."""

    max_steps: int = -1  # > 0 overrides epochs
    epochs: float = 1.0
    learning_rate: float = 2e-4
    rank: int = 8
    alpha: int = 16
    batch_size: int = 2
    max_length: int = 2048  # prompt + completion tokens; TRL keeps the start, so prompts must fit
    beta: float = 0.1  # DPO/KTO's KL weight
    seed: int = 0
    progress: bool = True
    # a run of its own for `train_adapter` called with no tracker: none | tensorboard | wandb | mlflow | trackio
    # (swm.tracking.REPORTERS); the lifelong loop hands its run's tracker over instead
    report_to: str = "none"
    logging_dir: str | None = None  # where TensorBoard writes its event files [default: <output dir>/runs]
    run_name: str | None = None  # the run's name in the tracker [default: the output dir's name]
    device: str | None = None  # cpu | cuda | cuda:N [default: $SWM_DEVICE, else cuda when present]
    dtype: str | None = None  # float32 | bfloat16 | float16 [default: $SWM_DTYPE, else bfloat16 on a GPU, float32]


def attach_adapter(model: object, adapter: str | Path | None, settings: TrainSettings | None = None) -> Any:
    """Return a PEFT model: the incumbent's adapter loaded trainable, or a fresh seeded LoRA."""
    _, transformers, peft, _ = imports()
    settings = settings or TrainSettings()
    if adapter is not None:
        check_adapter(Path(adapter))
        return peft.PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
    transformers.set_seed(settings.seed)
    config = peft.LoraConfig(r=settings.rank, lora_alpha=settings.alpha, lora_dropout=0.0,
                             target_modules=TARGET_MODULES, task_type="CAUSAL_LM")
    return peft.get_peft_model(model, config)


def check_adapter(path: Path) -> None:
    """Fail with a one-line error unless ``path`` holds a readable PEFT adapter."""
    config, weights = path / "adapter_config.json", path / "adapter_model.safetensors"
    if not config.is_file() or not weights.is_file():
        raise InputError(f"adapter {path} is missing (no adapter_config.json / adapter_model.safetensors)",
                         "rerun the cycle that trained it, or start a new run")
    try:
        json.loads(config.read_text())
        from safetensors import safe_open  # optional: the [train] extra

        with safe_open(str(weights), framework="np") as fh:
            fh.keys()
    except Exception as exc:  # noqa: BLE001 - any failure to read it means it is corrupt
        raise InputError(f"adapter {path} is corrupt: {' '.join(str(exc).split())[:200]}",
                         "delete it and rerun the cycle that trained it") from exc


def finished_stats(out_dir: Path) -> TrainStats | None:
    """Return the stats of a finished adapter in ``out_dir`` (None if training never finished there)."""
    stats = out_dir / STATS_FILE
    if not stats.is_file():
        return None
    check_adapter(out_dir)
    return TrainStats.model_validate_json(stats.read_text())


def _tokens(tokenizer: Any, row: dict[str, Any], method: str) -> int:
    completions = [row["chosen"], row["rejected"]] if method == "dpo" else [row["completion"]]
    total = 0
    for completion in completions:
        ids = tokenizer.apply_chat_template(row["prompt"] + completion, tokenize=True)
        # transformers 5 returns a BatchEncoding (a Mapping, not a dict): its len() is its key count
        total += len(ids["input_ids"] if isinstance(ids, Mapping) else ids)
    return total


def rows_seen(rows: int, batches: int, batch_size: int) -> int:
    """Return how many rows ``batches`` micro-batches read from a dataset of ``rows``, epoch after epoch.

    Each epoch is ``ceil(rows / batch_size)`` batches and its last one is short, so a batch size
    above the row count does not multiply the rows.
    """
    per_epoch = max(1, -(-rows // batch_size))
    full, rest = divmod(batches, per_epoch)
    return full * rows + min(rest * batch_size, rows)


def _config(method: str, trl: Any, out: Path, settings: TrainSettings, placement: Placement, **extra: Any) -> Any:
    # TRL reports to nothing itself: its logs reach the run's tracker through `tracker_callback`
    common = {"output_dir": str(out), **placement.trainer_args(), "gradient_checkpointing": False,
              "report_to": [], "run_name": settings.run_name,
              "num_train_epochs": settings.epochs, "max_steps": settings.max_steps,
              "per_device_train_batch_size": settings.batch_size, "learning_rate": settings.learning_rate,
              "logging_steps": 1, "save_strategy": "no", "seed": settings.seed, "data_seed": settings.seed,
              "max_length": settings.max_length, "disable_tqdm": not settings.progress, **extra}
    if method == "sft":
        return trl.SFTConfig(**common)
    if method == "dpo":
        return trl.DPOConfig(beta=settings.beta, **common)
    return trl.KTOConfig(beta=settings.beta, **common)


def tracker_callback(tracker: Tracker, section: str) -> Any:
    """Return a transformers ``TrainerCallback`` that logs each of a trainer's log dicts to ``tracker``.

    A key ``loss`` at global step 3 is written ``<section>/loss`` at step 3 on the axis ``<section>/step``; the
    lifelong loop's section is ``train/<policy>``, so every cycle's curve starts at its own step 1.
    """
    _, transformers, _, _ = imports()
    base: Any = transformers.TrainerCallback  # a class of the [train] extra, untyped here

    class ToTracker(base):
        def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None,
                   **_: Any) -> None:
            tracker.log({f"{section}/{key}": value for key, value in (logs or {}).items()}, step=state.global_step,
                        axis=f"{section}/step")

    return ToTracker()


@contextmanager
def _run_tracker(settings: TrainSettings, tracker: Tracker | None, partial: Path) -> Iterator[Tracker]:
    """Yield ``tracker``, or (None) a run of its own for ``settings.report_to``, kept in ``partial/runs`` by default."""
    if tracker is not None:
        yield tracker
        return
    with tracking(settings.report_to, settings.run_name or partial.name.removesuffix(".partial"),
                  settings.logging_dir or partial / "runs", asdict(settings)) as own:
        yield own


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, MemoryError) or "out of memory" in str(exc).lower()


def train_adapter(method: str, rows: list[dict[str, Any]], base: str | None, out_dir: Path, *,
                  parent_adapter: str | None = None, settings: TrainSettings | None = None,
                  tracker: Tracker | None = None, section: str = "train") -> TrainStats:
    """Train one LoRA adapter on ``rows`` (TRL's conversational prompt/completion formats) into ``out_dir``.

    ``rows``: sft and kto ``{"prompt": [...], "completion": [...]}`` (kto with ``label``), dpo
    ``{"prompt", "chosen", "rejected"}``. A finished adapter already in ``out_dir`` is reused. The trainer's
    logs go to ``tracker`` under ``section`` (`tracker_callback`); with no tracker, to a run of its own when
    ``settings.report_to`` names one.
    """
    if method not in TRAIN_METHODS:
        raise InputError(f"unknown training method {method!r}", f"use one of {', '.join(TRAIN_METHODS)}")
    settings = settings or TrainSettings()
    if tracker is None:
        check_reporter(settings.report_to)
    out_dir = Path(out_dir)
    done = finished_stats(out_dir)
    if done is not None:
        return done
    if not rows:
        raise InputError(f"no {method} training rows", "collect more episodes (or lower --min-margin)")
    torch, transformers, _, trl = imports()
    from datasets import Dataset  # optional: the [train] extra

    score_labelled_tokens_only()
    if os.environ.get("SWM_TRAIN_THREADS"):  # on a machine busy with other work, one thread beats contended two
        torch.set_num_threads(int(os.environ["SWM_TRAIN_THREADS"]))
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a run killed mid-training left this; train again
    transformers.set_seed(settings.seed)
    placement = choose_placement(settings.device, settings.dtype)
    model, tokenizer = load_base(base, placement)
    meta = base_meta(model.config, str(base or shipped_gguf()))
    model = attach_adapter(model, parent_adapter, settings)
    data = Dataset.from_list([{k: v for k, v in row.items() if k in TRL_COLUMNS} for row in rows])
    per_row = sum(_tokens(tokenizer, row, method) for row in rows) / len(rows)
    trainer_cls = {"sft": trl.SFTTrainer, "dpo": trl.DPOTrainer, "kto": trl.KTOTrainer}[method]
    args = _config(method, trl, partial, settings, placement)
    start = time.perf_counter()
    with _run_tracker(settings, tracker, partial) as run_tracker:
        trainer, result = _train(method, transformers, trainer_cls, partial, model=model, args=args,
                                 callbacks=[tracker_callback(run_tracker, section)], train_dataset=data,
                                 processing_class=tokenizer)
    seconds = time.perf_counter() - start
    steps = int(result.global_step)
    tokens = int(per_row * rows_seen(len(rows), steps * int(getattr(args, "gradient_accumulation_steps", 1) or 1),
                                     settings.batch_size))
    model.save_pretrained(str(partial), selected_adapters=["default"])
    for stray in ("ref",):  # TRL's frozen reference copy of a continued adapter is not part of the policy
        shutil.rmtree(partial / stray, ignore_errors=True)
    (partial / ADAPTER_META).write_text(json.dumps(meta))
    losses = [round(float(e["loss"]), 6) for e in trainer.state.log_history if "loss" in e]
    stats = TrainStats(method=method, examples=len(rows), pairs_used=len(rows), steps=steps, loss=losses,
                       seconds=round(seconds, 3), tokens=tokens,
                       tokens_per_s=round(tokens / seconds, 1) if seconds else 0.0,
                       seed=settings.seed, adapter_bytes=(partial / "adapter_model.safetensors").stat().st_size,
                       from_adapter=str(parent_adapter) if parent_adapter else None)
    finish_adapter(partial, out_dir, stats, asdict(settings))
    return stats


def score_labelled_tokens_only() -> None:
    """Have TRL's fused LM head score only the tokens that carry a label on the CPU too, as it does on a GPU.

    TRL's trainers compute each token's log-probability in vocabulary tiles (`trl.trainer.utils.add_fused_lm_head`);
    only where Triton runs does it score just the labelled positions, elsewhere every position, to keep tile shapes
    fixed for compiled backends. On the CPU (eager, nothing compiled) that scores every prompt token against the whole
    vocabulary for nothing: a DPO step on a row of a ~600-token act prompt and a short reply spent 6.5 of its 6.8
    CPU-seconds there (SmolLM2's 49,152 tokens; `swm learn`'s two 1-step DPO cycles in tests/test_trl_exports.py took
    26 CPU-seconds before, 12 after, 2026-11-28). Unlabelled positions come out 0 either way, so the losses and
    gradients are the same (`tests/test_trl_cpu_scoring.py`). Patches TRL's private `_use_triton` as that one call site
    sees it, once; a TRL without it is left as it is.
    """
    try:
        utils = importlib.import_module("trl.trainer.utils")
    except ImportError:
        return
    use_triton = getattr(utils, "_use_triton", None)
    if use_triton is None or getattr(use_triton, "swm_scores_labelled_only", False):
        return

    def labelled_only(device: Any) -> bool:
        return device.type == "cpu" or bool(use_triton(device))

    labelled_only.swm_scores_labelled_only = True  # type: ignore[attr-defined]
    setattr(utils, "_use_triton", labelled_only)  # noqa: B010 - a private name mypy does not see


def _train(method: str, transformers: Any, trainer_cls: Any, partial: Path, **trainer_args: Any) -> tuple[Any, Any]:
    """Build the TRL trainer and train; return it and its result. Running out of memory is an `InputError`."""
    try:
        trainer = trainer_cls(**trainer_args)
        # without a progress bar transformers prints every step's log dict on stdout, where `swm learn --json`
        # writes its result; the losses are kept in the trainer's log history (TrainStats.loss)
        trainer.remove_callback(transformers.PrinterCallback)
        return trainer, trainer.train()
    except (RuntimeError, MemoryError) as exc:
        shutil.rmtree(partial, ignore_errors=True)
        if _is_oom(exc):
            raise InputError(f"{method} training ran out of memory", "lower --train-batch-size or "
                             "--train-max-length, then rerun the same --thread-id to resume") from exc
        raise


def finish_adapter(partial: Path, out_dir: Path, stats: TrainStats, settings: dict[str, Any]) -> None:
    """Write the stats and settings beside an adapter saved in ``partial``, then move it to ``out_dir`` in one rename.

    The stats file is what marks an adapter finished (`finished_stats`); an unfinished one already in
    ``out_dir`` (no stats) is replaced whole.
    """
    (partial / STATS_FILE).write_text(stats.model_dump_json())
    (partial / "settings.json").write_text(json.dumps(settings))
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(partial, out_dir)


def refused_settings(method: str, settings: TrainSettings) -> list[str]:
    """Return what training ``method`` (sft, dpo, kto; or ``ppo``, swm's own) would refuse in ``settings``.

    Checked before a run's first model call, so an option the trainer refuses never costs a collection
    phase: the settings PyTorch, PEFT and every trainer refuse (a batch size or rank below 1, a negative
    learning rate or seed, no step at all), KTO's batch of one (its KL term needs other rows of the batch
    to pair with), then whatever TRL's own config refuses when it is built.
    """
    refused = []
    if settings.batch_size < 1:
        refused.append(f"--train-batch-size {settings.batch_size}: a batch holds at least 1 row")
    elif method == "kto" and settings.batch_size < 2:
        refused.append("--train-batch-size 1: TRL's KTO needs at least 2 rows a batch (its KL term pairs each "
                       "row with another of the batch)")
    if settings.rank < 1:
        refused.append(f"--train-rank {settings.rank}: a LoRA rank is at least 1")
    if settings.learning_rate < 0:
        refused.append(f"--train-lr {settings.learning_rate:g}: a learning rate is not negative")
    if settings.max_length < 1:
        refused.append(f"--train-max-length {settings.max_length}: at least 1 token")
    if settings.max_steps <= 0 and settings.epochs <= 0:
        refused.append(f"--train-steps {settings.max_steps} with --train-epochs {settings.epochs:g}: no training step")
    if settings.seed < 0:
        refused.append(f"--train-seed {settings.seed}: a seed is not negative")
    if refused or method not in TRAIN_METHODS:
        return refused
    _, _, _, trl = imports()
    try:
        _config(method, trl, Path("swm-train-check"), settings, Placement(device="cpu", dtype="float32"))
    except (ValueError, TypeError) as exc:  # TRL's and transformers' own checks of the config
        refused.append(f"TRL refuses the {method} settings: {' '.join(str(exc).split())[:200]}")
    return refused
