"""Graph state of a hidden-role game: small values that do not grow with the game.

``game_state`` is the game's own bounded state (`GameState.model_dump()`), ``request`` the seat
asked now, ``decision`` its latest reply; the moves themselves are rows in the experience store
(`swm.games.store`), so a checkpoint stays the same size from the first move to the last.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from swm.graph_state import merge_dict
from swm.usage import CallStats, merge_usage


class GameGraphState(TypedDict, total=False):
    # input
    game: str  # a registered game name (werewolf)
    game_id: str
    seed: int
    players: list[str]  # seat names; default the first n_players of swm.games.play.SEAT_NAMES
    n_players: int
    options: dict[str, Any]  # the game's options (werewolf: werewolves, doctor, max_rounds)
    policies: dict[str, str]  # side or seat -> plain | random (default plain)
    tested_side: str | None  # seats of this side use the "agent" model role, the others "partner"
    # moderation
    game_state: dict[str, Any]
    request: dict[str, Any] | None
    decision: dict[str, Any]
    turn: int
    done: bool
    usage_mark: CallStats
    # result
    outcome: dict[str, Any] | None
    per_role: dict[str, dict[str, Any]]
    # provenance and cost
    prompts: Annotated[dict[str, str], merge_dict]
    models: Annotated[dict[str, str], merge_dict]
    usage: Annotated[dict[str, CallStats], merge_usage]
