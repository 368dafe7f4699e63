"""Policy updates, each producing a new versioned `Policy`: memory, dpo, kto.

* ``memory`` works with any API model: kept pairs become retrieved exemplars and distilled
  strategy notes per task family and level, injected into the learner's private instructions
  (`memory_text`). Notes are distilled by the agent model (one bounded call per family and
  level, prompt ``lifelong_distill``); a reply that does not fit falls back to notes built from
  the exemplars, and the failure is counted.
* ``dpo`` / ``kto`` export the kept pairs in TRL's conversational formats
  (``prompt``/``chosen``/``rejected``; ``prompt``/``completion``/``label``) as JSONL, and, when
  the ``[train]`` extra is installed and a local Hugging Face model is given, run TRL on it
  (`train_trl`). The new policy records the dataset and checkpoint; serving the checkpoint is
  the user's step (point ``--agent-model`` at it), so in-loop episodes keep the same endpoint.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

import prompts
from swm.errors import InputError
from swm.lifelong.records import PreferencePair
from swm.llm import call_model
from swm.usage import CallStats, add_stats, empty_stats

METHODS = ("memory", "dpo", "kto")
MAX_EXEMPLARS = 3


class StrategyNotes(BaseModel):
    """Distilled strategy notes for one task family and level."""

    model_config = ConfigDict(extra="forbid")

    notes: list[Annotated[str, StringConstraints(max_length=200)]] = Field(
        max_length=4, description="At most four one-sentence strategy notes.")


class TrainStats(BaseModel):
    """What one training run did: method, data, steps, loss curve, time and throughput."""

    model_config = ConfigDict(extra="forbid")

    method: str  # sft | dpo | kto
    examples: int = 0  # rows of the training set (SFT turns, DPO pairs, KTO completions)
    pairs_used: int = 0  # kept preference pairs (sft: kept trajectories' turns) behind those rows
    steps: int = 0
    loss: list[float] = Field(default_factory=list)  # the training loss at every logged step
    seconds: float = 0.0
    tokens: int = 0  # prompt + completion tokens seen, over all epochs
    tokens_per_s: float = 0.0
    seed: int = 0
    adapter_bytes: int = 0  # size of the saved PEFT adapter (safetensors)
    from_adapter: str | None = None  # the incumbent's adapter this run continued (None: a fresh LoRA on the base)


class Policy(BaseModel):
    """A versioned policy: what the learner is told on top of its model, what trained it, how it is served.

    ``memory`` policies carry ``notes``/``exemplars`` for an API model. Trained policies
    (``sft``/``dpo``/``kto``) carry a PEFT LoRA ``adapter`` over ``base_model`` (continued from
    the parent's adapter), its GGUF conversion ``adapter_gguf`` for llama.cpp, and ``served_as``:
    the model spec the episode graph plays it with (``embedded:lora=…`` or ``<name>@<url>``).
    """

    model_config = ConfigDict(extra="forbid")

    version: str
    parent: str | None = None
    kind: str = "base"
    cycle: int = 0
    notes: dict[str, list[str]] = Field(default_factory=dict)  # "family/level" -> notes
    exemplars: dict[str, list[dict[str, str]]] = Field(default_factory=dict)  # -> [{situation, better, worse}]
    dataset: str | None = None
    checkpoint: str | None = None
    pairs_used: int = 0
    base_model: str | None = None  # the Hugging Face base the adapter was trained on (a dir or GGUF file)
    adapter: str | None = None  # PEFT adapter directory (adapter_config.json + adapter_model.safetensors)
    adapter_gguf: str | None = None  # the adapter as a GGUF LoRA for llama.cpp
    served_as: str | None = None  # the model spec the learner's seats use (None: the run's own models)
    train: TrainStats | None = None


def _key(family: str, level: str) -> str:
    return f"{family}/{level}"


def _clip(text: str, n: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _situation(prompt: str) -> str:
    return _clip(prompt.strip().splitlines()[-1] if prompt.strip() else "", 160)


def exemplars_of(pairs: Iterable[PreferencePair]) -> dict[str, list[dict[str, str]]]:
    """Pick the widest-margin action pairs per family and level as exemplars."""
    grouped: dict[str, list[PreferencePair]] = defaultdict(list)
    for p in pairs:
        if p.track == "action":
            grouped[_key(p.family, p.level)].append(p)
    return {k: [{"situation": _situation(p.prompt), "better": _clip(p.chosen), "worse": _clip(p.rejected)}
                for p in sorted(v, key=lambda p: (-p.margin, p.pair_id))[:MAX_EXEMPLARS]]
            for k, v in sorted(grouped.items())}


def fallback_notes(exemplars: Sequence[dict[str, str]]) -> list[str]:
    return [f"Prefer moves like \"{_clip(e['better'], 120)}\" over \"{_clip(e['worse'], 60)}\"."
            for e in exemplars[:2]]


def distill(model: Any, family: str, level: str, exemplars: Sequence[dict[str, str]]) -> tuple[list[str], CallStats,
                                                                                                  str | None]:
    """Ask the model for strategy notes from exemplars; fall back to rule-made notes on a bad reply."""
    prompt = prompts.load("lifelong_distill")
    shown = "\n".join(f"- situation: {e['situation']}\n  better: {e['better']}\n  worse: {e['worse']}"
                      for e in exemplars)
    reply = call_model(model, prompt.render(family=family, level=level, pairs=shown), StrategyNotes)
    notes = [n.strip() for n in (reply.value.notes if reply.value is not None else []) if n.strip()]
    return (notes or fallback_notes(exemplars)), reply.stats, reply.error


def memory_update(parent: Policy, version: str, cycle: int, pairs: Sequence[PreferencePair],
                  model: Any | None = None) -> tuple[Policy, CallStats, list[str]]:
    """Build the next memory policy: the parent's memory, refreshed for families and levels with new pairs."""
    usage = empty_stats()
    errors: list[str] = []
    notes = dict(parent.notes)
    exemplars = dict(parent.exemplars)
    for key, picked in exemplars_of(pairs).items():
        family, level = key.split("/")
        exemplars[key] = picked
        if model is None:
            notes[key] = fallback_notes(picked)
            continue
        distilled, stats, error = distill(model, family, level, picked)
        usage = add_stats(usage, stats)
        notes[key] = distilled
        if error:
            errors.append(f"{key}: {error}")
    policy = Policy(version=version, parent=parent.version, kind="memory", cycle=cycle, notes=notes,
                    exemplars=exemplars, pairs_used=len(pairs))
    return policy, usage, errors


def memory_text(policy: Policy | None, family: str, level: str) -> str:
    """Render a policy's memory for one task as text for the learner's instructions ('' when none)."""
    if policy is None or (not policy.notes and not policy.exemplars):
        return ""
    keys = [_key(family, level)] + sorted(k for k in policy.notes if k.startswith(f"{family}/")
                                          and k != _key(family, level))
    notes = [n for k in keys for n in policy.notes.get(k, [])][:6]
    shown = [e for k in keys for e in policy.exemplars.get(k, [])][:MAX_EXEMPLARS]
    if not notes and not shown:
        return ""
    return prompts.load("lifelong_memory").render(
        policy=policy.version,
        notes="\n".join(f"- {n}" for n in notes) or "- (none yet)",
        exemplars="\n".join(f"Example: when {e['situation']!r}, a better move was {e['better']!r} "
                            f"rather than {e['worse']!r}." for e in shown),
    ).strip()


# ---- TRL exports --------------------------------------------------------------------------
def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def dpo_rows(pairs: Iterable[PreferencePair]) -> list[dict[str, Any]]:
    """TRL's conversational preference format: prompt / chosen / rejected message lists."""
    return [{"prompt": _user(p.prompt), "chosen": _assistant(p.chosen), "rejected": _assistant(p.rejected)}
            for p in pairs]


def kto_rows(pairs: Iterable[PreferencePair]) -> list[dict[str, Any]]:
    """TRL's conversational unpaired format: prompt / completion / label (chosen True, rejected False)."""
    rows: list[dict[str, Any]] = []
    for p in pairs:
        rows.append({"prompt": _user(p.prompt), "completion": _assistant(p.chosen), "label": True})
        rows.append({"prompt": _user(p.prompt), "completion": _assistant(p.rejected), "label": False})
    return rows


def export(pairs: Sequence[PreferencePair], method: str, path: Path) -> Path:
    """Write the pairs as a TRL dataset (JSONL, one example a line) for ``dpo`` or ``kto``."""
    if method not in ("dpo", "kto"):
        raise InputError(f"no export format for {method!r}", "use dpo or kto")
    rows = dpo_rows(pairs) if method == "dpo" else kto_rows(pairs)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def train_trl(method: str, dataset: Path, model_path: str, output_dir: Path, **overrides: Any) -> Path:
    """Train a local Hugging Face model on an exported dataset with TRL (needs the ``[train]`` extra).

    Settings measured to work on CPU with TRL 1.16: ``bf16=False, use_cpu=True,
    gradient_checkpointing=False, report_to=[]``. Pass a model directory that holds its
    tokenizer (``save_pretrained``): DPOTrainer rebuilds the reference model from the path.
    """
    try:
        from datasets import load_dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer
    except ImportError as exc:
        raise InputError(f"training needs the [train] extra ({exc.name} is missing)",
                         "pip install torch==2.13.0 first, then pip install -e '.[train]'") from exc
    data = load_dataset("json", data_files=str(dataset), split="train")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    settings: dict[str, Any] = {"output_dir": str(output_dir), "bf16": False, "use_cpu": True,
                                "gradient_checkpointing": False, "report_to": [], "num_train_epochs": 1,
                                "per_device_train_batch_size": 2, "logging_steps": 1, "save_strategy": "no"}
    settings.update(overrides)
    if method == "dpo":
        trainer: Any = DPOTrainer(model=model, args=DPOConfig(**settings), train_dataset=data,
                                  processing_class=tokenizer)
    else:
        trainer = KTOTrainer(model=model, args=KTOConfig(**settings), train_dataset=data, processing_class=tokenizer)
    trainer.train()
    trainer.save_model(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    return output_dir
