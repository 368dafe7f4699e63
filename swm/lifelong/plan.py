"""The plan of a lifelong run: every setting with its default, range and meaning, in one place.

`LifelongPlan` is the single definition: the graph's input schema (Studio's form) takes it,
unknown keys and out-of-range values are refused before any call, `DEFAULT_PLAN` is its
defaults, and ``swm learn`` derives its plan options (names, defaults, help, choices) from it
(`swm.commands.learn`). The graph state holds the model itself
(checkpointed as LangGraph serialises pydantic values; `jobs.plan_of` also reads the JSON dump that older
checkpoints hold).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swm.defaults import RENAMED_STRATEGIES, ActOrder, ActStrategy
from swm.tasks.families import FAMILIES, CurriculumLevel, TaskFamily
from swm.tracking import Reporter, reporter_missing
from swm.training.advantages import LearnEstimatorName

Level = CurriculumLevel  # a name `swm.tasks.families.curriculum_levels()` holds as the plan is built
Family = TaskFamily  # a name `swm.tasks.families.task_families()` holds as the plan is built (later games too)
UpdateMethod = Literal["memory", "sft", "rs-sft", "dpo", "kto", "ppo"]  # swm.lifelong.update.METHODS
NamePolicy = Literal["disjoint", "shared"]  # swm.tasks.families.NAME_POLICIES
Shift = Literal["unseen-names", "long-lists"]  # swm.tasks.families.SHIFTS
# the keys' earlier names, as plans stored before a rename hold them
RENAMED_KEYS = {"policy": "act_strategy", "eval_policy": "eval_act_strategy"}
# a plan's dump holds every field; one that holds these and not ``names`` was stored before the name pools and the
# balance of kept samples: it goes on as it began (one shared pool, no balance)
STORED_BEFORE_POOLS = frozenset({"run_id", "out_dir", "deploy_metric", "train"})
AS_STORED_BEFORE_POOLS = {"names": "shared", "balance": False}


class LifelongPlan(BaseModel):
    """What a lifelong run plays, learns and keeps: tasks, episodes, gating, the update, the deploy gate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # the options that define what a run computes: changing one on an existing thread is refused
    # (more cycles extend a finished one); the others may differ on a rerun. The training settings
    # (``train``) are compared field by field, and where adapters are served (``lora_server``,
    # ``base_gguf``) too: a resumed run must not keep the stored ones while the command says others
    DEFINING: ClassVar[tuple[str, ...]] = (
        "cycles", "levels", "families", "episodes_per_level", "samples_per_task", "max_turns", "act_strategy",
        "eval_act_strategy", "self_play", "judge", "judge_threshold", "gating", "min_margin", "update", "keep",
        "replay", "epsilon", "gate_alpha", "heldout_per_cell", "dev_per_cell", "hf_model", "eval_families",
        "base_gguf", "lora_server", "train", "estimator", "ppo_groups", "ppo_iterations", "ppo_group", "act_order",
        "names", "eval_shifts", "shift_per_cell", "balance", "balance_share", "episode_split", "served_format")

    run_id: str = "learn"
    cycles: int = Field(3, ge=1, description="Training cycles (after the baseline evaluation).")
    levels: list[Level] = Field(["easy", "medium", "hard"], min_length=1, description=(
        "Difficulty levels, in curriculum order: cycle c trains on the c-th (the last repeats); 'decision' "
        "(single verifiable moves) and 'two-turn' (a first move, a code partner's reply, a decision) may come "
        "first, and 'starter' (episodes shorter than easy's, 4 turns, one rule fewer) before easy."))
    families: list[Family] = Field(list(FAMILIES), min_length=1, description=(
        "Task families; also the hidden-role games (werewolf: self-play by default)."))
    eval_families: list[Family] | None = Field(None, description=(
        "Families evaluated on the dev and test splits [default: --families]; families not in --families are "
        "evaluated but never trained on (transfer)."))
    names: NamePolicy = Field("disjoint", description=(
        "Where decision and two-turn tasks draw people's names: 'disjoint' (training from one pool, dev and test "
        "from another, no name shared) or 'shared' (one pool for all: the splits before 2026-11-26). Episode "
        "levels read the frozen files (one pool)."))
    eval_shifts: list[Shift] = Field(default_factory=list, description=(
        "Shifted test cells every policy is also evaluated on, apart from R and the deploy gate (phase 'shift'): "
        "'unseen-names' (names from a pool no split uses), 'long-lists' (mutual friend: 8-10 friends a list); "
        "decision and two-turn levels, --shift-per-cell tasks a cell."))
    shift_per_cell: int = Field(100, ge=1, le=10_000, description="Test-split tasks per shifted cell (--eval-shifts).")
    episodes_per_level: int = Field(4, ge=1, description="Training episodes per cycle.")
    samples_per_task: int = Field(2, ge=1, description="Episodes per training task (same-state pairs need at least 2).")
    max_turns: int = Field(8, ge=1, description="Turn limit per episode.")
    act_order: ActOrder = Field("sotopia", description=(
        "Order of the acting prompt in episodes: 'sotopia' (the conversation, then the turn, action types and "
        "format) or 'prefix' (the conversation last, in Foresee-and-Act's predict and refine prompts too: a "
        "prefix cache serves all but the new turns); the trained rows hold the prompt each turn was shown."))
    act_strategy: ActStrategy = Field("plain", description=(
        "How the learner acts in training episodes: plain (one call a turn), or foresee/lookahead (world-model "
        "predictions too: the perception track)."))
    eval_act_strategy: ActStrategy = Field("plain", description="How the learner acts in the held-out evaluations.")
    self_play: bool = Field(True, description=(
        "One model in every seat, or the partner role's model in the other seats."))
    judge: bool = Field(False, description=(
        "Run the SOTOPIA-EVAL judge on each episode; pass rate then also needs judge goal >= threshold."))
    judge_threshold: float = Field(7.0, description="The judge goal score a passed episode needs (with --judge).")
    gating: bool = Field(True, description=(
        "Gate what is learnt from: off keeps every episode pair (reasons still recorded) and, for sft/rs-sft on "
        "decisions and two-turn tasks, clones every collected sample whatever the checker said (the no-gating "
        "ablation)."))
    min_margin: float = Field(0.1, description="The gate's minimum score margin.")
    update: UpdateMethod = Field("memory", description=(
        "Policy update: memory (any API model), or a LoRA adapter trained with TRL, continued from the deployed "
        "policy's adapter (rs-sft/sft: checker-passing samples and kept trajectories; dpo/kto: passing against "
        "failing samples of the same decision, and kept pairs; ppo: PPO on decision samples, the checker's verdict "
        "as the reward, with --estimator's advantages)."))
    estimator: LearnEstimatorName = Field("group", description=(
        "ppo: the advantage estimator, as swm selfplay's (and its default; swm.training.advantages.ESTIMATORS): group "
        "(critic-free, normalised over a task's samples), hierarchical (a value head, turn- then token-level GAE) or "
        "role (a running baseline per family and role)."))
    ppo_iterations: int = Field(1, ge=1, description=(
        "ppo: sampling rounds per cycle, each a fresh π_old: the cycle's samples, then fresh samples of its decision "
        "tasks drawn in torch from the adapter being trained (--ppo-group a task), checked and updated on."))
    ppo_group: int = Field(8, ge=2, description="ppo: samples a task in each later round (G).")
    ppo_groups: Literal["mixed", "all"] = Field("mixed", description=(
        "ppo: train on the tasks whose samples both pass and fail (DPO's and KTO's tasks), or on every sample."))
    keep: Literal["passed", "wrong"] = Field("passed", description=(
        "sft/rs-sft on decisions: clone passing samples, or 'wrong': as many well-formatted failing ones (the "
        "format-only control arm)."))
    balance: bool = Field(True, description=(
        "sft/rs-sft on decisions and two-turn tasks: cap how many of a cycle's cloned samples of a family may share "
        "one answer (and, mutual friend, one first name), so that none dominates; off clones them all."))
    balance_share: float = Field(0.15, gt=0, le=1, description=(
        "With --balance on: the largest share of a cycle's cloned samples of a family one answer or first name "
        "may hold (at least one sample each)."))
    replay: bool = Field(True, description="Learn from earlier cycles' kept pairs too (the replay buffer).")
    epsilon: float = Field(0.05, description="Deploy gate: allowed drop on earlier levels.")
    gate_alpha: float = Field(0.05, ge=0, le=1, description=(
        "Deploy gate: a dev-split drop refuses the candidate only when the one-sided two-proportion test of it "
        "is below this (1: any dip of the point estimate refuses)."))
    deploy_metric: Literal["pass", "completion"] = Field("pass", description="What the deploy gate compares.")
    episode_split: Literal["frozen", "generated"] = Field("frozen", description=(
        "Where the dev and test episode cells come from: the frozen files (4 tasks a cell) or the generator "
        "(as many as --heldout-per-cell / --dev-per-cell, pinned by digest; the starter level always)."))
    heldout_per_cell: int = Field(1, ge=1, le=10_000, description=(
        "Test-split tasks per family and level: they fill R and never choose (episode levels hold 4)."))
    dev_per_cell: int = Field(1, ge=1, le=10_000, description=(
        "Dev-split tasks per family and level: the deploy gate chooses on them (episode levels hold 4)."))
    out_dir: str = Field("swm-learn", description="Folder for report.md, plots and exports.")
    hf_model: str | None = Field(None, description=(
        "sft/dpo/kto: the base to train (a local Hugging Face directory or a .gguf file) [default: the embedded "
        "SmolLM2 GGUF, dequantised; needs the [train] extra]."))
    base_gguf: str | None = Field(None, description=(
        "The GGUF of --hf-model that llama.cpp serves the trained adapters over [default: the hf-model itself "
        "when it is a .gguf, else the shipped GGUF]."))
    verify_served: Literal["full", "identity"] = Field("full", description=(
        "After each deploy: 'full' checks the served adapter's identity (content hash) and a temperature-0 probe "
        "against the trained adapter's own output; 'identity' the hash only (for servers that play no weights)."))
    served_format: Literal["auto", "shipped", "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"] = Field(
        "auto", description=(
            "The number format llama.cpp serves the base GGUF in (swm.serving.formats; SWM_EMBEDDED_FORMAT): auto is "
            "SWM_EMBEDDED_FORMAT where set, else f16 for --update ppo over a quantised base (its samples then come "
            "from the weights torch scores them with, 0.001 nats a token apart against Q4_1's 0.03, and prompts are "
            "evaluated 1.6-1.9x faster) and the base as shipped for the other methods."))
    lora_server: str | None = Field(None, description=(
        "Serve adapters on this OpenAI-compatible server by runtime LoRA loading (vLLM /v1/load_lora_adapter) "
        "instead of the embedded llama.cpp server."))
    report_to: Reporter = Field("none", description=(
        "Where the run reports its numbers, one tracker run named after the thread: after each cycle R's row, "
        "ACC/BWT/FWT so far, the dev rates, the deploy and the update's stats (axis 'cycle'), and each training "
        "step's logs (sft/dpo/kto: TRL's loss, grad norm, rewards, entropy; ppo: loss parts, KL, clip fraction) "
        "as train/<policy>/...: TensorBoard files in <out>/runs, or a wandb / mlflow / trackio run set up by their "
        "own environment variables (swm.tracking; swm learn opens it, the graph logs to LifelongContext.tracker)."))
    train: dict[str, Any] = Field(default_factory=dict, description=(
        "swm.training.trl_update.TrainSettings fields (max_steps, epochs, learning_rate, rank, ...)."))

    @model_validator(mode="before")
    @classmethod
    def _earlier_names(cls, data: object) -> Any:
        """Read a plan stored under the earlier names: ``policy``/``eval_policy``, strategy ``rollout``."""
        if not isinstance(data, dict):
            return data
        data = {RENAMED_KEYS[k] if k in RENAMED_KEYS and RENAMED_KEYS[k] not in data else k: v
                for k, v in data.items()}
        if STORED_BEFORE_POOLS <= data.keys() and "names" not in data:
            data = {**AS_STORED_BEFORE_POOLS, **data}
        for key in ("act_strategy", "eval_act_strategy"):
            if isinstance(data.get(key), str):
                data[key] = RENAMED_STRATEGIES.get(data[key], data[key])
        return data

    @model_validator(mode="after")
    def _one_keep(self) -> LifelongPlan:
        if self.keep == "wrong" and not self.gating:
            raise ValueError("keep 'wrong' (the format-only control) and gating off (every sample) are two "
                             "different arms: choose one")
        return self

    @field_validator("report_to")
    @classmethod
    def _reporter_installed(cls, value: str) -> str:
        missing = reporter_missing(value)
        if missing:
            raise ValueError(missing)
        return value


DEFAULT_PLAN: dict[str, Any] = LifelongPlan().model_dump(mode="json")
