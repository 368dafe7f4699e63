"""One graph under measurement (`GraphCase`), and the error of a graph the suite cannot drive.

The registry that lists the cases is `bench.cases`; the case makers of the social graphs are in
`bench.extra_graphs` and `bench.lifelong_case`. They all import this module, never each other
back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GraphCase:
    """One graph under measurement."""

    name: str
    build: Callable[[], Any]  # () -> StateGraph
    inputs: Callable[[int], dict[str, Any]]
    floor: Callable[[dict[str, Any]], int]
    context: dict[str, Any] = field(default_factory=dict)
    # calls on the longest chain of calls that must wait for each other (default: all of them)
    critical: Callable[[dict[str, Any]], int] | None = None
    note: str = ""
    durability: str = "sync"  # as the CLI runs graphs on the SQLite checkpointer

    def critical_calls(self, inp: dict[str, Any]) -> int:
        return self.critical(inp) if self.critical is not None else self.floor(inp)


class NotMeasurable(RuntimeError):
    """A graph exists but the suite cannot drive it (its API is not what the case expects)."""
