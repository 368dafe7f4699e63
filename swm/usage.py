"""LLM call accounting: calls, prompt and completion tokens and seconds, per node and per run.

Usage travels in the graph state as ``{node: CallStats}`` merged by `merge_usage`, so it is
checkpointed with the run, survives a resume, and stays constant in size however long the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired

from typing_extensions import TypedDict


class CallStats(TypedDict):
    calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    failures: int
    unknown_usage: int  # calls whose server sent no usable token counts (counted as 0 tokens)
    nul_removed: NotRequired[int]  # NUL characters removed from replies (no backend stores them in text)


def empty_stats() -> CallStats:
    return CallStats(calls=0, prompt_tokens=0, completion_tokens=0, seconds=0.0, failures=0, unknown_usage=0,
                     nul_removed=0)


def add_stats(a: Mapping[str, Any], b: Mapping[str, Any]) -> CallStats:
    """Return the sum of two stats records."""
    out = empty_stats()
    for key in out:
        out[key] = a.get(key, 0) + b.get(key, 0)  # type: ignore[literal-required]
    out["seconds"] = round(out["seconds"], 6)
    return out


def merge_usage(
    left: Mapping[str, Mapping[str, Any]] | None, right: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, CallStats]:
    """Reducer for the ``usage`` state key: add per-node stats."""
    merged: dict[str, CallStats] = {k: add_stats(v, {}) for k, v in (left or {}).items()}
    for node, stats in (right or {}).items():
        merged[node] = add_stats(merged.get(node, empty_stats()), stats)
    return merged


def total_usage(usage: Mapping[str, Mapping[str, Any]] | None) -> CallStats:
    """Return the run total of a per-node usage record."""
    out = empty_stats()
    for stats in (usage or {}).values():
        out = add_stats(out, stats)
    return out


def usage_of(message: object) -> tuple[int, int, bool]:
    """Return the reply's prompt and completion tokens, and whether the server's count was unusable.

    A server that sends no ``usage``, or negative / non-integer counts, has its call counted as
    zero tokens and flagged (``unknown_usage``), so a report never sums nonsense into its totals.
    """
    meta = getattr(message, "usage_metadata", None)
    counts = []
    for key in ("input_tokens", "output_tokens"):
        value = meta.get(key) if meta else None
        counts.append(value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None)
    known = message is None or all(c is not None for c in counts)
    return counts[0] or 0, counts[1] or 0, not known
