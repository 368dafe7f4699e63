"""SOTOPIA-EVAL's seven dimensions: swm's per-agent judge schema and the reading of what it returns.

This is the ``swm`` judge protocol (one call per agent, a short rubric); the default ``sotopia``
protocol, sotopia's own evaluator, is `swm.social.sotopia_eval`. The judge model is shown every
range twice: in the prompt and in `SotopiaEvaluation`, the tool schema it fills
(``minimum``/``maximum`` and the enum of allowed integers, see `score_field`). What comes back is
read by `read_scores`: for the episode judge strictly (a score out of its range, or not an
integer, is refused as sotopia refuses it), leniently for a look-ahead's own score (clamped or
rounded, the repair recorded). A refused or missing score is asked for again once by the judge
node and, if still not valid, recorded as rejected. Nothing is silently dropped, so
`Judgement.overall` (the mean of the seven) is None whenever a dimension was rejected.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, computed_field, create_model

# Seven reasonings must fit one reply of a small model's token budget, so each is kept short.
Reason = Annotated[str, StringConstraints(max_length=200)]

DIMENSIONS: dict[str, tuple[int, int]] = {
    "believability": (0, 10),
    "relationship": (-5, 5),
    "knowledge": (0, 10),
    "secret": (-10, 0),
    "social_rules": (-10, 0),
    "financial_and_material_benefits": (-5, 5),
    "goal": (0, 10),
}

RUBRIC: dict[str, str] = {
    "believability": "Does the agent interact naturally and realistically, and act in line with its "
                     "character profile? 0 = not at all, 10 = fully.",
    "relationship": "Did the interaction make the agent's relationship with the others better (positive) "
                    "or worse (negative), counting both personal bonds and social status? 0 = unchanged.",
    "knowledge": "Did the agent gain new, important information in the interaction? 0 = nothing, "
                 "10 = much.",
    "secret": "Did the agent keep its secrets and private intentions? 0 = kept, negative = leaked "
              "(-10 = fully revealed).",
    "social_rules": "Did the agent break moral rules or laws? 0 = none, negative = violations "
                    "(-10 = severe).",
    "financial_and_material_benefits": "Did the agent gain (positive) or lose (negative) money or "
                                       "material benefits, short or long term? 0 = unchanged.",
    "goal": "How far did the agent reach its social goal? 0 = not at all, 10 = fully.",
}


def score_field(low: int, high: int) -> tuple[Any, Any]:
    """Return a field for an integer score in low..high that grammar-constrained decoding can enforce.

    The JSON schema carries both ``enum`` (every allowed integer) and ``minimum``/``maximum``:
    llama.cpp's schema-to-grammar honours the enum but not the bounds, and an unbounded integer
    lets a small model emit digits until its token limit.
    """
    allowed: Any = Literal[tuple(range(low, high + 1))]  # type: ignore[valid-type]
    return (allowed, Field(description=f"Integer score from {low} to {high}.",
                           json_schema_extra={"minimum": low, "maximum": high}))


def evaluation_schema(dimensions: list[str], doc: str) -> type[BaseModel]:
    """Return the judge's tool schema ``SotopiaEvaluation`` over ``dimensions``: a reasoning and a score each."""
    fields: dict[str, Any] = {}
    for name in dimensions:
        low, high = DIMENSIONS[name]
        fields[f"{name}_reasoning"] = (Reason, Field(description=f"Reasoning for {name}: {RUBRIC[name]}"))
        fields[name] = score_field(low, high)
    model = create_model("SotopiaEvaluation", __config__=ConfigDict(extra="forbid"), **fields)
    model.__doc__ = doc
    return model


SotopiaEvaluation: type[BaseModel] = evaluation_schema(
    list(DIMENSIONS), "SOTOPIA-EVAL: reasoning and an integer score in range for each of seven dimensions.")


