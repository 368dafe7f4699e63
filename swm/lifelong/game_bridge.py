"""The bridge to the game graph: a game task becomes the game graph's input, a finished game a checked record.

A task of a game family (`swm.tasks.families.GAME_FAMILIES`) holds a deal in its truth: the seats,
the deal's seed and the game's options. `game_inputs` is the game graph's input for it (every seat
plays the model; outside self-play the learner's side is the ``agent`` role, the others
``partner``). `game_to_record` turns the stored `GameRecord` into an `EpisodeRecord`: one turn per
move, with the exact prompt the seat saw (its own perspective), the move's text (the named target
of a choice, or the speech) and a state key over (task, seat, prompt), so two samples of a deal
that reach the same prompt pair up in the action track. The verdict comes from `check_game`,
which replays the moves through the code moderator. Strategy notes (the memory update) are not
injected into game prompts.
"""

from __future__ import annotations

from typing import Any

from swm.games import GameRecord, get_game
from swm.lifelong.records import ActedTurn, EpisodeRecord, checked_record, digest
from swm.tasks.checkers import MALFORMED
from swm.tasks.families import Task


def game_inputs(task: Task, *, game_id: str, tested_agent: str | None = None) -> dict[str, Any]:
    """Return the game graph's input for a game task; ``tested_agent`` names the learner's seat outside self-play."""
    truth = task.truth
    game = get_game(truth["game"])
    tested_side = None
    if tested_agent is not None:
        dealt = game.deal(list(truth["players"]), int(truth["deal_seed"]), dict(truth.get("options") or {}))
        tested_side = game.side_of(dealt, tested_agent)
    return {"game": game.name, "game_id": game_id, "seed": int(truth["deal_seed"]), "players": list(truth["players"]),
            "options": dict(truth.get("options") or {}), "tested_side": tested_side}


def game_to_record(task: Task, game: GameRecord, **provenance: Any) -> EpisodeRecord:
    """Build the checked `EpisodeRecord` of a finished game (see the module docstring)."""
    turns = []
    for i, move in enumerate(game.moves):
        malformed = MALFORMED if move.violation == "malformed" else ""
        text = (move.proposed_target or "") if move.kind == "choose" else move.text
        turns.append(ActedTurn(index=i, agent=move.agent, action_type=f"{malformed}{move.kind}", text=text,
                                state_key=digest(task.task_id, move.agent, move.prompt), prompt=move.prompt))
    return checked_record(task, turns, **provenance)
