"""The hidden-role game interface: what a game defines, and what the code moderator does with it.

A game is one module with a `HiddenRoleGame` subclass, registered with `register_game`. The
moderator (`swm.games.moderator`), the game graph (``graphs/game.py``), the benchmark and the
self-play loop (`swm.games.play`) are written against this interface only, so a second
hidden-role game (Spyfall, Undercover, ...) is one new module and no change anywhere else
(``tests/test_games_interface.py`` plays a small one).

The moderator asks one seat at a time (`Request`): to ``speak`` (free text) or to ``choose`` a
target from the legal ``options`` (``allow_abstain`` adds ``none``). It checks the reply, and an
illegal or malformed one is replaced by the request's fallback (abstain, or silence) and counted
as a violation. Only a legal `Move` reaches `HiddenRoleGame.apply`, which returns the next state
and the `SocialStep` of what each agent observed: the privacy of the game is exactly what
`apply` writes into each agent's observation, since an agent's prompt is built from
`SocialWorld.perspective(agent)` and nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

import swm.games
from swm.errors import InputError
from swm.state import SocialStep

RequestKind = Literal["speak", "choose"]
DRAW = "draw"
DEFAULT_GAME = "werewolf"  # the game a graph input that names none plays


class Request(BaseModel):
    """What the moderator asks of one seat now."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    phase: str
    kind: RequestKind
    instruction: str  # the moderator's words to the agent, shown in its prompt
    options: list[str] = Field(default_factory=list)  # legal targets of a ``choose``
    allow_abstain: bool = False  # a ``choose`` may answer ``none`` legally (e.g. a day vote)
    with_message: bool = False  # a ``choose`` also carries a short message (e.g. to fellow werewolves)


class Move(BaseModel):
    """A seat's move as the game applies it (after the moderator's checks and fallbacks)."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    target: str | None = None  # None: no target (a speech, an abstention, a fallback)
    text: str = ""


class Outcome(BaseModel):
    """How a game ended: the winning side (or ``draw``), why, and each seat's reward."""

    model_config = ConfigDict(extra="forbid")

    winner: str
    reason: str
    round: int
    sides: dict[str, str]  # seat -> side
    roles: dict[str, str]  # seat -> role

    def won(self, seat: str) -> bool:
        return self.sides.get(seat) == self.winner

    def rewards(self, win: float = 1.0, loss: float = -1.0, draw: float = 0.0) -> dict[str, float]:
        """Return each seat's reward: ``win`` for the winning side, ``loss`` for the others, ``draw`` on a draw."""
        if self.winner == DRAW:
            return {seat: draw for seat in self.sides}
        return {seat: win if side == self.winner else loss for seat, side in self.sides.items()}

    def per_role(self) -> dict[str, dict[str, Any]]:
        """Return {seat: {"role", "side", "won", "reward"}} (the self-play RL issue's per-role outcome)."""
        rewards = self.rewards()
        return {seat: {"role": self.roles[seat], "side": side, "won": self.won(seat), "reward": rewards[seat]}
                for seat, side in self.sides.items()}


class GameState(BaseModel):
    """The state every hidden-role game keeps; a game subclasses it with its own fields.

    It is small and bounded by the number of seats (the graph checkpoints it at every move);
    what happened so far lives in the experience store as `SocialStep` rows.
    """

    model_config = ConfigDict(extra="forbid")

    game: str
    seed: int
    players: list[str]
    roles: dict[str, str]
    alive: list[str]
    phase: str
    round: int = 1
    options: dict[str, Any] = Field(default_factory=dict)
    outcome: Outcome | None = None

    @property
    def over(self) -> bool:
        return self.outcome is not None


