"""Hidden-role social games decided by code: the interface, Werewolf, the moderator, self-play and metrics.

Pure domain code (no graph, no node): `HiddenRoleGame` is the interface a game implements
(`swm.games.base`), `swm.games.werewolf` the shipped game, `swm.games.moderator` the code
moderator every game shares, `play_game` the in-process loop for self-play and RL,
`swm.games.metrics` the benchmark's numbers. The checkpointed graph is ``graphs/game.py``.

The names below are imported on first use (PEP 562), so a module that reads one table (`swm.games.base`'s
`GAMES`) does not load the model-driven loop (`swm.games.play`: LangChain, the model clients) with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swm.lazy import lazy_exports

if TYPE_CHECKING:
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

# public name -> the module that defines it
_HOMES = {**dict.fromkeys(["DRAW", "GAMES", "Applied", "GameState", "HiddenRoleGame", "Move", "Outcome", "Request",
                           "game_names", "get_game", "register_game"], "swm.games.base"),
          **dict.fromkeys(["POLICIES", "Decider", "Turn", "decide_with_model", "default_players", "model_decider",
                           "play_game", "random_decider"], "swm.games.play"),
          **dict.fromkeys(["Decision", "GameRecord", "MoveRecord"], "swm.games.records")}

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


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
