"""The one graph state every wiring reads and writes its part of.

Graph state carries ids and small typed values; bulk data (episodes, turns, pairs) lives in the
experience store. Keys written by parallel branches have reducers. Graphs that need more keys
subclass `SocialWorldState`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Annotated, Any, TypedDict

from langgraph.graph import StateGraph

from swm.context import SWMContext
from swm.state import SocialWorld, ValidationReport
from swm.usage import CallStats, merge_usage


def merge_dict(left: Mapping[str, Any] | None, right: Mapping[str, Any] | None) -> dict[str, Any]:
    """Reducer: later keys win."""
    return {**(left or {}), **(right or {})}


def story_hash(narrative: str) -> str:
    """Hash a narrative with its whitespace normalised, so re-wrapped text hits the parse cache."""
    return hashlib.sha256(" ".join(narrative.split()).encode()).hexdigest()


class SocialWorldState(TypedDict, total=False):
    """Keys of the parse and ask graphs; other wirings subclass it."""

    # input
    narrative: str
    question: str
    mode: str  # vanilla | cot | s3ap | s3ap_only
    task: str  # tomi | hitom | fantom | mmtom | confaide | generic (default: the context's)
    instruction: str  # a benchmark's own instruction before the task (ConfAIde's privacy prompt), unfenced
    # the parse
    story_hash: str
    world: SocialWorld | None
    report: ValidationReport | None
    attempts: int
    candidate: dict[str, Any] | None  # the latest raw S3AP reply, until `check` has read it
    candidate_error: str | None
    feedback: str
    parse_done: bool
    parse_cached: bool
    parse_problems: list[str]
    # the answer
    answer: str
    reasoning: str
    answer_error: str | None
    # provenance and cost
    prompts: Annotated[dict[str, str], merge_dict]
    models: Annotated[dict[str, str], merge_dict]
    usage: Annotated[dict[str, CallStats], merge_usage]


def new_graph(state: type[Any] = SocialWorldState) -> StateGraph[Any, SWMContext, Any, Any]:
    """Start a graph over ``state`` with `SWMContext` as its runtime context."""
    return StateGraph(state, context_schema=SWMContext)
