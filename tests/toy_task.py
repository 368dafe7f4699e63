"""A toy verifiable task with a known optimum, and a tiny random Llama that can learn it (no download).

The task: the prompt ``say red`` asks for the reply ``red`` (one of four colours). The checker
reads the reply's first word; the optimum is reward 1 on every prompt. The model is a
two-layer Llama with a 11-word vocabulary, so a random one answers right about one time in
eleven. `expected_reward` is the exact expected checker reward of a one-word reply — the
probability mass the policy puts on the right first token, averaged over the prompts — so a
test compares numbers, not samples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLOURS = ("red", "green", "blue", "gold")
WORDS = ("<unk> <pad> <s> </s> <|user|> <|assistant|> say " + " ".join(COLOURS)).split()
CHAT = "{% for m in messages %}{{ m['content'] }} {% endfor %}"  # the reply follows the prompt's last word
PROMPTS = {f"say {c}": c for c in COLOURS}


def tiny_llama(path: Path, vocab: list[str], seed: int = 1, whitespace_only: bool = True,
               max_positions: int = 64) -> Path:
    """Save a seeded random two-layer Llama with a word-level tokenizer over ``vocab`` into ``path``.

    ``vocab`` starts with ``<unk> <pad> <s> </s>``; words are split at whitespace (``whitespace_only``)
    or at whitespace and punctuation. The chat template writes each message's text followed by a space.
    """
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit() if whitespace_only else pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = CHAT
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=max_positions,
                         pad_token_id=1, bos_token_id=2, eos_token_id=3, initializer_range=0.1)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path


def make_toy_model(path: Path, seed: int = 1) -> Path:
    """Save a seeded random two-layer Llama with the task's word-level tokenizer into ``path``."""
    return tiny_llama(path, list(WORDS), seed)


def check(prompt: str, reply: str) -> float:
    """The task's checker: 1 when the reply's first word is the colour the prompt asks for, else 0."""
    words = reply.split()
    return float(bool(words) and words[0] == PROMPTS[prompt])


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    """The chat-templated prompt's token ids, ending with the assistant header."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        tokenize=True)
    return [int(i) for i in (ids["input_ids"] if hasattr(ids, "keys") else ids)]


def first_token_probs(model: Any, tokenizer: Any, prompt: str) -> Any:
    """The policy's distribution over its reply's first token (temperature 1)."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids(tokenizer, prompt)])).logits[0, -1].float()
    return torch.softmax(logits, dim=-1)


def expected_reward(model: Any, tokenizer: Any) -> float:
    """The exact expected reward of a one-word reply sampled at temperature 1, averaged over the prompts."""
    total = 0.0
    for prompt, answer in PROMPTS.items():
        total += float(first_token_probs(model, tokenizer, prompt)[tokenizer.convert_tokens_to_ids(answer)])
    return total / len(PROMPTS)


def sample_replies(model: Any, tokenizer: Any, prompt: str, k: int, seed: int) -> list[str]:
    """Sample ``k`` one-word replies (seeded) from the policy at temperature 1."""
    import torch

    probs = first_token_probs(model, tokenizer, prompt)
    picks = torch.multinomial(probs, k, replacement=True, generator=torch.Generator().manual_seed(seed))
    return [str(tokenizer.convert_ids_to_tokens(int(i))) for i in picks]
