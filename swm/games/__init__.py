"""Hidden-role social games decided by code: the interface, Werewolf, the moderator, self-play and metrics.

Pure domain code (no graph, no node): `HiddenRoleGame` is the interface a game implements
(`swm.games.base`), `swm.games.werewolf` the shipped game, `swm.games.moderator` the code
moderator every game shares, `play_game` the in-process loop for self-play and RL,
`swm.games.metrics` the benchmark's numbers. The checkpointed graph is ``graphs/game.py``.
"""

from swm.games.base import (
    DRAW,
    GAMES,
    Applied,
    GameState,
    HiddenRoleGame,
    Move,
    Outcome,
    Request,
    game_names,
    get_game,
    register_game,
)
from swm.games.play import (
    POLICIES,
    Decider,
    Turn,
    decide_with_model,
    default_players,
    model_decider,
    play_game,
    random_decider,
)
from swm.games.records import Decision, GameRecord, MoveRecord

__all__ = [
    "DRAW",
    "GAMES",
    "POLICIES",
    "Applied",
    "Decider",
    "Decision",
    "GameRecord",
    "GameState",
    "HiddenRoleGame",
    "Move",
    "MoveRecord",
    "Outcome",
    "Request",
    "Turn",
    "decide_with_model",
    "default_players",
    "game_names",
    "get_game",
    "model_decider",
    "play_game",
    "random_decider",
    "register_game",
]
