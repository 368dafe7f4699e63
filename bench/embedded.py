"""The embedded model's speed on this machine: completion tokens per second, text and structured.

Runs the real embedded llama.cpp server (``swm.serving.embedded.ensure_server``) through the same
``ChatOpenAI`` path every role uses (``swm.llm.make_chat_model("embedded")``). Tokens come from
the server's own ``usage``; seconds are client wall time, so the figure includes prompt
processing and HTTP — what a graph actually gets. Structured output is grammar-constrained by
llama.cpp, which costs extra per token; the ratio structured / free text says how much.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from swm.llm import call_model, make_chat_model
from swm.schemas import ReasonedAnswer
from swm.serving.embedded import describe, ensure_server

PROMPT = ("Two neighbours, Ana and Ben, argue about a fence between their gardens. Ana wants it higher; "
          "Ben wants to keep the view. Write what Ana says next, then explain briefly why.")


@dataclass
class EmbeddedRow:
    kind: str
    calls: int
    completion_tokens: int
    prompt_tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds else float("nan")


def measure(calls: int = 3, max_tokens: int = 64, budget_s: float = 30.0) -> tuple[list[EmbeddedRow], str]:
    """Return free-text and structured rows, and a description of the model (raises if unavailable).

    Each kind makes up to ``calls`` calls but stops after ``budget_s`` seconds (at least one call),
    so a machine busy with other work cannot push the suite past its ten minutes.
    """

    ensure_server()
    model = make_chat_model("embedded", max_tokens=max_tokens)
    call_model(make_chat_model("embedded", max_tokens=4), "Say hello.")  # warm-up: load, first prompt
    rows = []
    for kind, schema in (("free text", None), ("structured (ReasonedAnswer)", ReasonedAnswer)):
        done = tokens = prompt = 0
        start = time.perf_counter()
        for i in range(calls):
            if i and time.perf_counter() - start > budget_s:
                break
            reply = call_model(model, f"{PROMPT} (variant {i})", schema)
            done += 1
            tokens += reply.stats["completion_tokens"]
            prompt += reply.stats["prompt_tokens"]
        rows.append(EmbeddedRow(kind, done, tokens, prompt, time.perf_counter() - start))
    return rows, describe()


def format_rows(rows: list[EmbeddedRow], model: str) -> list[str]:
    lines = [f"Embedded model: {model}, {os.cpu_count()} cores (completion tokens / client wall second)",
             f"  {'output':<28} {'calls':>5} {'tokens':>7} {'tokens/s':>9} {'vs free text':>13}"]
    base = rows[0].tokens_per_second if rows else float("nan")
    for r in rows:
        lines.append(f"  {r.kind:<28} {r.calls:>5} {r.completion_tokens:>7} {r.tokens_per_second:>9.1f} "
                     f"{r.tokens_per_second / base:>12.2f}x")
    return lines
