"""What one seat decided, what the moderator made of it, and a whole game: rows for the store and for RL.

A `Decision` is a seat's raw reply (from a model, the random baseline, or a script); a
`MoveRecord` is that move as the moderator resolved and the game applied it, with the prompt the
seat saw, its cost, and the `SocialStep` of what everyone observed; a `GameRecord` is a finished
game: the deal, every move and the `Outcome` with per-seat rewards.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swm.games.base import GameState, HiddenRoleGame, Outcome, Request
from swm.games.moderator import Resolution
from swm.state import SocialStep, SocialWorld


class Cost(BaseModel):
    """What deciding one move cost, and with which prompt and model."""

    model_config = ConfigDict(extra="forbid")

    policy: str = "plain"
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    unknown_usage: int = 0  # 1 when the server sent no usable token counts for this move's call
    prompt_id: str | None = None
    model: str | None = None


class Decision(Cost):
    """A seat's reply before the moderator's checks (``error``: it did not fit the schema)."""

    target: str | None = None
    text: str = ""
    error: str | None = None


class MoveRecord(Cost):
    """One resolved move, as stored in the ``game_moves`` table."""

    game_id: str = ""
    turn: int
    round: int
    phase: str
    agent: str
    role: str
    side: str
    kind: str
    options: list[str] = Field(default_factory=list)
    allow_abstain: bool = False
    prompt: str = ""
    proposed_target: str | None = None
    proposed_text: str = ""
    target: str | None = None
    text: str = ""
    violation: str | None = None
    fallback: str | None = None
    events: dict[str, Any] = Field(default_factory=dict)
    step: str = ""  # the SocialStep of this move, as JSON text

    def social_step(self) -> SocialStep:
        return SocialStep.model_validate_json(self.step)


def record_move(game: HiddenRoleGame, state: GameState, request: Request, decision: Decision,
                resolution: Resolution, turn: int, prompt: str = "", game_id: str = "") -> MoveRecord:
    """Build the stored row of a move from the state it was made in and the moderator's resolution."""
    step = resolution.applied.step.model_copy(update={"timestep": str(turn)})
    cost = {name: getattr(decision, name) for name in Cost.model_fields}
    return MoveRecord(
        game_id=game_id, turn=turn, round=state.round, phase=request.phase, agent=request.agent,
        role=state.roles[request.agent], side=game.side_of(state, request.agent), kind=request.kind,
        options=list(request.options), allow_abstain=request.allow_abstain, prompt=prompt,
        proposed_target=decision.target, proposed_text=decision.text, target=resolution.move.target,
        text=resolution.move.text, violation=resolution.violation, fallback=resolution.fallback,
        events=dict(resolution.applied.events), step=step.model_dump_json(), **cost)


class GameRecord(BaseModel):
    """A finished game: the deal, the setup briefing, every move, and the outcome."""

    model_config = ConfigDict(extra="forbid")

    game: str
    game_id: str = ""
    seed: int
    players: list[str]
    roles: dict[str, str]
    sides: dict[str, str]
    briefing: SocialStep
    moves: list[MoveRecord] = Field(default_factory=list)
    outcome: Outcome | None = None

    def world(self) -> SocialWorld:
        """Return the game as a `SocialWorld`: the briefing, then one step per move."""
        return SocialWorld(agents=list(self.players), steps=[self.briefing, *(m.social_step() for m in self.moves)])

    def rewards(self, violation_penalty: float = 0.0) -> dict[str, float]:
        """Return each seat's reward: the outcome's ±1 (0 on a draw), minus a penalty per violation."""
        base = self.outcome.rewards() if self.outcome else {p: 0.0 for p in self.players}
        for move in self.moves:
            if move.violation:
                base[move.agent] -= violation_penalty
        return base
