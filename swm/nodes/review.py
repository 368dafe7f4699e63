"""The parse review node: a person keeps or corrects the parse before the ask graph answers (`swm.review`)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from swm.context import AskContext
from swm.graph_state import SocialWorldState
from swm.nodes.parse import NEEDS_PARSE, problems_of
from swm.review import PARSE_ANSWER, ParseRequest, ParseReview, ask_person
from swm.validation import validate_s3ap


def review_parse(state: SocialWorldState, runtime: Runtime[AskContext]) -> dict[str, Any]:
    """Stop for a person to keep or correct the parse (review point ``parse``); without it, pass on at once.

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
