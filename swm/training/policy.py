"""The trainable policy of self-play: a causal LM with a LoRA adapter (PEFT) and a value head, in torch.

The base comes from `swm.training.base.load_base`, the one loader every trainer uses (a local
model directory, a ``.gguf`` file, or ``embedded``, the SmolLM2 GGUF that the embedded server
serves, dequantised by transformers), on the device and in the dtype `swm.training.device` chooses
(cuda and bfloat16 when present, the CPU and float32 otherwise; ``PolicyConfig.device``/``dtype``
override it). The value head, every batch and the optimiser's state follow the model's device.

Rollouts are sampled by llama.cpp serving the checkpoint's adapter (`swm.selfplay.served`) or,
with ``sampler="torch"``, here: `LoraValueModel.generate` samples a reply under the current adapter.
Either way the log-probabilities of the sampled tokens are *recomputed* with the same forward
pass the PPO update uses (`LoraValueModel.score`), so the update's first ratio is exactly 1.

The value head is a linear layer on the last hidden state; its value at a generated token is
read at the position that predicts that token (the state before it is sampled).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from swm.tasks.decisions import Stop, before_stop, stops
from swm.training.base import load_base
from swm.training.config import PolicyConfig
from swm.training.device import choose_placement, model_device, train_threads, use_autocast
from swm.training.prefix import Prefix, cache_argument
from swm.training.trajectory import Generation
from swm.training.transcript import SeatChat, chat_prompt_ids


@dataclass
class Batch:
    """Prompt + completion sequences, right-padded; ``mask`` marks the positions that predict generated tokens."""

    input_ids: torch.Tensor  # [B, L]
    attention: torch.Tensor  # [B, L]
    mask: torch.Tensor  # [B, L-1] float: 1 where position t predicts a generated token input_ids[:, t+1]

    @property
    def targets(self) -> torch.Tensor:
        return self.input_ids[:, 1:]

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on ``device`` (itself when it is there already)."""
        if self.input_ids.device == torch.device(device):
            return self
        return Batch(self.input_ids.to(device), self.attention.to(device), self.mask.to(device))


def collate(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int) -> Batch:
    """Build a `Batch`: each row is one turn's prompt then its generated tokens; only the latter are masked in."""
    return collate_spans([[*p, *c] for p, c in zip(prompts, completions, strict=True)],
                         [[(len(p), len(p) + len(c))] for p, c in zip(prompts, completions, strict=True)], pad_id)


