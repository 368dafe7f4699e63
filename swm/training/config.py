"""The policy's and the update's settings, torch-free so that plans, graphs and the CLI load without torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class PolicyConfig(BaseModel):
    """The base model, the LoRA adapter's shape and the sampling settings; recorded with the run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: str = Field("embedded", description="a HF model directory, a .gguf file, or 'embedded'")
    sampler: Literal["auto", "served", "torch"] = Field(
        "auto", description="served: a server plays each iteration's adapter (swm.selfplay.served): llama.cpp as a "
        "GGUF LoRA, or the lora_server; torch: sample in torch; auto: served when lora_server is set or "
        "llama-cpp-python and a base GGUF are there")
    lora_server: str | None = Field(None, description="an OpenAI-compatible server with runtime LoRA loading (vLLM "
                                    "with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True): each iteration's "
                                    "PEFT adapter is loaded there by name and the rollouts sample from it; the server "
                                    "must read the run folder (stored with a key as ***)")
    base_gguf: str | None = Field(None, description="the GGUF llama.cpp serves for a directory base "
                                  "(an 'embedded' or .gguf base is its own)")
    init_adapter: str | None = Field(None, description="a PEFT adapter folder the policy starts from (warm start, "
                                     "e.g. a `swm learn` adapter); its rank and targets replace lora_r/target_modules")
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    temperature: float = Field(0.7, gt=0, description="sampling temperature of the rollouts (and of the "
                               "log-probs PPO scores); 0.7 for small models, whose samples at 1.0 are mostly noise")
    max_new_tokens: int = 32
    threads: int | None = Field(None, description="torch intra-op threads (None: SWM_TRAIN_THREADS, else every core "
                                "this process may run on, os.sched_getaffinity, unless OMP_NUM_THREADS is set)")
    autocast: Literal["auto", "bfloat16", "off"] = Field(
        "auto", description="the CPU's number format for scoring and the update: bfloat16 autocast over float32 "
        "weights (matmuls in bfloat16, log-softmax and the loss in float32), or off (float32); auto: bfloat16 where "
        "the CPU computes it natively (AVX-512 BF16 or AMX, swm.training.device.cpu_bf16), off elsewhere and on "
        "a GPU, whose weights' dtype is the placement's")
    score_old: Literal["update", "sample"] = Field(
        "update", description="when a served rollout's log-probs under the sampling policy (π_old) are computed: at "
        "the update, one forward per seat's whole transcript and only for rows with a signal (update), or for each "
        "turn as it is sampled (sample, the path before: a seat's growing prompt scored again every turn)")
    served_format: Literal["auto", "shipped", "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1"] = Field(
        "auto", description="the number format llama.cpp serves the base in while the run samples "
        "(swm.serving.formats; SWM_EMBEDDED_FORMAT): auto is SWM_EMBEDDED_FORMAT where set, else f16 -- the shipped "
        "weights dequantised, whose served log-probs are torch's within 0.001 nats (Q4_1's: 0.03) and which sampled "
        "the recipe's iteration 1.4x faster (docs/results/engine-formats-2026-12-07-1425.md)")
    device: str | None = Field(None, description="cpu, cuda, cuda:N (None: SWM_DEVICE, else cuda when present)")
    dtype: str | None = Field(None, description="float32, bfloat16 or float16 of the base's weights (None: SWM_DTYPE, "
                              "else bfloat16 on a GPU that supports it, float32 otherwise)")


class PPOConfig(BaseModel):
    """The update's constants; recorded with the run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lr: float = 1e-4
    clip: float = 0.2
    kl_coef: float = Field(0.05, ge=0, description="KL penalty to the base model; 0 turns it (and the reference "
                           "forward pass) off")
    kl_estimator: Literal["k3", "k1"] = "k3"
    value_coef: float = Field(0.5, description="0 for the critic-free estimator, which trains no value head")
    epochs: int = 1
    minibatch: int = 4
    micro_batch: int | None = Field(None, ge=1, description="rows per forward/backward inside a minibatch, "
                                    "gradients accumulated (the same update in less memory); None: as many as "
                                    "keep rows x the longest row within micro_tokens")
    micro_tokens: int = Field(2048, ge=1, description="with micro_batch None, the positions one forward/backward "
                              "holds at most (rows x the minibatch's longest row; one row at least): a multi-turn "
                              "seat's transcript is one row of up to ~2,000 tokens, and eight at once held 17 GB")
    max_grad_norm: float = 1.0
    skip_zero: Literal["auto", "on", "off"] = Field(
        "auto", description="rows whose advantages are all zero are not forwarded, and a minibatch left with none "
        "takes no optimizer step (AdamW would still move the weights): exact when nothing else reaches such a row, "
        "so auto skips only with kl_coef 0 and value_coef 0 (the group estimator's recipe); on skips them even "
        "with a KL penalty or a value head (their KL and value terms are then dropped); off forwards every row")
    shared_prefix: bool = Field(True, description="the rows that open with the same tokens (a group's G rollouts "
                                "share each seat's first prompt) forward that prefix once, its keys and values "
                                "expanded to every row, the gradient through both (swm.training.prefix)")
    sequences: Literal["seat", "turn"] = Field("seat", description="what one training row is: a seat's whole "
                                               "append-only transcript, scored once with every turn's tokens masked "
                                               "in (seat), or each turn on its own prompt (turn); a seat whose turns "
                                               "do not append is trained per turn either way")
