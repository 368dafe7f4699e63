"""Game nodes: deal, ask the requested seat, let the code moderator commit its move, finish.

`act` is the only node that calls a model (one call a move; none for the ``random`` baseline);
the prompt is built from the seat's own perspective of the game's `SocialWorld`, rebuilt from the
experience store. `commit` resolves the reply through `swm.games.moderator` (violations and
fallbacks recorded), writes the move row, and asks the game who acts next. The game is any
registered `HiddenRoleGame`, named in the input; no node knows a game's rules.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from langgraph.runtime import Runtime

from swm.context import GameContext
from swm.errors import InputError
from swm.games.base import DEFAULT_GAME, GameState, HiddenRoleGame, Request, get_game
from swm.games.graph_state import GameGraphState
from swm.games.moderator import prompt_for, resolve
from swm.games.play import POLICIES, decide_with_model, default_players, random_decision
from swm.games.records import Decision, record_move
from swm.games.store import get_game_row, load_world, write_game, write_move
from swm.usage import CallStats


def _loaded(state: GameGraphState) -> tuple[HiddenRoleGame, GameState]:
    game = get_game(state["game"])
    return game, game.load(state["game_state"])


def policy_of(state: GameGraphState, seat: str, side: str) -> str:
    """Return a seat's policy: named for the seat, else for its side, else ``plain``."""
    policies = state.get("policies") or {}
    return policies.get(seat) or policies.get(side) or "plain"


def model_role_of(state: GameGraphState, side: str) -> str:
    """Return the model role of a side: ``agent`` for the tested side (every side in self-play), else ``partner``."""
    tested = state.get("tested_side")
    return "agent" if tested in (None, "", side) else "partner"


def setup(state: GameGraphState, runtime: Runtime[GameContext]) -> dict[str, Any]:
    """Check the input, deal the roles, write the game row with every seat's briefing."""
    ctx = runtime.context
    game = get_game(state.get("game") or DEFAULT_GAME)
    try:
        players = list(state.get("players") or default_players(int(state.get("n_players") or 6)))
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    seed = int(state.get("seed") or 0)
    dealt = game.deal(players, seed, dict(state.get("options") or {}))
    policies = dict(state.get("policies") or {})
    for key, policy in policies.items():
        if policy not in POLICIES:
            raise InputError(f"unknown game policy {policy!r} for {key}", f"use one of {', '.join(POLICIES)}")
        if key not in players and key not in game.sides:
            raise InputError(f"policy given for {key!r}, which is neither a seat nor a side",
                             f"seats: {', '.join(players)}; sides: {', '.join(game.sides)}")
    tested = state.get("tested_side")
    if tested and tested not in game.sides:
        raise InputError(f"unknown side {tested!r}", f"use one of {', '.join(game.sides)}")
    game_id = state.get("game_id") or f"{game.name}-{seed}-{uuid.uuid4().hex[:10]}"
    sides = {p: game.side_of(dealt, p) for p in players}
    write_game(ctx.experience_store(), {
        "game_id": game_id, "game": game.name, "seed": seed, "players": players, "roles": dict(dealt.roles),
        "sides": sides, "options": dict(dealt.options), "policies": policies, "tested_side": tested,
        "seat_roles": {p: model_role_of(state | {"tested_side": tested}, s) for p, s in sides.items()},
        "briefing": game.briefing(dealt).model_dump(mode="json"), "status": "running", "started": time.time()})
    request = game.request(dealt)
    return {"game": game.name, "game_id": game_id, "seed": seed, "players": players, "policies": policies,
            "tested_side": tested, "game_state": dealt.model_dump(mode="json"),
            "request": request.model_dump() if request else None, "turn": 0, "done": request is None,
            "decision": {}}


def route(state: GameGraphState) -> str:
    """Ask the next seat, or finish a game that is over."""
    return "finish" if state.get("done") else "act"


def act(state: GameGraphState, runtime: Runtime[GameContext]) -> dict[str, Any]:
    """Ask the requested seat for its move: one model call from its own perspective (none for ``random``)."""
    ctx = runtime.context
    game, current = _loaded(state)
    request = Request.model_validate(state["request"])
    side = game.side_of(current, request.agent)
    policy = policy_of(state, request.agent, side)
    world = load_world(ctx.experience_store(), state["game_id"])
    prompt, prompt_id = prompt_for(game, current, world, request, ctx.prompt_version("game_act"))
    out: dict[str, Any] = {"prompts": {"game_act": prompt_id}}
    if policy == "random":
        decision = random_decision(request, int(state.get("seed") or 0), state["turn"])
    else:
        role = model_role_of(state, side)
        spec = ctx.spec_for(role)
        decision = decide_with_model(ctx.model_for(role), request, prompt, current.players, prompt_id, spec)
        out["models"] = {role: spec}
    stats = CallStats(calls=decision.calls, prompt_tokens=decision.prompt_tokens,
                      completion_tokens=decision.completion_tokens, seconds=decision.seconds,
                      failures=int(decision.error is not None), unknown_usage=decision.unknown_usage)
    return {**out, "decision": {**decision.model_dump(), "prompt": prompt}, "usage": {"act": stats}}


def commit(state: GameGraphState, runtime: Runtime[GameContext]) -> dict[str, Any]:
    """Resolve the reply through the code moderator, store the move, and ask the game who acts next."""
    ctx = runtime.context
    game, current = _loaded(state)
    request = Request.model_validate(state["request"])
    raw = dict(state.get("decision") or {})
    prompt = str(raw.pop("prompt", ""))
    decision = Decision.model_validate(raw)
    resolution = resolve(game, current, request, decision.target, decision.text, decision.error)
    write_move(ctx.experience_store(), record_move(game, current, request, decision, resolution, state["turn"],
                                                   prompt, state["game_id"]))
    after = resolution.applied.state
    following = game.request(after)
    # per-move progress for `stream_mode="custom"` (Studio, the SDK)
    runtime.stream_writer({"event": "move", "game_id": state["game_id"], "turn": state["turn"],
                           "agent": request.agent, "phase": request.phase, "done": following is None})
    return {"game_state": after.model_dump(mode="json"), "request": following.model_dump() if following else None,
            "turn": state["turn"] + 1, "done": following is None, "decision": {}}


def finish(state: GameGraphState, runtime: Runtime[GameContext]) -> dict[str, Any]:
    """Write the outcome and the run's cost to the game row; return the outcome and per-seat results."""
    store = runtime.context.experience_store()
    _, final = _loaded(state)
    outcome = final.outcome
    row = get_game_row(store, state["game_id"]) or {}
    write_game(store, {**row, "status": "done", "outcome": outcome.model_dump() if outcome else None,
                       "winner": outcome.winner if outcome else None, "turns": state["turn"], "rounds": final.round,
                       "usage": dict(state.get("usage") or {}), "models": dict(state.get("models") or {}),
                       "prompts": dict(state.get("prompts") or {}), "finished": time.time()})
    return {"outcome": outcome.model_dump() if outcome else None,
            "per_role": outcome.per_role() if outcome else {}}
