"""The lifelong loop: synthesize → collect → convert → gate → update → evaluate → deploy, per cycle.

    START → synthesize ─(cycle 0: Send×(dev + test))→ evaluate → deploy
                       ─(cycle ≥ 1: Send×episodes)→ collect → convert → gate → update
                                                   ─(Send×(dev + test) not yet played)→ evaluate → deploy
    deploy → synthesize (next cycle) | report → END

Input: ``{"plan": {...}}`` (see `swm.lifelong.plan.LifelongPlan`; every key optional, unknown keys refused). Cycle 0
measures the initial policy on the dev and test splits of all levels (the baseline row of R);
cycle c trains on level ``levels[min(c-1, len-1)]``, evaluates its candidate on both splits,
deploys it if it holds up against the incumbent on dev, and writes the test rows of both
curves (deployed, candidate). Run it on a SQLite checkpointer: episodes fan out
with ``Send`` (bounded by the run config's ``max_concurrency``), each recorded once under a
deterministic id, so a killed run resumed on the same thread re-plays only unfinished episodes. With the
context's ``review=["deploy"]`` the deploy node waits for a person's ``Command(resume="approve" | "refuse")``
(`swm.review`).
"""

from __future__ import annotations

import sqlite3

from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy

from swm.context import LifelongContext
from swm.graph_state import checks_input
from swm.graphs import episode, game
from swm.lifelong.state import LifelongInput, LifelongOutput, LifelongState
from swm.nodes.convert import convert
from swm.nodes.gate import gate
from swm.nodes.lifelong import (
    Runner,
    after_synthesize,
    after_update,
    deploy_node,
    episode_player,
    report_node,
    synthesize_node,
)
from swm.nodes.update import update

# Two connections (checkpointer and experience store) write one SQLite file, and the checkpointer
# writes in the background while a node runs. sqlite-utils creates a table by reading the schema and
# then writing in one transaction; in WAL mode SQLite refuses that write at once ("database is
# locked", no busy wait) when the other connection committed in between. Every node here is
# idempotent (rows are keyed and written once; an episode that hits it is played again from its
# first turn under the same id), so the node is simply retried.
STORE_RETRY = RetryPolicy(max_attempts=4, retry_on=sqlite3.OperationalError)


def build(runner: Runner | None = None) -> StateGraph[LifelongState, LifelongContext, LifelongInput, LifelongOutput]:
    """Wire the loop; ``runner(job, ctx)`` plays each episode elsewhere (Ray workers) instead of in this process."""
    g = StateGraph(LifelongState, context_schema=LifelongContext, input_schema=LifelongInput,
                   output_schema=LifelongOutput)
    # Both Send targets play one episode through the episode graph (a game task through the game
    # graph), compiled once here with no checkpointer at any depth: an interrupted episode is
    # replayed whole under the same id, and the nested run never calls the outer saver (an async
    # one under `langgraph dev` would refuse the synchronous call from the node's thread).
    play = episode_player(episode.build(policy_checkpointer=False).compile(checkpointer=False),
                          game.build().compile(checkpointer=False), runner)
    g.add_node("synthesize", checks_input(LifelongInput)(synthesize_node), retry_policy=STORE_RETRY)
    # Send targets: they take an episode job, not the graph state.
    g.add_node("collect", play, retry_policy=STORE_RETRY)  # type: ignore[arg-type,call-overload]
    # convert and deploy route with a Command and have no static edge out: on a rerun they send a phase's
    # failed episodes again (`nodes.lifelong.resend`) *instead of* going on, never beside it (a static
    # edge would run gate, or the next cycle, in the super-step that replays the episodes they read)
    g.add_node("convert", convert, retry_policy=STORE_RETRY, destinations=("collect", "gate"))
    g.add_node("gate", gate, retry_policy=STORE_RETRY)
    g.add_node("update", update, retry_policy=STORE_RETRY)
    g.add_node("evaluate", play, retry_policy=STORE_RETRY)  # type: ignore[arg-type,call-overload]
    g.add_node("deploy", deploy_node, retry_policy=STORE_RETRY, destinations=("evaluate", "synthesize", "report"))
    g.add_node("report", report_node, retry_policy=STORE_RETRY)
    g.add_edge(START, "synthesize")
    g.add_conditional_edges("synthesize", after_synthesize, ["collect", "convert", "evaluate", "deploy"])
    g.add_edge("collect", "convert")
    g.add_edge("gate", "update")
    g.add_conditional_edges("update", after_update, ["evaluate", "deploy"])
    g.add_edge("evaluate", "deploy")
    g.add_edge("report", END)
    return g


graph = build().compile()
