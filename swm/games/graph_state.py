"""Graph state of a hidden-role game: small values that do not grow with the game.

``game_state`` is the game's own bounded state (`GameState.model_dump()`), ``request`` the seat
asked now, ``decision`` its latest reply; the moves themselves are rows in the experience store
(`swm.games.store`), so a checkpoint stays the same size from the first move to the last.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from typing_extensions import TypedDict

from swm.graph_state import Provenance, merge_dict
from swm.usage import CallStats, merge_usage

GamePolicy = Literal["plain", "random"]


class GameInput(TypedDict, total=False):
    """What the ``game`` graph takes (see `graphs.game`); every key optional."""

    game: str  # a registered game name (default werewolf)
    game_id: str
    seed: int  # names the deal
    players: list[str]
    n_players: int  # default 6
    options: dict[str, Any]  # the game's options (werewolf: werewolves, doctor, max_rounds)
    policies: dict[str, GamePolicy]  # side or seat -> policy (default plain)
    tested_side: str | None  # seats of this side use the "agent" model role, the others "partner"


class GameOutput(Provenance, total=False):
    """What the ``game`` graph returns: the outcome, each seat's result, and the run's cost."""

    game_id: str
    outcome: dict[str, Any] | None
    per_role: dict[str, dict[str, Any]]
    turn: int


class GameGraphState(TypedDict, total=False):
    # input
    game: str  # a registered game name (werewolf)
    game_id: str
    seed: int
    players: list[str]  # seat names; default the first n_players of swm.games.play.SEAT_NAMES
    n_players: int
    options: dict[str, Any]  # the game's options (werewolf: werewolves, doctor, max_rounds)
    policies: dict[str, GamePolicy]  # side or seat -> plain | random (default plain)
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
