"""Graph state of the lifelong loop: the run's plan, the cycle, and small counters.

Bulk data (tasks, episodes, pairs, policies, metrics) lives in the experience store; the state
holds only ids and numbers that do not grow with the run, so a checkpoint stays small.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal

from typing_extensions import TypedDict

from swm.graph_state import Provenance, SocialWorldState, merge_dict
from swm.social.graph_state import ActStrategy

Level = Literal["easy", "medium", "hard"]  # swm.tasks.families.LEVELS
Family = Literal["negotiation", "mutual_friend", "secret", "scheduling", "persuasion",  # tasks.TASK_FAMILIES
                 "werewolf"]
UpdateMethod = Literal["memory", "sft", "dpo", "kto"]  # swm.lifelong.update.METHODS

DEFAULT_PLAN: dict[str, Any] = {
    "run_id": "learn",
    "cycles": 3,
    "levels": ["easy", "medium", "hard"],
    "families": ["negotiation", "mutual_friend", "secret", "scheduling", "persuasion"],
    "episodes_per_level": 4,
    "samples_per_task": 2,
    "max_turns": 8,
    "policy": "plain",  # collection policy: plain | foresee | rollout
    "eval_policy": "plain",
    "self_play": True,  # one model in every seat; else the partner role plays the other seats
    "judge": False,  # the episode judge (one call per agent); pass rate then also needs goal >= threshold
    "judge_threshold": 7.0,
    "gating": True,
    "min_margin": 0.1,
    "update": "memory",  # memory | sft | dpo | kto
    "replay": True,
    "epsilon": 0.05,
    "deploy_metric": "pass",
    "heldout_per_cell": 1,  # test-split tasks per family and level: they fill R and never choose
    "dev_per_cell": 1,  # dev-split tasks per family and level: the deploy gate chooses on them
    "out_dir": "swm-learn",
    # sft/dpo/kto train a LoRA adapter on this base: a Hugging Face directory or a .gguf file
    # (None: the shipped SmolLM2 GGUF, dequantised); llama.cpp serves it over ``base_gguf``
    # (None: the hf_model itself when it is a .gguf, else the shipped GGUF), or ``lora_server``
    # (an OpenAI-compatible URL with runtime LoRA loading, e.g. vLLM) serves the adapter by name.
    "hf_model": None,
    "base_gguf": None,
    "lora_server": None,
    # after each deploy the served adapter is checked by identity and by a greedy probe against the
    # trained adapter's own reply (swm.serving.verify); "identity" skips the probe, for a server
    # whose arithmetic differs from PEFT's (bf16 vLLM) or one that plays no weights at all
    "verify_served": "full",
    "train": {},  # swm.lifelong.train.TrainSettings fields (max_steps, epochs, learning_rate, rank, ...)
}


class Plan(TypedDict, total=False):
    """A lifelong run's plan: every key optional, defaults in `DEFAULT_PLAN`."""

    run_id: str
    cycles: int
    levels: list[Level]
    families: list[Family]
    episodes_per_level: int
    samples_per_task: int
    max_turns: int
    policy: ActStrategy  # collection policy
    eval_policy: ActStrategy
    self_play: bool  # one model in every seat; else the partner role plays the other seats
    judge: bool  # the episode judge (one call per agent)
    judge_threshold: float
    gating: bool
    min_margin: float
    update: UpdateMethod
    replay: bool
    epsilon: float
    deploy_metric: Literal["pass", "completion"]
    heldout_per_cell: int  # test-split tasks per family and level
    dev_per_cell: int  # dev-split tasks per family and level
    out_dir: str  # where the report and plots go
    hf_model: str | None  # sft/dpo/kto: the base to train (HF directory or .gguf; None: the shipped SmolLM2)
    base_gguf: str | None  # the GGUF llama.cpp serves adapters over (None: hf_model if a .gguf, else SmolLM2)
    lora_server: str | None  # serve adapters here by runtime LoRA loading (vLLM) instead of llama.cpp
    verify_served: Literal["full", "identity"]  # after each deploy: identity and probe, or identity only
    train: dict[str, Any]  # swm.lifelong.train.TrainSettings fields


class LifelongInput(TypedDict, total=False):
    """What the ``lifelong`` graph takes: the plan (``{}`` runs the defaults)."""

    plan: Plan


class LifelongOutput(Provenance, total=False):
    """What the ``lifelong`` graph returns: where the report is, and what each cycle deployed."""

    plan: dict[str, Any]
    cycle: int
    phase: str
    incumbent: str
    candidate_policy: str
    collected: Annotated[int, operator.add]
    evaluated: Annotated[int, operator.add]
    kept: Annotated[int, operator.add]
    rejected: Annotated[int, operator.add]
    decisions: Annotated[dict[str, str], merge_dict]
    report_path: str


class EpisodeJob(TypedDict):
    """One episode to play: the payload of a ``collect`` or ``evaluate`` Send (phase collect | dev | test)."""

    episode_id: str
    task_id: str
    cycle: int
    phase: str
    sample: int
    seat: str
    tested_agent: str
    policy_version: str
    plan: dict[str, Any]


class LifelongState(SocialWorldState, total=False):
    plan: dict[str, Any]
    cycle: int
    phase: str
    incumbent: str  # the deployed policy version
    candidate_policy: str  # this cycle's updated policy version
    collected: Annotated[int, operator.add]
    evaluated: Annotated[int, operator.add]
    kept: Annotated[int, operator.add]
    rejected: Annotated[int, operator.add]
    decisions: Annotated[dict[str, str], merge_dict]  # cycle -> the deploy gate's explanation
    report_path: str
