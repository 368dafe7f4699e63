"""The code moderator: an agent's prompt from its perspective, its reply checked, fallbacks recorded.

Nothing here knows a particular game. `prompt_for` renders what the requested seat may know:
the public rules, its own perspective of the `SocialWorld` (the setup briefing and every
observation that reached it), and the moderator's request. `resolve` turns a reply into the move
the game applies: a target that is no player, not a legal option, or missing where one is
required, and a reply that did not fit the schema, become a recorded violation and the fallback
(abstain; a malformed speech keeps its text, else silence).
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model

from swm import prompts
from swm.games.base import Applied, GameState, HiddenRoleGame, Move, Request
from swm.state import SocialWorld, agent_key

NONE_TARGET = "none"
Speech = Annotated[str, StringConstraints(max_length=400)]
Message = Annotated[str, StringConstraints(max_length=300)]


class Resolution(BaseModel):
    """A reply as the moderator judged it: the applied move, any violation and its fallback."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    move: Move
    violation: str | None = None  # a code: malformed, no_such_player, dead_target, ...
    fallback: str | None = None  # what was done instead, in words
    applied: Applied


@cache
def move_schema(players: tuple[str, ...], kind: str, with_message: bool) -> type[BaseModel]:
    """Return the bounded tool schema of a reply: a target among every seat (or none), and/or text.

    The target enum lists every seat, not only the legal ones: grammar-constrained decoding then
    still lets a model pick a dead player or a teammate, and the moderator, not the grammar,
    judges legality (so the illegal-action rate measures the model, not the schema).
    """
    fields: dict[str, Any] = {}
    if kind == "choose":
        names: Any = Literal[(*players, NONE_TARGET)]  # type: ignore[valid-type]
        fields["target"] = (names, Field(description="The player you choose, exactly as named; none to abstain."))
        if with_message:
            fields["say"] = (Message, Field(description="A short message to your teammates."))
    else:
        fields["say"] = (Speech, Field(description="What you say to everyone, in one or two sentences."))
    model = create_model("GameMove", __config__=ConfigDict(extra="forbid"), **fields)
    model.__doc__ = "Your move in the game."
    return model


def observations_of(world: SocialWorld, agent: str) -> list[str]:
    """The agent's perspective (its memory), one observation per entry, in order."""
    return [entry.observation for entry in world.perspective(agent)]


def history_of(world: SocialWorld, agent: str) -> str:
    """Render the agent's perspective (its memory) as the prompt's history, one observation a line."""
    return lines_of(observations_of(world, agent))


def lines_of(observations: list[str] | tuple[str, ...]) -> str:
    """Render observations as a prompt's history, one a line."""
    return "\n".join(f"- {o}" for o in observations) or "- (nothing yet)"


def format_of(request: Request) -> str:
    """Tell the agent which fields its reply has."""
    if request.kind == "speak":
        return "Reply with the field `say`: what you say to everyone."
    none = " or none to abstain" if request.allow_abstain else ""
    text = f"Reply with the field `target`: one of {', '.join(request.options)}{none}."
    if request.with_message:
        text += " Add `say`: a short message to your teammates."
    return text


def prompt_for(game: HiddenRoleGame, state: GameState, world: SocialWorld, request: Request,
               version: str | None = None) -> tuple[str, str]:
    """Render the requested seat's prompt from its own perspective only; return (text, prompt id)."""
    prompt = prompts.load("game_act", version)
    text = prompt.render(agent=request.agent, game=game.name, rules=game.rules(state),
                         history=history_of(world, request.agent), instruction=request.instruction,
                         format_instructions=format_of(request))
    return text, prompt.id


def turn_message(request: Request, since: list[str] | tuple[str, ...], version: str | None = None) -> str:
    """The message a seat's append-only chat grows by at a later move: what it saw ``since`` its last, the request.

    Its first move's message is `prompt_for`'s whole prompt (rules, name, everything seen so far); the rules and
    what it saw before stay in its chat (`swm.training.transcript`).
    """
    return prompts.load("game_act_turn", version).render(history=lines_of(since), instruction=request.instruction,
                                                         format_instructions=format_of(request))


def resolve(game: HiddenRoleGame, state: GameState, request: Request, target: str | None, text: str,
            error: str | None = None) -> Resolution:
    """Judge one reply (``error`` set when it did not fit the schema), apply the move or its fallback."""
    violation: str | None = None
    fallback: str | None = None
    chosen: str | None = None
    say = " ".join((text or "").split())
    if error is not None:
        violation = "malformed"
        if request.kind == "speak" and say:
            fallback = "the reply did not fit the schema; its text was used as the speech"
        else:
            say = ""
            fallback = "the reply did not fit the schema; " + ("silence" if request.kind == "speak" else "abstained")
    elif request.kind == "choose":
        chosen, violation = _check_target(game, state, request, target)
        if violation is not None:
            fallback = f"illegal target {target!r} ({violation}); abstained"
    limit = 400 if request.kind == "speak" else 300
    say = say[:limit] if request.kind == "speak" or request.with_message else ""
    move = Move(agent=request.agent, target=chosen, text=say)
    return Resolution(move=move, violation=violation, fallback=fallback, applied=game.apply(state, request, move))


def _check_target(game: HiddenRoleGame, state: GameState, request: Request,
                  target: str | None) -> tuple[str | None, str | None]:
    """Return (the legal target or None, a violation code or None)."""
    if target is None or not target.strip() or target.strip().casefold() == NONE_TARGET:
        return None, None if request.allow_abstain else "missing_target"
    key = agent_key(target)
    seat = next((p for p in state.players if agent_key(p) == key), None)
    if seat is None:
        return None, "no_such_player"
    if seat in request.options:
        return seat, None
    return None, game.why_illegal(state, request, seat)
