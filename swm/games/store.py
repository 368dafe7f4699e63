"""Game rows in the experience store: ``games`` (one per game) and ``game_moves`` (one per move).

A move row is written once, when the move is committed, keyed by (game_id, turn), so a node
re-run after a crash rewrites the same row. The game's `SocialWorld` is rebuilt from the
briefing in its ``games`` row and its move rows, so the graph state never holds a growing list.
"""

from __future__ import annotations

import json
import time
from typing import Any

from swm.checkpoints.store import StoreRecords
from swm.games.records import GameRecord, MoveRecord
from swm.state import SocialStep, SocialWorld

JSON_COLUMNS = ("players", "roles", "sides", "options", "policies", "outcome", "usage", "models", "prompts",
                "briefing", "seat_roles")


def write_move(store: StoreRecords, record: MoveRecord) -> None:
    """Store one committed move (idempotent on (game_id, turn))."""
    row = record.model_dump(mode="json")
    row["created"] = time.time()
    store.insert("game_moves", row, pk=("game_id", "turn"), replace=True)


def load_moves(store: StoreRecords, game_id: str) -> list[MoveRecord]:
    """Return the committed moves of a game, in order."""
    if not store.has_table("game_moves"):
        return []
    rows = store.rows("select * from game_moves where game_id = ? order by turn", [game_id])
    out = []
    for row in rows:
        data = dict(row)
        data.pop("created", None)
        for key in ("options", "events"):
            if isinstance(data.get(key), str):
                data[key] = json.loads(data[key])
        data["allow_abstain"] = bool(data.get("allow_abstain"))
        out.append(MoveRecord.model_validate(data))
    return out


def write_game(store: StoreRecords, row: dict[str, Any]) -> None:
    """Insert or replace the game row (written at the start and again when finished)."""
    store.insert("games", {**row, "updated": time.time()}, pk="game_id", replace=True)


def get_game_row(store: StoreRecords, game_id: str) -> dict[str, Any] | None:
    """Return the game row with its JSON columns decoded, or None."""
    row: dict[str, Any] | None = store.get("games", "game_id", game_id, JSON_COLUMNS)
    return row


def load_world(store: StoreRecords, game_id: str) -> SocialWorld:
    """Rebuild a game's `SocialWorld`: its briefing step, then one step per committed move."""
    row = get_game_row(store, game_id)
    if row is None:
        raise KeyError(f"no game {game_id!r} in the store")
    steps = [SocialStep.model_validate(row["briefing"])] + [m.social_step() for m in load_moves(store, game_id)]
    return SocialWorld(agents=list(row["players"]), steps=steps)


def load_record(store: StoreRecords, game_id: str) -> GameRecord:
    """Rebuild the `GameRecord` of a stored game (finished or not: ``outcome`` is None while it runs)."""
    row = get_game_row(store, game_id)
    if row is None:
        raise KeyError(f"no game {game_id!r} in the store")
    return GameRecord(game=row["game"], game_id=game_id, seed=int(row["seed"]), players=list(row["players"]),
                      roles=dict(row["roles"]), sides=dict(row["sides"]),
                      briefing=SocialStep.model_validate(row["briefing"]), moves=load_moves(store, game_id),
                      outcome=row.get("outcome") or None)