def collate_spans(sequences: Sequence[Sequence[int]], spans: Sequence[Sequence[tuple[int, int]]], pad_id: int) -> Batch:
    """Build a `Batch` of whole sequences: row i is ``sequences[i]``, its targets the tokens in ``spans[i]``.

    A span ``(start, end)`` marks tokens ``start..end-1`` as generated (a seat's turn in its transcript); every
    other token is context. One span at the end of each row is `collate`'s batch.
    """
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    mask = torch.zeros((len(sequences), width - 1), dtype=torch.float32)
    for i, (seq, row) in enumerate(zip(sequences, spans, strict=True)):
        ids[i, : len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        attention[i, : len(seq)] = 1
        for start, end in row:
            if end > start and not 0 < start < end <= len(seq):
                raise ValueError(f"row {i}: span ({start}, {end}) outside its {len(seq)} tokens (or at token 0)")
            mask[i, start - 1 : end - 1] = 1.0
    return Batch(ids, attention, mask)


def spread(rows: Sequence[Sequence[float]], batch: Batch) -> torch.Tensor:
    """Place per-generated-token values (one list per row) at the batch's masked positions."""
    out = torch.zeros_like(batch.mask)
    for i, row in enumerate(rows):
        where = batch.mask[i].nonzero().flatten()
        if len(where) != len(row):
            raise ValueError(f"row {i}: {len(row)} values for {len(where)} generated tokens")
        out[i, where] = torch.tensor(list(row), dtype=out.dtype, device=out.device)
    return out


def gather(tensor: torch.Tensor, batch: Batch) -> list[list[float]]:
    """Read per-generated-token values back from a [B, L-1] tensor, one list per row."""
    mask = batch.mask.to(tensor.device).bool()
    return [tensor[i, mask[i]].tolist() for i in range(tensor.shape[0])]


def _generated_positions(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's masked positions [B, N] (padded by repeating its last one) and which are real [B, N]."""
    rows = [row.nonzero().flatten() for row in batch.mask]
    width = max((len(r) for r in rows), default=0) or 1
    positions = torch.zeros((len(rows), width), dtype=torch.long, device=batch.mask.device)
    valid = torch.zeros((len(rows), width), dtype=torch.float32, device=batch.mask.device)
    for i, row in enumerate(rows):
        if len(row):
            positions[i, : len(row)] = row
            positions[i, len(row):] = row[-1]
            valid[i, : len(row)] = 1.0
    return positions, valid


class LoraValueModel:
    """A LoRA-adapted causal LM with a value head: sample, score, save and load."""

    def __init__(self, model: Any, tokenizer: Any, value_head: torch.nn.Linear, config: PolicyConfig) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.value_head = value_head.to(model_device(model))  # float32 on the model's device
        self.config = config
        self._autocast: bool | None = None  # decided at the first forward (`autocast`)

    @property
    def device(self) -> torch.device:
        """The model's device: where batches, the value head and the optimiser's state live."""
        return model_device(self.model)

    @classmethod
    def create(cls, config: PolicyConfig, adapter: Path | None = None,
               base: tuple[Any, Any] | None = None) -> LoraValueModel:
        """Load the base (or take ``base`` = (model, tokenizer)), then a saved adapter or a fresh one."""
        from peft import LoraConfig, PeftModel, get_peft_model  # optional: the [train] extra

        threads = train_threads(config.threads)
        if threads:
            torch.set_num_threads(threads)
        model, tok = base if base is not None else load_base(config.base, choose_placement(config.device,
                                                                                          config.dtype))
        hidden = model.config.hidden_size
        head = torch.nn.Linear(hidden, 1)
        if adapter is not None:
            model = PeftModel.from_pretrained(model, str(adapter / "adapter"), is_trainable=True)
            head.load_state_dict(torch.load(adapter / "value_head.pt", weights_only=True, map_location="cpu"))
        elif config.init_adapter:  # warm start: the adapter's own shape, a zero value head
            model = PeftModel.from_pretrained(model, config.init_adapter, is_trainable=True)
            torch.nn.init.zeros_(head.weight)
            torch.nn.init.zeros_(head.bias)
        else:
            torch.nn.init.zeros_(head.weight)
            torch.nn.init.zeros_(head.bias)
            lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                              target_modules=list(config.target_modules), task_type="CAUSAL_LM")
            model = get_peft_model(model, lora)
        return cls(model, tok, head, config)

    def reset_adapter(self, seed: int) -> None:
        """Re-initialise the LoRA matrices (seeded; B = 0, so the policy equals the base) and zero the value head.

        With a warm start (``config.init_adapter``) the matrices are that adapter's instead.
        """
        from peft import set_peft_model_state_dict  # optional: the [train] extra
        from peft.tuners.lora import LoraLayer  # optional: the [train] extra
        from safetensors.torch import load_file  # optional: the [train] extra

        if self.config.init_adapter:
            set_peft_model_state_dict(self.model, load_file(str(Path(self.config.init_adapter) /
                                                                 "adapter_model.safetensors")))
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
            return
        torch.manual_seed(seed)
        for module in self.model.modules():
            if isinstance(module, LoraLayer):
                for name in module.lora_A:
                    module.reset_lora_parameters(name, True)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    def load_weights(self, directory: Path) -> None:
        """Load a saved adapter and value head into this policy (same shape), in place."""
        from peft import set_peft_model_state_dict  # optional: the [train] extra
        from safetensors.torch import load_file  # optional: the [train] extra

        set_peft_model_state_dict(self.model, load_file(str(directory / "adapter" / "adapter_model.safetensors")))
        self.value_head.load_state_dict(torch.load(directory / "value_head.pt", weights_only=True,
                                                   map_location=self.device))

    def parameters(self) -> list[torch.nn.Parameter]:
        """The trainable parameters: the LoRA matrices and the value head."""
        return [p for p in self.model.parameters() if p.requires_grad] + list(self.value_head.parameters())

    def prompt_ids(self, prompt: str) -> list[int]:
        """Token ids of the chat-templated prompt, ending with the assistant header."""
        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                 tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    @torch.no_grad()
    def generate(self, prompt: str, seed: str | int = 0, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None, chat: SeatChat | None = None) -> Generation:
        """Sample a reply (seeded, so a replayed rollout samples the same) and score its tokens.

        ``prefill`` is the reply's forced start: part of the context (``prompt_ids``), never a
        generated token, and the start of ``text``. ``stop`` (one string or several, `stops`) ends the reply at
        the generated token that completes the first of them to complete (the tokens holding it are kept as the
        turn's end, as the served sampler appends them, and their text is dropped), so no token sampled past a
        stop is trained. With the seat's
        ``chat`` the prompt is its chat's ids then ``prompt`` as the next message (`swm.training.transcript`).
        """
        digest = hashlib.sha256(str(seed).encode()).digest()
        generator_seed = int.from_bytes(digest[:8], "little")
        torch.manual_seed(generator_seed)
        prompt_ids = chat_prompt_ids(self.tokenizer, chat, prompt, prefill)
        self.model.eval()
        out = self.model.generate(input_ids=torch.tensor([prompt_ids], device=self.device),
                                  attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long, device=self.device),
                                  do_sample=True, temperature=self.config.temperature,
                                  top_k=0, top_p=1.0, max_new_tokens=max_tokens or self.config.max_new_tokens,
                                  pad_token_id=self.tokenizer.pad_token_id)
        tokens = [int(t) for t in out[0, len(prompt_ids):]]
        eos = self.tokenizer.eos_token_id
        if eos in tokens:
            tokens = tokens[: tokens.index(eos) + 1]
        ends = stops(stop)
        if ends:  # the token that completes a stop: ``\n4.`` is three tokens ("\n", "4", ".")
            said = (str(self.tokenizer.decode(tokens[:i + 1])) for i in range(len(tokens)))
            cut = next((i for i, prefix in enumerate(said) if any(end in prefix for end in ends)), None)
            tokens = tokens if cut is None else tokens[: cut + 1]
        text = self.tokenizer.decode([t for t in tokens if t != eos], skip_special_tokens=True)
        text = prefill + before_stop(text, ends)
        batch = collate([prompt_ids], [tokens], self.tokenizer.pad_token_id)
        logprobs, _ = self.score(batch)
        return Generation(text=text, prompt_ids=prompt_ids, token_ids=tokens, logprobs=gather(logprobs, batch)[0])

    @property
    def uses_bfloat16(self) -> bool:
        """Whether the forward runs under bfloat16 autocast (`autocast`), as decided for this policy."""
        self.autocast()
        return bool(self._autocast)

    def autocast(self) -> Any:
        """The context the model's forward runs in: bfloat16 autocast on a CPU that has it (`PolicyConfig.autocast`,
        `swm.training.device.use_autocast`), nothing otherwise."""
        if self._autocast is None:
            self._autocast = use_autocast(self.config.autocast, self.device, next(iter(self.model.parameters())).dtype)
        return torch.autocast("cpu", dtype=torch.bfloat16) if self._autocast else contextlib.nullcontext()

    def score(self, batch: Batch, reference: bool = False, prefix: Prefix | None = None,
              raw: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (log π(target | context), value) [B, L-1]; ``reference`` disables the adapter.

        Log-probabilities are computed at the masked positions only (0 elsewhere): the vocabulary
        projection runs on each row's generated positions, not on the whole prompt — a 1,000-token
        Werewolf prompt would otherwise hold B × 1,000 × 49,152 logits (and their gradients) for a
        few dozen that count. Values are computed everywhere. The positions are gathered here from
        the final (normed) hidden states and projected with the output embeddings: a 2-D
        ``logits_to_keep`` would do the same, but only transformers releases after 5.17 accept one
        (5.17 indexes the batch axis with it and fails), and the range admits 4.56.

        With ``prefix`` (`swm.training.prefix.Prefix`, forwarded once) every row of ``batch`` continues it: the
        rows hold only their tokens after it, and the prefix's keys and values are their past. Under bfloat16
        autocast the projection to the vocabulary, the log-softmax and the value head stay in float32.

        ``raw``, a list, is given the same log-probabilities at temperature 1 (from the same forward): what a server
        reports of the tokens it sampled (vLLM's default ``raw_logprobs``), for `swm.serving.verify.check_sampled`.
        """
        batch = batch.to(self.device)
        positions, valid = _generated_positions(batch)
        attention = batch.attention
        kwargs: dict[str, Any] = {"input_ids": batch.input_ids, "output_hidden_states": True, "logits_to_keep": 1}
        if prefix is not None:
            attention = torch.cat([attention.new_ones((attention.shape[0], prefix.length)), attention], dim=1)
            kwargs[cache_argument(self.model)] = prefix.cache(attention.shape[0])
            kwargs["use_cache"] = True
        kwargs["attention_mask"] = attention
        disabled = self.model.disable_adapter() if reference else contextlib.nullcontext()
        with disabled, self.autocast():
            out = self.model(**kwargs)
        hidden = out.hidden_states[-1].float()  # [B, L, H], after the final norm
        kept = torch.take_along_dim(hidden, positions[..., None], dim=1)  # [B, N, H]
        head = self.model.get_output_embeddings()
        bias = None if head.bias is None else head.bias.float()
        unscaled = torch.nn.functional.linear(kept, head.weight.float(), bias)
        targets = batch.input_ids.gather(1, positions + 1)

        def at_targets(logits: torch.Tensor) -> torch.Tensor:
            picked = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1) * valid
            # scatter_add with the padding entries at 0: a position's value (and its gradient) counted once
            return torch.zeros_like(batch.mask, dtype=picked.dtype).scatter_add(1, positions, picked)

        logprobs = at_targets(unscaled / self.config.temperature)
        if raw is not None:
            raw.append(at_targets(unscaled.detach()).detach())
        values = self.value_head(hidden[:, :-1])
        return logprobs, values.squeeze(-1)

    def save(self, directory: Path, optimizer: torch.optim.Optimizer | None = None,
             meta: dict[str, Any] | None = None) -> None:
        """Write the adapter, the value head, the optimiser state and ``meta.json`` into ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(directory / "adapter"))
        torch.save(self.value_head.state_dict(), directory / "value_head.pt")
        if optimizer is not None:
            torch.save(optimizer.state_dict(), directory / "optimizer.pt")
        (directory / "meta.json").write_text(json.dumps(meta or {}, indent=1, sort_keys=True))
