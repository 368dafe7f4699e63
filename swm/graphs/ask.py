"""Theory-of-mind QA: prepare → [parse ⇄ check] → [review] → answer, in modes vanilla, cot, s3ap, s3ap_only.

The parse steps run only in the S3AP modes and only for a story not already in the cache. ``review`` runs only
when the context names the ``parse`` review point (`swm.nodes.review`): a person keeps or corrects the parse
before the answer reads it.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from swm.context import AskContext
from swm.graph_state import AskInput, AskOutput, SocialWorldState, checks_input, new_graph
from swm.nodes.parse import after_check, after_prepare, check, parse, prepare
from swm.nodes.qa import answer
from swm.nodes.review import review_parse, to_review


def build() -> StateGraph[SocialWorldState, AskContext, AskInput, AskOutput]:
    g = new_graph(SocialWorldState, AskInput, AskOutput, context=AskContext)
    g.add_node("prepare", checks_input(AskInput)(prepare))
    g.add_node("parse", parse)
    g.add_node("check", check)
    g.add_node("review", review_parse)
    g.add_node("answer", answer)
    g.add_edge(START, "prepare")
    g.add_conditional_edges("prepare", to_review(after_prepare, "skip"),
                            {"parse": "parse", "skip": "answer", "review": "review"})
    g.add_edge("parse", "check")
    g.add_conditional_edges("check", to_review(after_check, "done"),
                            {"parse": "parse", "done": "answer", "review": "review"})
    g.add_edge("review", "answer")
    g.add_edge("answer", END)
    return g


graph = build().compile()
