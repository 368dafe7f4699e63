"""What a checker reads and returns: a transcript's `Utterance` and the `Verdict` (`swm.tasks.checkers`).

Apart from the checkers so that the task tables (`swm.tasks.families.TWO_SEAT_SHAPES`) can name a checker's
type without importing the checkers, which build on the families.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Utterance(BaseModel):
    """One turn of a transcript as the checker reads it."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    text: str = ""
    action_type: str = "speak"


class Verdict(BaseModel):
    """What a checker found: completion, violations and the turns behind them."""

    model_config = ConfigDict(extra="forbid")

    completion: bool
    violations: list[str] = Field(default_factory=list)
    evidence: list[int] = Field(default_factory=list)
    violation_turns: list[int] = Field(default_factory=list)
    resolved_at: int | None = None  # the turn after which the task was settled
    detail: dict[str, Any] = Field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.completion and not self.violations
