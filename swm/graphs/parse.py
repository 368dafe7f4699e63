"""The S3AP parser graph: prepare → parse → check → (parse again with feedback | END)."""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from swm.context import ParseContext
from swm.graph_state import ParseInput, ParseOutput, SocialWorldState, checks_input, new_graph
from swm.nodes.parse import after_check, after_prepare, check, parse, prepare


def build() -> StateGraph[SocialWorldState, ParseContext, ParseInput, ParseOutput]:
    g = new_graph(SocialWorldState, ParseInput, ParseOutput, context=ParseContext)
    g.add_node("prepare", checks_input(ParseInput)(prepare))
    g.add_node("parse", parse)
    g.add_node("check", check)
    g.add_edge(START, "prepare")
    g.add_conditional_edges("prepare", after_prepare, {"parse": "parse", "skip": END})
    g.add_edge("parse", "check")
    g.add_conditional_edges("check", after_check, {"parse": "parse", "done": END})
    return g


graph = build().compile()
