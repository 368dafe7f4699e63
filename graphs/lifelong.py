"""The lifelong loop: synthesize → collect → convert → gate → update → evaluate → deploy, per cycle.

    START → synthesize ─(cycle 0: Send×held-out)→ evaluate → deploy
                       ─(cycle ≥ 1: Send×episodes)→ collect → convert → gate → update
                                                   ─(Send×held-out)→ evaluate → deploy
    deploy → synthesize (next cycle) | report → END

Input: ``{"plan": {...}}`` (see `swm.lifelong.state.DEFAULT_PLAN`; every key optional). Cycle 0
measures the initial policy on the held-out sets of all levels (the baseline row of R); cycle c
trains on level ``levels[min(c-1, len-1)]``. Run it on a SQLite checkpointer: episodes fan out
with ``Send`` (bounded by the run config's ``max_concurrency``), each recorded once under a
deterministic id, so a killed run resumed on the same thread re-plays only unfinished episodes.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from nodes.convert import convert
from nodes.gate import gate
from nodes.lifelong import (
    after_deploy,
    after_synthesize,
    after_update,
    collect,
    deploy_node,
    evaluate,
    report_node,
    synthesize_node,
)
from nodes.update import update
from swm.context import SWMContext
from swm.lifelong.state import LifelongState


def build() -> StateGraph:
    g = StateGraph(LifelongState, context_schema=SWMContext)
    g.add_node("synthesize", synthesize_node)
    g.add_node("collect", collect)
    g.add_node("convert", convert)
    g.add_node("gate", gate)
    g.add_node("update", update)
    g.add_node("evaluate", evaluate)
    g.add_node("deploy", deploy_node)
    g.add_node("report", report_node)
    g.add_edge(START, "synthesize")
    g.add_conditional_edges("synthesize", after_synthesize, ["collect", "convert", "evaluate", "deploy"])
    g.add_edge("collect", "convert")
    g.add_edge("convert", "gate")
    g.add_edge("gate", "update")
    g.add_conditional_edges("update", after_update, ["evaluate", "deploy"])
    g.add_edge("evaluate", "deploy")
    g.add_conditional_edges("deploy", after_deploy, ["synthesize", "report"])
    g.add_edge("report", END)
    return g


graph = build().compile()
