"""Experience-store growth: file size and insert time per episode as episodes grow to 10,000.

Each synthetic episode is written the way the episode graph and the lifelong loop write one:
an ``episodes`` row at the start and again at the end, one ``turns`` row per turn (through
``swm.social.store`` when it is importable, else rows of the same shape), and one
``lifelong_episodes`` row with the whole record as JSON. At each size the suite reports the
insert time per episode of the latest batch, bytes per episode, and the time of the queries the
graphs make against these tables (one episode's turns; one cycle's episodes of a run), then adds
the index those cycle queries need and times them again.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swm.checkpoints import ExperienceStore
from swm.checkpoints.store import StoreRecords

TURNS = 10
EPISODES_PER_CYCLE = 25  # so the cycle query returns the same number of rows at every size
CYCLE_INDEX = ("lifelong_episodes", ["run_id", "cycle", "phase"])


@dataclass
class GrowthRow:
    episodes: int
    insert_ms: float  # per episode, over the latest batch
    kb_per_episode: float
    turns_query_ms: float
    cycle_query_ms: float


def _writers() -> tuple[Any, Any, str]:
    try:
        from swm.social.models import AgentAction, TurnRecord
        from swm.social.store import write_episode, write_turn
    except ImportError:
        def write_turn_rows(store: StoreRecords, row: dict[str, Any]) -> None:
            store.insert("turns", row, pk=("episode_id", "turn"), replace=True)

        def write_episode_rows(store: StoreRecords, row: dict[str, Any]) -> None:
            store.insert("episodes", {**row, "updated": time.time()}, pk="episode_id", replace=True)

        return write_turn_rows, write_episode_rows, "representative rows (swm.social.store not importable)"

    def write_turn_record(store: StoreRecords, row: dict[str, Any]) -> None:
        write_turn(store, TurnRecord(**{**row, "action": AgentAction(**row["action"])}))

    return write_turn_record, write_episode, "swm.social.store writers"


def _turn(episode_id: str, turn: int) -> dict[str, Any]:
    agent = "Alice" if turn % 2 == 0 else "Bob"
    step = {"timestep": str(turn), "scene": "A market stall; the price is still open.",
            "observations": {"Alice": "Bob offers 40 dollars.", "Bob": "none"}, "mental_states": {},
            "actions": {agent: "speak: I can do 45 if you take two."}, "dialogue": {}}
    return {"episode_id": episode_id, "turn": turn, "agent": agent, "policy": "foresee",
            "action": {"action_type": "speak", "argument": "I can do 45 if you take two.", "to": []},
            "prediction": json.dumps(step), "step": json.dumps(step), "calls": 3, "prompt_tokens": 900,
            "completion_tokens": 120, "seconds": 0.6, "prompts": {"act": "episode_act@v1"},
            "models": {"agent": "fake@http://127.0.0.1/v1"}}


def _episode(store: StoreRecords, index: int, write_turn: Any, write_episode: Any, runs: int) -> None:
    episode_id = f"ep-{index:06d}"
    run_id, cycle = f"run-{index % runs}", index // EPISODES_PER_CYCLE
    head = {"episode_id": episode_id, "scenario": {"id": f"s{index % 50}", "goal": "sell high"},
            "agents": ["Alice", "Bob"], "status": "running", "models": {"agent": "fake"}, "prompts": {}}
    write_episode(store, head)
    turns = [_turn(episode_id, t) for t in range(TURNS)]
    for row in turns:
        write_turn(store, row)
    write_episode(store, {**head, "status": "done", "judgements": {"Alice": {"goal": 7}}, "usage": {"calls": 30}})
    if store.count("lifelong_episodes", "episode_id = ?", [episode_id]) == 0:
        store.insert("lifelong_episodes", {
            "episode_id": episode_id, "run_id": run_id, "cycle": cycle, "phase": "collect", "task_id": f"t{index}",
            "family": "negotiation", "level": "easy", "seed": index, "seat": "all", "policy_version": "p0",
            "completion": 1, "passed": 1, "turns": TURNS, "record": {"turns": turns}, "created": time.time()},
            pk="episode_id", ignore=True)


def _time_queries(store: StoreRecords, n: int, runs: int, repeats: int = 10, rounds: int = 5) -> tuple[float, float]:
    """Return the best round's mean ms per query (rounds: other processes add noise at this scale)."""
    turns_ms = cycle_ms = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for r in range(repeats):
            list(store.rows("select * from turns where episode_id = ? order by turn", [f"ep-{(r * 7919) % n:06d}"]))
        turns_ms = min(turns_ms, (time.perf_counter() - start) * 1000 / repeats)
        start = time.perf_counter()
        for r in range(repeats):
            list(store.rows("select record from lifelong_episodes where run_id = ? and cycle = ? and phase = ? "
                            "order by episode_id", [f"run-{r % runs}", (n - 1) // EPISODES_PER_CYCLE, "collect"]))
        cycle_ms = min(cycle_ms, (time.perf_counter() - start) * 1000 / repeats)
    return turns_ms, cycle_ms


def measure(sizes: tuple[int, ...] = (100, 1000, 10_000),
            runs: int = 4) -> tuple[list[GrowthRow], str, tuple[float, float]]:
    """Grow one store to each size in turn; return rows, the writer used, and query times after indexing."""

    write_turn, write_episode, source = _writers()
    rows: list[GrowthRow] = []
    with tempfile.TemporaryDirectory(prefix="swm-store-") as tmp:
        path = Path(tmp) / "store.db"
        store = ExperienceStore(path)
        done = 0
        for size in sizes:
            batch_start = done
            start = time.perf_counter()
            while done < size:
                _episode(store, done, write_turn, write_episode, runs)
                done += 1
            per = (time.perf_counter() - start) * 1000 / max(1, done - batch_start)
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            kb = path.stat().st_size / 1024
            turns_ms, cycle_ms = _time_queries(store, done, runs)
            rows.append(GrowthRow(done, per, kb / done, turns_ms, cycle_ms))
        with store.lock:
            store.db[CYCLE_INDEX[0]].create_index(CYCLE_INDEX[1], if_not_exists=True)  # type: ignore[union-attr]
        indexed = _time_queries(store, done, runs)
        store.close()
    return rows, source, indexed


def format_rows(rows: list[GrowthRow], source: str, indexed: tuple[float, float]) -> list[str]:
    first = rows[0]
    lines = [f"Experience-store growth ({TURNS} turns per episode, {source}; target: linear size, flat insert)",
             f"  {'episodes':>9} {'insert/ep vs first':>19} {'KB/ep':>7} {'turns query':>12} {'cycle query':>12}"]
    for r in rows:
        turns, cycle = r.turns_query_ms / first.turns_query_ms, r.cycle_query_ms / first.cycle_query_ms
        lines.append(f"  {r.episodes:>9} {r.insert_ms / first.insert_ms:>18.2f}x {r.kb_per_episode:>7.1f} "
                     f"{turns:>11.2f}x {cycle:>11.2f}x   ({r.insert_ms:.2f} ms/ep)")
    last = rows[-1]
    was = last.cycle_query_ms / first.cycle_query_ms
    lines.append(f"  with an index on {CYCLE_INDEX[0]}({', '.join(CYCLE_INDEX[1])}): cycle query "
                 f"{indexed[1] / first.cycle_query_ms:.2f}x of the first size (was {was:.2f}x); "
                 f"turns query {indexed[0] / first.turns_query_ms:.2f}x")
    return lines
