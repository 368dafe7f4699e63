"""Play a whole game in-process: the self-play and RL entry point, with no graph and no checkpoint.

``play_game("werewolf", decide, seed=3)`` deals, asks each requested seat through ``decide``
(one callable for every seat — self-play — or a mapping from seat or side to a callable — fixed
opponents), resolves every reply through the code moderator and returns a `GameRecord`: each
move with the exact prompt the seat saw, its violation, and the outcome with per-seat rewards
(`GameRecord.rewards`, `Outcome.per_role`). The checkpointed game graph (``graphs/game.py``)
runs the same moderator step by step; `model_decider` and `random_decider` are the policies both use.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel

from swm.games.base import GameState, HiddenRoleGame, Request, get_game
from swm.games.moderator import move_schema, observations_of, prompt_for, resolve
from swm.games.records import Decision, GameRecord, MoveRecord, record_move
from swm.llm import call_model
from swm.state import SocialWorld

SEAT_NAMES = ("Ava", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jade", "Kai", "Lena")
POLICIES = ("plain", "random")  # plain: the model decides (one call a move); random: the code baseline
MAX_MOVES = 1000  # a game that asks for more is a bug in the game, not a long game


@dataclass(frozen=True)
class Turn:
    """What a decider is given: the request, the seat's prompt (its perspective) and where the game is."""

    index: int
    request: Request
    prompt: str
    prompt_id: str
    state: GameState
    role: str
    side: str
    seen: tuple[str, ...] = ()  # the seat's perspective as its prompt lists it, one observation a line (in order)


Decider = Callable[[Turn], Decision]


def default_players(n: int) -> list[str]:
    if not 1 <= n <= len(SEAT_NAMES):
        raise ValueError(f"between 1 and {len(SEAT_NAMES)} default seats, got {n}")
    return list(SEAT_NAMES[:n])


def random_decision(request: Request, seed: int, index: int) -> Decision:
    """The code baseline: a uniformly random legal target (a fixed seed per game and move), a plain speech."""
    rng = random.Random(f"random-policy|{seed}|{index}")
    if request.kind == "speak":
        return Decision(text=f"I am {request.agent}. I have nothing certain to share yet.", policy="random")
    return Decision(target=rng.choice(request.options) if request.options else None, policy="random")


def random_decider(seed: int) -> Decider:
    return lambda turn: random_decision(turn.request, seed, turn.index)


def decide_with_model(model: BaseChatModel, request: Request, prompt: str, players: list[str],
                      prompt_id: str | None = None, spec: str | None = None) -> Decision:
    """Ask a chat model for its move (one call, a bounded schema); a reply that does not fit keeps its text."""
    reply = call_model(model, prompt, move_schema(tuple(players), request.kind, request.with_message))
    stats = reply.stats
    cost: dict[str, Any] = {"calls": stats["calls"], "prompt_tokens": stats["prompt_tokens"],
                            "completion_tokens": stats["completion_tokens"], "seconds": stats["seconds"],
                            "unknown_usage": stats["unknown_usage"], "prompt_id": prompt_id, "model": spec,
                            "policy": "plain"}
    if reply.value is None:
        raw = reply.raw.content if reply.raw is not None and isinstance(reply.raw.content, str) else ""
        return Decision(text=raw.strip()[:1000], error=reply.error or "no reply", **cost)
    return Decision(target=getattr(reply.value, "target", None), text=getattr(reply.value, "say", "") or "", **cost)


def model_decider(model: BaseChatModel, spec: str | None = None) -> Decider:
    """A decider that asks ``model`` (any LangChain chat model) for every move it is given."""
    return lambda turn: decide_with_model(model, turn.request, turn.prompt, turn.state.players,
                                          turn.prompt_id, spec)


def _decider_for(decide: Decider | Mapping[str, Decider], seat: str, side: str) -> Decider:
    if callable(decide):
        return decide
    found = decide.get(seat) or decide.get(side)
    if found is None:
        raise KeyError(f"no decider for seat {seat!r} or side {side!r}")
    return found


def play_game(game: str | HiddenRoleGame, decide: Decider | Mapping[str, Decider], *, seed: int = 0,
              players: list[str] | None = None, n_players: int = 6, options: dict[str, Any] | None = None,
              game_id: str = "") -> GameRecord:
    """Play one game to its end and return its record (see the module docstring)."""
    g = get_game(game) if isinstance(game, str) else game
    seats = list(players) if players else default_players(n_players)
    state = g.deal(seats, seed, options)
    record = GameRecord(game=g.name, game_id=game_id, seed=seed, players=seats, roles=dict(state.roles),
                        sides={p: g.side_of(state, p) for p in seats}, briefing=g.briefing(state))
    while (request := g.request(state)) is not None:
        if len(record.moves) >= MAX_MOVES:
            raise RuntimeError(f"{g.name} asked for more than {MAX_MOVES} moves")
        decider = _decider_for(decide, request.agent, g.side_of(state, request.agent))
        move, state = next_move(g, state, record.world(), request, decider, len(record.moves), game_id)
        record.moves.append(move)
    record.outcome = state.outcome
    return record


def next_move(game: HiddenRoleGame, state: GameState, world: SocialWorld, request: Request, decide: Decider,
              index: int, game_id: str = "") -> tuple[MoveRecord, GameState]:
    """Render the seat's prompt, get its decision, resolve and apply it; return the move row and the new state."""
    prompt, prompt_id = prompt_for(game, state, world, request)
    turn = Turn(index=index, request=request, prompt=prompt, prompt_id=prompt_id, state=state,
                role=state.roles[request.agent], side=game.side_of(state, request.agent),
                seen=tuple(observations_of(world, request.agent)))
    decision = decide(turn)
    resolution = resolve(game, state, request, decision.target, decision.text, decision.error)
    return record_move(game, state, request, decision, resolution, index, prompt, game_id), resolution.applied.state