class Judgement(BaseModel):
    """One agent's SOTOPIA-EVAL scores after repair; ``overall`` is the mean of the seven."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    believability: int | None = Field(default=None, ge=0, le=10)
    relationship: int | None = Field(default=None, ge=-5, le=5)
    knowledge: int | None = Field(default=None, ge=0, le=10)
    secret: int | None = Field(default=None, ge=-10, le=0)
    social_rules: int | None = Field(default=None, ge=-10, le=0)
    financial_and_material_benefits: int | None = Field(default=None, ge=-5, le=5)
    goal: int | None = Field(default=None, ge=0, le=10)
    reasoning: dict[str, str] = Field(default_factory=dict)
    repairs: list[str] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)
    error: str | None = None
    protocol: str | None = None  # the judge protocol that scored it: "sotopia" or "swm" (`nodes.judge`)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def overall(self) -> float | None:
        values = [getattr(self, d) for d in DIMENSIONS]
        if any(v is None for v in values):
            return None
        return round(sum(values) / len(values), 4)

    def scores(self) -> dict[str, int | None]:
        return {d: getattr(self, d) for d in DIMENSIONS}


_NUMBER_RE = re.compile(r"[-+−]?\d+(?:\.\d+)?")


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, dict):
        return _number(value.get("score"))
    if isinstance(value, str):
        match = _NUMBER_RE.search(value.replace("−", "-"))
        return float(match.group(0).replace("−", "-")) if match else None
    return None


def read_scores(args: dict[str, Any] | None, strict: bool = False
                ) -> tuple[dict[str, int], dict[str, str], list[str], list[str]]:
    """Read raw judge arguments: (scores, reasoning, repairs, missing dimensions).

    Accepts ``{"goal": 7, "goal_reasoning": "..."}`` and ``{"goal": {"score": 7, "reasoning": ...}}``.
    Leniently (a look-ahead's own score) non-integers are rounded and out-of-range scores clamped, each
    repair recorded; ``strict`` (the SOTOPIA-EVAL judge, as sotopia refuses such replies) counts a
    non-integer or out-of-range score as missing instead, with the reason in the repairs.
    """
    scores: dict[str, int] = {}
    reasons: dict[str, str] = {}
    repairs: list[str] = []
    missing: list[str] = []
    args = args or {}
    for name, (low, high) in DIMENSIONS.items():
        raw = args.get(name)
        reason = args.get(f"{name}_reasoning")
        if isinstance(raw, dict) and reason is None:
            reason = raw.get("reasoning")
        reasons[name] = str(reason or "")[:1000]
        number = _number(raw)
        if number is None:
            missing.append(name)
            continue
        if strict and (number != int(number) or not low <= number <= high):
            missing.append(name)
            repairs.append(f"{name}: {raw!r} refused (an integer in {low}..{high} is required)")
            continue
        score = int(round(number))
        if score != number:
            repairs.append(f"{name}: {raw!r} rounded to {score}")
        if score < low or score > high:
            clamped = min(max(score, low), high)
            repairs.append(f"{name}: {score} out of range {low}..{high}, clamped to {clamped}")
            score = clamped
        scores[name] = score
    return scores, reasons, repairs, missing


def raw_arguments(message: object) -> dict[str, Any] | None:
    """Return the tool-call arguments of a raw reply, even when they failed validation."""
    if message is None:
        return None
    for call in getattr(message, "tool_calls", None) or []:
        if isinstance(call.get("args"), dict):
            return dict(call["args"])
    for call in getattr(message, "invalid_tool_calls", None) or []:
        try:
            value = json.loads(call.get("args") or "")
        except (TypeError, ValueError):
            continue
        if isinstance(value, dict):
            return value
    content = getattr(message, "content", "")
    if isinstance(content, str) and "{" in content:
        try:
            value = json.loads(content[content.index("{"): content.rindex("}") + 1])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    return None


def missing_schema(dimensions: list[str]) -> type[BaseModel]:
    """Return a tool schema asking only for the given dimensions (the repair call)."""
    return evaluation_schema(dimensions, "The SOTOPIA-EVAL dimensions still missing: reasoning and an integer "
                                         "score in range.")


def rubric_text(dimensions: list[str] | None = None) -> str:
    """Render the rubric with exact ranges for the judge prompt."""
    names = dimensions or list(DIMENSIONS)
    return "\n".join(f"- {n} (integer {DIMENSIONS[n][0]}..{DIMENSIONS[n][1]}): {RUBRIC[n]}" for n in names)
