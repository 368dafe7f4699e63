"""What a training run reports (`TrainStats`), shared by every trainer (the trackers it logs to: `swm.tracking`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


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
