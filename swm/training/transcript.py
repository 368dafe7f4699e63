"""Append-only seat transcripts: each seat's context is one chat that only grows, rendered once.

A seat's chat opens with one user message (who it is, its background and goal, what happened
before its first turn); after each reply it grows by one user message with what the seat saw since
(the others' words, the moderator's news). Its token ids are never rendered again: turn k's
prompt is turn k−1's prompt, then the tokens the seat generated, then the chat template's text for
the new message (the text that follows an assistant reply in the template, `next_message_text`),
tokenised once. So a seat's turns form one sequence that only grows: a server serves each turn
from the seat's cached prefix, and the update scores the seat's whole sequence once
(`swm.training.ppo.training_samples`). Re-rendering each turn's whole prompt (``rerender``, the
behaviour before) gives a prompt that need not extend the previous one, and the two choices are
told apart by `append_counts`, recorded for every seat of every rollout.

A `SeatChat` is the seat's state between turns; a sampler that takes one (``chat=``) builds the
prompt ids with `chat_prompt_ids`. The prompt text is the chat's messages, so an engine that takes
messages (an OpenAI-compatible chat endpoint) is given the same transcript.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Transcript = Literal["append", "rerender"]
TRANSCRIPTS: tuple[Transcript, ...] = ("append", "rerender")
DEFAULT_TRANSCRIPT: Transcript = "append"

_SENTINEL = "\u241fswm-reply\u241f"  # a reply no model writes: where the assistant's text stands in the template


@dataclass
class SeatChat:
    """One seat's chat so far: its messages (user, then its reply, alternating) and their token ids when known."""

    messages: list[dict[str, str]] = field(default_factory=list)
    ids: list[int] | None = None  # the last turn's prompt ids then its generated ids: what the next turn extends
    slot: int | None = None  # the server slot that holds this seat's cached prefix, once a server pinned one

    def extend(self, user: str, reply: str, prompt_ids: Sequence[int], token_ids: Sequence[int]) -> None:
        """Add one turn: the user message the seat was given, its reply, and the ids of both (when known)."""
        self.messages += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
        self.ids = [*prompt_ids, *token_ids] if prompt_ids and token_ids else None

    def with_user(self, user: str) -> list[dict[str, str]]:
        """The messages of the next turn: the chat so far, then ``user``."""
        return [*self.messages, {"role": "user", "content": user}]


def _template_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def next_message_text(tokenizer: Any, user: str) -> str:
    """The chat template's text from the end of an assistant reply to the next reply's start, with ``user`` between.

    Read from the template itself (a reply that stands for the seat's own is rendered and everything after it
    kept), so it is the model's own format: for ChatML ``<|im_end|>\\n<|im_start|>user\\n…<|im_end|>\\n
    <|im_start|>assistant\\n``.
    """
    text = str(tokenizer.apply_chat_template([{"role": "user", "content": "."},
                                              {"role": "assistant", "content": _SENTINEL},
                                              {"role": "user", "content": user}],
                                             add_generation_prompt=True, tokenize=False))
    return text[text.index(_SENTINEL) + len(_SENTINEL):]


def chat_prompt_ids(tokenizer: Any, chat: SeatChat | None, user: str, prefill: str = "") -> list[int]:
    """Token ids of the seat's next prompt: the chat's ids so far, then ``user``'s message and the reply's start.

    The first turn (or a chat whose ids are unknown) is the template's rendering of its messages; a later turn
    appends to the chat's ids only the tokens of the new text (`next_message_text`), leaving out the end-of-turn
    token when the seat's reply already ended with it. ``prefill`` (the reply's forced start) comes last.
    """
    if chat is None or chat.ids is None:
        ids = _template_ids(tokenizer, chat.with_user(user) if chat is not None else [{"role": "user",
                                                                                         "content": user}])
    else:
        tail = next_message_text(tokenizer, user)
        eos_text = tokenizer.eos_token or ""
        if chat.ids and chat.ids[-1] == tokenizer.eos_token_id and eos_text and tail.startswith(eos_text):
            tail = tail[len(eos_text):]
        ids = chat.ids + [int(i) for i in tokenizer(tail, add_special_tokens=False)["input_ids"]]
    if prefill:
        ids += [int(i) for i in tokenizer(prefill, add_special_tokens=False)["input_ids"]]
    return ids


class HasIds(Protocol):
    prompt_ids: list[int]
    token_ids: list[int]


def extends(previous: HasIds, current: HasIds) -> bool:
    """Tell whether ``current``'s prompt is ``previous``'s prompt then its reply, token for token, and more."""
    before = [*previous.prompt_ids, *previous.token_ids]
    return bool(before) and len(current.prompt_ids) > len(before) and current.prompt_ids[:len(before)] == before


def append_counts(turns: Sequence[HasIds]) -> tuple[int, int]:
    """Return (turns whose prompt extends the previous turn's prompt and reply, turns checked).

    Every turn after a seat's first is checked, except where a sampler gave no token ids (a scripted one).
    """
    pairs = [(a, b) for a, b in zip(turns, turns[1:], strict=False) if a.prompt_ids and b.prompt_ids]
    return sum(extends(a, b) for a, b in pairs), len(pairs)


def append_ratio(counts: Sequence[tuple[int, int]]) -> float | None:
    """The share of checked turns that appended, over seats' ``append_counts`` (None when no seat had two turns)."""
    checked = sum(c for _, c in counts)
    return sum(a for a, _ in counts) / checked if checked else None


def takes_chat(sampler: Any) -> bool:
    """Tell whether a sampler's ``generate`` takes a seat's chat (``chat=``), so a rollout can append to it."""
    try:
        return "chat" in inspect.signature(sampler.generate).parameters
    except (TypeError, ValueError, AttributeError):
        return False
