"""The parse review node: a person keeps or corrects the parse before the ask graph answers (`swm.review`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime, get_runtime

from swm.context import AskContext
from swm.graph_state import SocialWorldState
from swm.nodes.parse import NEEDS_PARSE, problems_of
from swm.review import PARSE_ANSWER, ParseRequest, ParseReview, ask_person
from swm.validation import validate_s3ap


def to_review(route: Callable[[SocialWorldState], str], on: str) -> Callable[[SocialWorldState], str]:
    """Return ``route`` with its answer ``on`` (the way to the answer) sent to ``review`` instead, when the context
    names the ``parse`` review point and the mode reads a parse: without it the graph's path has no review step."""

    def routed(state: SocialWorldState) -> str:
        to = route(state)
        # no runtime where LangGraph routes outside a run (``update_state(..., as_node=...)``): no review then
        runtime = get_runtime(AskContext)
        reviewing = runtime is not None and runtime.context.reviews("parse")
        return "review" if to == on and reviewing and state.get("mode", "s3ap") in NEEDS_PARSE else to

    return routed


def review_parse(state: SocialWorldState, runtime: Runtime[AskContext]) -> dict[str, Any]:
    """Stop for a person to keep or correct the parse (review point ``parse``; `to_review` routes here).

    A corrected parse is checked again (`validate_s3ap`), so the output's ``report`` and ``parse_problems`` are
    the answer's own; the experience store's cache keeps the parser's parse.
    """
    if not runtime.context.reviews("parse") or state.get("mode", "s3ap") not in NEEDS_PARSE:
        return {}
    world, report = state.get("world"), state.get("report")
    request = ParseRequest(review="parse", narrative=state.get("narrative", ""), question=state.get("question", ""),
                           world=world.model_dump() if world is not None else None,
                           ok=world is not None and report is not None and report.ok,
                           problems=list(state.get("parse_problems") or []),
                           cached=bool(state.get("parse_cached")), answer=PARSE_ANSWER)
    answer = ask_person(request, ParseReview)
    if answer.world is None:
        return {"parse_review": "kept"}
    checked = validate_s3ap(answer.world.to_s3ap())
    return {"world": answer.world, "report": checked, "parse_problems": problems_of(checked),
            "parse_review": "corrected"}
