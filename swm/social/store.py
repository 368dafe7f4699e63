"""Episode rows in the experience store: ``episodes`` (one per episode) and ``turns`` (one per turn).

A turn row is written once, when the turn is committed, keyed by (episode_id, turn) so a node
re-run after a crash rewrites the same row instead of adding one. The episode's `SocialWorld`
is rebuilt from its turn rows (`load_world`), so the graph state never holds a growing list.
"""

from __future__ import annotations

import time
from typing import Any

from swm.checkpoints.store import StoreRecords
from swm.social.models import TurnRecord
from swm.state import SocialStep, SocialWorld


def write_turn(store: StoreRecords, record: TurnRecord) -> None:
    """Store one committed turn (idempotent on (episode_id, turn))."""
    row = record.model_dump(mode="json")
    row["created"] = time.time()
    store.insert("turns", row, pk=("episode_id", "turn"), replace=True)


def load_turns(store: StoreRecords, episode_id: str) -> list[TurnRecord]:
    """Return the committed turns of an episode, in order."""
    if not store.has_table("turns"):
        return []
    rows = store.rows("select * from turns where episode_id = ? order by turn", [episode_id])
    return [TurnRecord.from_row(r) for r in rows]


def load_steps(store: StoreRecords, episode_id: str) -> list[SocialStep]:
    """Return the episode's social steps, one per committed turn."""
    return [SocialStep.model_validate_json(t.step) for t in load_turns(store, episode_id)]


def load_world(store: StoreRecords, episode_id: str, agents: list[str]) -> SocialWorld:
    """Rebuild the episode's `SocialWorld` (its dialogue track included) from the turn rows."""
    return SocialWorld(agents=list(agents), steps=load_steps(store, episode_id))


def write_episode(store: StoreRecords, row: dict[str, Any]) -> None:
    """Insert or replace the episode row (written at the start and again when finished)."""
    store.insert("episodes", {**row, "updated": time.time()}, pk="episode_id", replace=True)


def get_episode(store: StoreRecords, episode_id: str) -> dict[str, Any] | None:
    """Return the episode row with its JSON columns decoded, or None."""
    row: dict[str, Any] | None = store.get("episodes", "episode_id", episode_id, JSON_COLUMNS)
    return row


JSON_COLUMNS = ("scenario", "agents", "policies", "judgements", "usage", "models", "prompts")
