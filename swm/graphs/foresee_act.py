"""Foresee-and-Act (paper §5, Figure 6): ``sample`` → ``predict`` → ``refine``, 3 calls per turn.

A policy subgraph over the episode's state: it reads `PolicyInput` (scenario, episode id, turn,
actor) and returns a ``decision``. ``sample`` is the agent's intended action, ``predict`` the world
model's foresight of the others' mental states and reactions and the next state, ``refine`` the
agent's refined action (appendix A.4.3's prompt). A ``predict`` reply that does not fit makes
``refine`` fall back to the intended action without a call (2 calls that turn), recorded.
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from swm.context import ActContext
from swm.graph_state import checks_input
from swm.nodes.act import sample
from swm.nodes.predict import predict
from swm.nodes.refine import refine
from swm.social.graph_state import PolicyInput, PolicyOutput, PolicyState


def build() -> StateGraph[PolicyState, ActContext, PolicyInput, PolicyOutput]:
    g = StateGraph(PolicyState, context_schema=ActContext, input_schema=PolicyInput, output_schema=PolicyOutput)
    g.add_node("sample", checks_input(PolicyInput)(sample))
    g.add_node("predict", predict)
    g.add_node("refine", refine)
    g.add_edge(START, "sample")
    g.add_edge("sample", "predict")
    g.add_edge("predict", "refine")
    g.add_edge("refine", END)
    return g


graph = build().compile()
