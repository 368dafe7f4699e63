"""A toy two-seat task with a joint reward, and a tiny random Llama that plays both seats (no download).

Seat A (role ``speaker``) is told a colour (``say red``) and replies with one word; seat B (role
``listener``) hears only that word (``heard red``) and must name the colour. The joint reward is 1
when B names A's colour, else 0, and both seats receive it: neither can score alone, and any
code the two agree on (A says the colour, B repeats it) reaches the optimum of 1. The model is a
two-layer Llama with a ten-word vocabulary, so a random one scores about one time in ten.

`joint_reward` is exact, as `toy_task.expected_reward` is: the probability that B names the
colour, ``1/4 · Σ_c Σ_a P_A(a | say c) · P_B(c | heard a)`` over every word ``a`` A can say, so a
test compares numbers, not samples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toy_task import tiny_llama

COLOURS = ("red", "green", "blue", "gold")
WORDS = ("<unk> <pad> <s> </s> say heard " + " ".join(COLOURS)).split()
SPEAKER, LISTENER = "speaker", "listener"


def make_model(path: Path, seed: int = 1) -> Path:
    """Save a seeded random two-layer Llama with the task's word-level tokenizer into ``path``."""
    return tiny_llama(path, list(WORDS), seed)


def speaker_prompt(colour: str) -> str:
    return f"say {colour}"


def listener_prompt(word: str) -> str:
    return f"heard {word}"


def prompt_ids(tokenizer: Any, prompt: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                        tokenize=True)
    return [int(i) for i in (ids["input_ids"] if hasattr(ids, "keys") else ids)]


def next_word_probs(model: Any, tokenizer: Any, prompt: str) -> Any:
    """The policy's distribution over its reply's first token (temperature 1)."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids(tokenizer, prompt)])).logits[0, -1].float()
    return torch.softmax(logits, dim=-1)


def joint_reward(model: Any, tokenizer: Any) -> float:
    """The exact expected joint reward of one exchange at temperature 1, averaged over the colours."""
    listener = {a: next_word_probs(model, tokenizer, listener_prompt(word)) for a, word in enumerate(WORDS)}
    total = 0.0
    for colour in COLOURS:
        target = tokenizer.convert_tokens_to_ids(colour)
        speaker = next_word_probs(model, tokenizer, speaker_prompt(colour))
        total += sum(float(speaker[a]) * float(listener[a][target]) for a in range(len(WORDS)))
    return total / len(COLOURS)


def sample_word(model: Any, tokenizer: Any, prompt: str, generator: Any) -> str:
    """Sample a one-word reply (seeded through ``generator``) at temperature 1."""
    import torch

    pick = torch.multinomial(next_word_probs(model, tokenizer, prompt), 1, generator=generator)
    return str(tokenizer.convert_ids_to_tokens(int(pick)))
