"""Look-ahead: N candidate actions, each simulated k steps ahead, judged, best refined.

With N = ``EpisodeContext.lookahead_width`` and k = ``EpisodeContext.lookahead_depth``, one turn makes

    calls = N (sample) + N·k (simulate) + (N if N > 1 else 0) (score) + 1 (refine)

so N=1, k=1 is exactly Foresee-and-Act: sample → predict → refine, 3 calls, the same prompts in
the same order (with one candidate there is nothing to choose, so no future is scored). The
N samples, N simulations and N scores each run as parallel ``Send`` branches; a resumed run
re-executes only the branches that had not finished. Candidates after the first are asked for
a different approach, so they differ even at temperature 0. A future whose simulation fails
stops at that step (recorded); a candidate with no simulated step ranks last, and if the chosen
one has none, ``refine`` falls back to it without a call (recorded).
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Send

from swm.context import EpisodeContext
from swm.graph_state import checks_input
from swm.nodes.act import call_act
from swm.nodes.judge import score
from swm.nodes.predict import simulate
from swm.nodes.refine import choose, refine
from swm.social.graph_state import PolicyInput, PolicyOutput, PolicyState

MAX_WIDTH = 8
MAX_DEPTH = 5


def calls_per_turn(width: int, depth: int) -> int:
    """Return the LLM calls of one look-ahead turn when every reply fits (the formula above)."""
    return width + width * depth + (width if width > 1 else 0) + 1


def _width(runtime: Runtime[EpisodeContext]) -> int:
    return min(max(1, runtime.context.lookahead_width), MAX_WIDTH)


def _branch(state: PolicyState, index: int) -> dict[str, Any]:
    keys = ("scenario", "episode_id", "turn", "actor", "active", "tested_agent", "candidates", "futures")
    return {**{k: state[k] for k in keys if k in state}, "index": index}  # type: ignore[literal-required]


def fan_out_samples(state: PolicyState, runtime: Runtime[EpisodeContext]) -> list[Send]:
    return [Send("sample", _branch(state, i)) for i in range(_width(runtime))]


def sample_one(state: PolicyState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
    """Sample candidate ``index`` (one call)."""
    index = state.get("index", 0)
    width = _width(runtime)
    variation = "" if index == 0 else (
        f"\n(Candidate {index + 1} of {width}: propose a clearly different way to pursue your goal than "
        "your first instinct.)")
    out = call_act(runtime.context, state, "sample", variation=variation)
    return {"candidates": {str(index): {"action": out["action"].model_dump(), "error": out["fallback"]}},
            "usage": {"sample": out["stats"]}, "prompts": out["prompts"], "models": out["models"]}


def gather(state: PolicyState) -> dict[str, Any]:
    """Join the sampled candidates (no call)."""
    return {}


def fan_out_simulations(state: PolicyState) -> list[Send]:
    return [Send("simulate", _branch(state, int(k))) for k in sorted(state.get("candidates") or {}, key=int)]


def after_simulate(state: PolicyState, runtime: Runtime[EpisodeContext]) -> list[Send] | str:
    if _width(runtime) < 2:
        return "choose"
    return [Send("score", _branch(state, int(k))) for k in sorted(state.get("candidates") or {}, key=int)]


def build() -> StateGraph[PolicyState, EpisodeContext, PolicyInput, PolicyOutput]:
    g = StateGraph(PolicyState, context_schema=EpisodeContext, input_schema=PolicyInput, output_schema=PolicyOutput)
    g.add_node("sample", sample_one)
    g.add_node("gather", gather)
    g.add_node("simulate", simulate)
    g.add_node("settle", gather)
    g.add_node("score", score)
    g.add_node("choose", choose)
    g.add_node("refine", refine)
    g.add_conditional_edges(START, checks_input(PolicyInput)(fan_out_samples), ["sample"])
    g.add_edge("sample", "gather")
    g.add_conditional_edges("gather", fan_out_simulations, ["simulate"])
    g.add_edge("simulate", "settle")
    g.add_conditional_edges("settle", after_simulate, ["score", "choose"])
    g.add_edge("score", "choose")
    g.add_edge("choose", "refine")
    g.add_edge("refine", END)
    return g


graph = build().compile()