class Applied(BaseModel):
    """What a legal move did: the new state, what each agent observed, and named events."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    state: GameState
    step: SocialStep
    events: dict[str, Any] = Field(default_factory=dict)  # e.g. {"killed": "Ava"}, {"eliminated": None}


class HiddenRoleGame(ABC):
    """A hidden-role game: dealing, the rules text, requests, legal moves, observations, outcome."""

    name: ClassVar[str]
    sides: ClassVar[tuple[str, ...]]
    min_players: ClassVar[int] = 3
    max_players: ClassVar[int] = 12
    state_type: ClassVar[type[GameState]] = GameState
    # As a task family (`swm.tasks.families.is_game`): the side whose win completes a task of the game (what
    # ``swm learn`` and self-play count as success; a draw or an unfinished game never completes), None: the
    # first side; and the seats a task deals at each curriculum level (a level not named: ``min_players``).
    completes_for: ClassVar[str | None] = None
    players_by_level: ClassVar[dict[str, int]] = {}

    def completing_side(self) -> str:
        """The side whose win completes a task of this game (`completes_for`, or the first of `sides`)."""
        return self.completes_for or self.sides[0]

    def players_at(self, level: str) -> int:
        """The seats a task of this game deals at ``level``."""
        return self.players_by_level.get(level, self.min_players)

    def signals(self, record: object) -> dict[str, Any]:
        """Count a finished game's per-role signals, beside win and draw, from the moderator's record (a
        `swm.games.records.GameRecord`; typed object, as records imports this module). Self-play keeps them in the
        rollout's verdict; a game that declares none has none (Werewolf's: `swm.games.signals`)."""
        return {}

    def pool_signals(self, games: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
        """Pool many games' `signals` into a self-play iteration's numbers, with intervals (None: no signals)."""
        return None

    @abstractmethod
    def deal(self, players: list[str], seed: int, options: dict[str, Any] | None = None) -> GameState:
        """Assign roles (a pure function of the arguments) and return the first state."""

    @abstractmethod
    def side_of(self, state: GameState, seat: str) -> str:
        """Return the side a seat plays for."""

    @abstractmethod
    def rules(self, state: GameState) -> str:
        """Return the public rules, shown to every seat."""

    @abstractmethod
    def briefing(self, state: GameState) -> SocialStep:
        """Return the setup step: each seat's observation is what it privately knows at the start."""

    @abstractmethod
    def request(self, state: GameState) -> Request | None:
        """Return who must act now and how, or None when the game is over."""

    @abstractmethod
    def apply(self, state: GameState, request: Request, move: Move) -> Applied:
        """Apply a legal move (or its fallback); check the win conditions whenever a phase ends."""

    def why_illegal(self, state: GameState, request: Request, target: str) -> str:
        """Name why a player that is not among the options cannot be chosen (a violation code)."""
        if target == request.agent:
            return "self_target"
        if target not in state.alive:
            return "dead_target"
        return "illegal_target"

    def load(self, data: dict[str, Any]) -> GameState:
        """Read a state back from its dump (the graph keeps ``state.model_dump()``)."""
        return self.state_type.model_validate(data)


GAMES: dict[str, HiddenRoleGame] = {}


def register_game(game: HiddenRoleGame) -> HiddenRoleGame:
    """Make a game available by name to the moderator, the graph, the benchmark and ``swm learn``."""
    GAMES[game.name] = game
    return game


def get_game(name: str) -> HiddenRoleGame:
    """Return a registered game by name; the shipped games (modules of `swm.games`) register on first use."""
    if name not in GAMES:
        _discover()
    if name not in GAMES:
        raise InputError(f"unknown game {name!r}", f"use one of {', '.join(sorted(GAMES))}")
    return GAMES[name]


def game_names() -> tuple[str, ...]:
    """Return every registered game's name (the shipped ones found first), sorted: the CLI's ``--game`` choices
    and the task families that are games."""
    _discover()
    return tuple(sorted(GAMES))


# the modules of this package that are no game: the interface, the moderator, records, signals, metrics, and the
# model-driven loop, store and graph state (LangChain, the store, LangGraph), which finding the games does not load
MACHINERY = frozenset({"base", "graph_state", "metrics", "moderator", "play", "records", "signals", "store"})


def _discover() -> None:
    """Import every game module of this package (each one not in `MACHINERY`), so a shipped game registers itself
    (as the CLI finds commands)."""
    for module in pkgutil.iter_modules(swm.games.__path__):
        if not module.name.startswith("_") and module.name not in MACHINERY:
            importlib.import_module(f"swm.games.{module.name}")
