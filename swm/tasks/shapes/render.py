"""How the shapes and the seat levels render what they show: a list as prompt lines, a price as text."""

from __future__ import annotations

from collections.abc import Sequence


def bullets(items: Sequence[str]) -> str:
    """One ``- item`` line an item."""
    return "\n".join(f"- {item}" for item in items)


def money(value: float) -> str:
    """A price as the prompts say it (``$300``, ``$12.5``)."""
    return f"${value:g}"
