"""A SOTOPIA-style social episode: agents act in turn, each through its own policy, then a judge.

    START → setup → (plain | foresee | lookahead) → commit → … → judge → finish → END

Public API (used by the lifelong loop and the benchmarks):

* ``build() -> StateGraph`` over `EpisodeState`; compile it with a checkpointer and invoke with
  ``context=SWMContext(...)`` (or its own `EpisodeContext`) and the input below. ``graph`` is the compiled
  graph for Studio.
* Input: ``scenario`` (a scenario id, shipped or SOTOPIA: `swm.scenarios.resolve`; ``Scenario.model_dump()``;
  or the reference that `swm.social.scenario_store.put_scenario` returns; ``setup`` stores an inline one and keeps only
  its reference), optional ``episode_id`` (default: scenario id + random suffix), ``policies``
  ({agent: "plain" | "foresee" | "lookahead"}, default plain), ``tested_agent`` (the seat whose
  model role is ``agent``; every other seat uses ``partner``; default the first), ``max_turns``
  (default 20), ``judge`` (default True).
* Output: ``episode_id``, ``world`` (the `SocialWorld`, one step per turn: observations of what
  reached each agent, the world model's predicted mental states, actions and dialogue),
  ``judgements`` ({agent: `Judgement` dump: seven scores, reasoning, repairs, rejected,
  overall}), ``end_reason``, ``turn`` (turns played), ``usage`` per node, ``prompts``, ``models``.
* Store (``ctx.experience_store()``): one ``turns`` row per turn (`TurnRecord`: action, intended
  action, prediction, candidates, fallback, the step, calls/tokens, prompt ids, models) and one
  ``episodes`` row (status running → done, judgements, usage, provenance). Read them with
  `swm.social.store.load_turns` / ``get_episode``; export with `swm.social.export`.
* Calls per turn: plain 1, foresee 3, lookahead N + N·k + (N if N > 1) + 1; the judge 1 per agent
  (+1 repair call for an agent whose reply lacked dimensions).

Each policy is a compiled subgraph over the same state (`PolicyInput` in, `PolicyOutput` out),
so a kill inside a turn resumes inside that turn's subgraph, and finished turns are never
replayed. The state stays constant-sized: turns live in the store, not in a growing list.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from langgraph.graph import END, START, StateGraph

from swm.context import ActContext, EpisodeContext
from swm.graph_state import checks_input
from swm.graphs import foresee_act, lookahead
from swm.nodes.act import act
from swm.nodes.env import commit, finish, route, setup
from swm.nodes.judge import judge_episode
from swm.social.graph_state import (
    RENAMED_STRATEGIES,
    EpisodeInput,
    EpisodeOutput,
    EpisodeState,
    PolicyInput,
    PolicyOutput,
    PolicyState,
)


def build_plain() -> StateGraph[PolicyState, EpisodeContext, PolicyInput, PolicyOutput]:
    """The plain policy: one ``act`` call."""
    g = StateGraph(PolicyState, context_schema=EpisodeContext, input_schema=PolicyInput, output_schema=PolicyOutput)
    g.add_node("act", act)
    g.add_edge(START, "act")
    g.add_edge("act", END)
    return g


# each a graph over its own context, every one of which an EpisodeContext is
PolicyGraph = StateGraph[PolicyState, ActContext, PolicyInput, PolicyOutput] | StateGraph[
    PolicyState, EpisodeContext, PolicyInput, PolicyOutput]
POLICY_BUILDERS: dict[str, Callable[[], PolicyGraph]] = {
    "plain": build_plain, "foresee": foresee_act.build, "lookahead": lookahead.build}
# a checkpoint from before a rename routes its strategy's earlier name to the strategy
ROUTES: dict[Hashable, str] = {"plain": "plain", "foresee": "foresee", "lookahead": "lookahead", "judge": "judge",
                              **{old: str(new) for old, new in RENAMED_STRATEGIES.items()}}


def build(policy_checkpointer: bool | None = None
          ) -> StateGraph[EpisodeState, EpisodeContext, EpisodeInput, EpisodeOutput]:
    """Wire the episode; ``policy_checkpointer=False`` keeps the policy subgraphs off any checkpointer.

    By default a policy subgraph checkpoints through its parent's saver, so a kill inside a turn
    resumes inside it. An episode played inside another graph's node without a checkpointer of
    its own (the lifelong loop's) passes False: its turns would otherwise write checkpoints into
    the outer thread that no resume ever reads, and call the outer saver synchronously from the
    node's thread, which an async-only saver (``langgraph dev``'s) refuses.
    """
    g = StateGraph(EpisodeState, context_schema=EpisodeContext, input_schema=EpisodeInput, output_schema=EpisodeOutput)
    g.add_node("setup", checks_input(EpisodeInput)(setup))
    for name, builder in POLICY_BUILDERS.items():
        g.add_node(name, builder().compile(checkpointer=policy_checkpointer))
        g.add_edge(name, "commit")
    g.add_node("commit", commit)
    g.add_node("judge", judge_episode)
    g.add_node("finish", finish)
    g.add_edge(START, "setup")
    g.add_conditional_edges("setup", route, ROUTES)
    g.add_conditional_edges("commit", route, ROUTES)
    g.add_edge("judge", "finish")
    g.add_edge("finish", END)
    return g


graph = build().compile()
