"""A hidden-role game (Werewolf, or any registered `HiddenRoleGame`) moderated by code.

    START → setup → act → commit → act → … → finish → END

Public API (used by ``swm bench games``, ``swm learn`` and self-play):

* ``build() -> StateGraph`` over `GameGraphState`; compile it with a checkpointer and invoke with
  ``context=SWMContext(...)`` (or its own `GameContext`). ``graph`` is the compiled graph for Studio.
* Input: ``game`` (default ``werewolf``), ``game_id``, ``seed`` (names the deal), ``players`` or
  ``n_players`` (default 6), ``options`` (the game's), ``policies`` ({side or seat: "plain" |
  "random"}, default plain: the model plays every seat), ``tested_side`` (its seats use the
  ``agent`` model role, the others ``partner``; default none: every seat is ``agent``, self-play).
* Output: ``outcome`` (`Outcome` dump: winner, reason, round, sides, roles), ``per_role``
  ({seat: role, side, won, reward}), ``turn`` (moves played), ``usage``, ``prompts``, ``models``.
* Store: one ``games`` row (deal, briefing, status running → done, outcome, usage) and one
  ``game_moves`` row per move (`MoveRecord`: the prompt, the reply, the violation and fallback,
  the `SocialStep` of what each seat observed). Read them with `swm.games.store`.

One model call per move (the ``random`` baseline calls none). Each node is checkpointed, so a
game killed in the middle of a phase resumes at the move where it stopped and never asks a
finished move again. A second game is one new module registering a `HiddenRoleGame`: this graph
and its nodes do not change.
"""

from __future__ import annotations

from collections.abc import Hashable

from langgraph.graph import END, START, StateGraph

from swm.context import GameContext
from swm.games.graph_state import GameGraphState, GameInput, GameOutput
from swm.graph_state import checks_input
from swm.nodes.game import act, commit, finish, route, setup

ROUTES: dict[Hashable, str] = {"act": "act", "finish": "finish"}


def build() -> StateGraph[GameGraphState, GameContext, GameInput, GameOutput]:
    g = StateGraph(GameGraphState, context_schema=GameContext, input_schema=GameInput, output_schema=GameOutput)
    g.add_node("setup", checks_input(GameInput)(setup))
    g.add_node("act", act)
    g.add_node("commit", commit)
    g.add_node("finish", finish)
    g.add_edge(START, "setup")
    g.add_conditional_edges("setup", route, ROUTES)
    g.add_edge("act", "commit")
    g.add_conditional_edges("commit", route, ROUTES)
    g.add_edge("finish", END)
    return g


graph = build().compile()
