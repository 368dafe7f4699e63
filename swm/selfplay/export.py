"""Self-play's TRL hand-off: each seat's trace of every stored rollout, as JSONL that ``load_dataset`` reads as it is.

Layout (``swm selfplay --export DIR``; the same hand-off as ``swm learn``'s ``<out>/exports``)::

    DIR/
      README.md            dataset card: how to load it, the columns, the rollouts of each iteration
      train/iter<k>.jsonl  the seats of iteration k's training rollouts (sampled by checkpoint k)
      eval/iter<k>.jsonl   the seats of the held-out rollouts after update k (sampled by checkpoint k + 1)

A row is one seat of one rollout: its turns as TRL's conversational ``messages`` (each prompt the seat was
given as a user message, its reply as the assistant's), what the seat earned (``reward``, its return: the sum
of ``turn_rewards``) and where the rollout came from. ``load_dataset("DIR")`` reads ``train/`` as the train
split and ``eval/`` as the test split (``datasets`` reads a folder named ``eval`` so). Failed rollouts are
dropped from the batch, never scored, and left out here too; the card counts them. Every row has the same
columns (`COLUMNS`) with values of one type (no nulls, and no list that may be empty: a file whose lists are
all empty has no type for them and fails to load beside one that has; the verdict is JSON text, the seat's broken
rules one comma-separated string), so any subset of the files loads as one dataset. Token ids and log-probabilities
stay in the store's ``selfplay_rollouts`` table.

A run with nothing to export (no rollout stored, or every one failed) is refused in one line: a folder of
empty files would make ``load_dataset`` fail with a bare ``StopIteration``. Every line and the card pass
through `swm.credentials.redact_text`, like everything else swm writes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swm.checkpoints import open_store
from swm.checkpoints.store import StoreRecords
from swm.credentials import redact_text
from swm.errors import InputError
from swm.lifelong.update import export_rows
from swm.selfplay.store import ROLLOUTS, load_rollouts
from swm.training.trajectory import Rollout

PHASES = ("train", "eval")
COLUMNS = ("messages", "run_id", "phase", "iteration", "checkpoint", "rollout_id", "task_id", "family", "sample",
           "seat", "role", "reward", "outcome", "turn_rewards", "turns", "filtered", "completion", "violations",
           "verdict", "end_reason", "tokens", "sampler")


def seat_rows(rollout: Rollout, run_id: str, phase: str) -> list[dict[str, Any]]:
    """Return one row per seat that spoke in a finished rollout (`COLUMNS`, in order)."""
    verdict = rollout.verdict or {}
    rows = []
    for seat in rollout.seats:
        if not seat.turns:
            continue
        messages = [m for t in seat.turns for m in ({"role": "user", "content": t.prompt},
                                                   {"role": "assistant", "content": t.text})]
        rows.append({
            "messages": messages, "run_id": run_id, "phase": phase, "iteration": rollout.iteration,
            "checkpoint": rollout.iteration + 1 if phase == "eval" else rollout.iteration,
            "rollout_id": rollout.rollout_id, "task_id": rollout.task_id, "family": rollout.family,
            "sample": rollout.sample, "seat": seat.seat, "role": seat.role,
            "reward": float(sum(t.reward for t in seat.turns)), "outcome": float(seat.outcome),
            "turn_rewards": [float(t.reward) for t in seat.turns], "turns": [t.turn for t in seat.turns],
            "filtered": [t.filtered or "" for t in seat.turns], "completion": verdict.get("completion") is True,
            "violations": ",".join(seat.violations), "verdict": json.dumps(verdict, ensure_ascii=False, default=str),
            "end_reason": rollout.end_reason, "tokens": sum(len(t.token_ids) for t in seat.turns),
            "sampler": rollout.sampler})
    return rows


def redacted(row: dict[str, Any]) -> dict[str, Any]:
    """Return the row with every key swm knows hidden in its text (`swm.credentials.redact_text`)."""
    return dict(json.loads(redact_text(json.dumps(row, ensure_ascii=False))))


@dataclass(frozen=True)
class Written:
    """What one phase and iteration of a run came to: its rollouts, the failed ones, its rows and their file."""

    phase: str
    iteration: int
    rollouts: int
    failed: int
    rows: int
    file: str  # relative to the export folder; "" when no row was written

    @property
    def checkpoint(self) -> int:
        """The checkpoint that sampled these rollouts: k for iteration k's training, k + 1 after its update."""
        return self.iteration + 1 if self.phase == "eval" else self.iteration


def _cells(store: StoreRecords, run_id: str) -> list[tuple[str, int]]:
    if not store.has_table(ROLLOUTS):
        return []
    found = {(str(r["phase"]), int(r["iteration"])) for r in store.rows(
        f"select distinct phase, iteration from {ROLLOUTS} where run_id = ?", [run_id])}
    return sorted(found, key=lambda c: (PHASES.index(c[0]) if c[0] in PHASES else len(PHASES), c[1]))


def export_run(store: StoreRecords, run_id: str, folder: str | Path) -> list[Written]:
    """Write run ``run_id``'s seats (module docstring) to ``folder``; return what each phase and iteration wrote.

    Files of an earlier export to the same folder that this one did not write are removed, so the folder holds
    this run alone.
    """
    folder = Path(folder)
    table, written = [], []
    for phase, iteration in _cells(store, run_id):
        rollouts = load_rollouts(store, run_id, iteration, phase)
        rows = [row for r in rollouts if not r.failed for row in seat_rows(r, run_id, phase)]
        path = folder / phase / f"iter{iteration}.jsonl"
        if rows:
            export_rows([redacted(row) for row in rows], path)  # swm learn's writer: whole or not at all
            written.append(path)
        table.append(Written(phase, iteration, len(rollouts), sum(1 for r in rollouts if r.failed), len(rows),
                             f"{phase}/{path.name}" if rows else ""))
    if not written:
        stored = sum(c.rollouts for c in table)
        why = f"all {stored} of its rollouts failed" if stored else "no rollout of it is stored"
        raise InputError(f"nothing to export for self-play run {run_id!r}: {why}",
                         "check --db and --thread-id (the run's id), or let an iteration finish first")
    for phase in PHASES:
        for stale in (folder / phase).glob("iter*.jsonl"):
            if stale not in written:
                stale.unlink()
    plans = store.rows("select plan from selfplay_runs where run_id = ?", [run_id]) \
        if store.has_table("selfplay_runs") else []
    plan = next(iter(plans), {}).get("plan")
    recorded = json.loads(plan) if isinstance(plan, str) else {}
    (folder / "README.md").write_text(redact_text(dataset_card(run_id, table, recorded)), encoding="utf-8")
    return table


def export_from_db(db: str | Path, run_id: str, folder: str | Path) -> str:
    """Export run ``run_id`` from the store at ``db`` to ``folder``; return the line that says what was written."""
    store = open_store(db)
    try:
        table = export_run(store, run_id, folder)
    finally:
        store.close()
    rows = {phase: sum(c.rows for c in table if c.phase == phase) for phase in PHASES}
    failed = sum(c.failed for c in table)
    left = f", {failed} failed rollouts left out" if failed else ""
    return (f"export: {rows['train']} train and {rows['eval']} eval seat rows of {sum(c.rollouts for c in table)} "
            f"rollouts{left} -> {folder} (datasets.load_dataset({str(folder)!r}))")


def dataset_card(run_id: str, table: Sequence[Written], plan: dict[str, Any]) -> str:
    """Render the export's README.md: how to load it, the run's settings, each iteration's rollouts, the columns."""
    policy, advantage = plan.get("policy") or {}, plan.get("advantage") or {}
    what = plan.get("game") or f"{plan.get('family', '?')} ({plan.get('level', '?')})"
    settings = [f"`{k}` {v}" for k, v in (("base", policy.get("base")), ("estimator", advantage.get("estimator")),
                                          ("group size", plan.get("group_size")), ("max turns", plan.get("max_turns")),
                                          ("temperature", policy.get("temperature")),
                                          ("transcript", plan.get("transcript"))) if v is not None]
    rows = [f"| {c.phase} | {c.iteration} | {c.checkpoint} | {c.rollouts} | {c.failed} | {c.rows} | "
            f"{('`' + c.file + '`') if c.file else 'none (no file)'} |" for c in table]
    columns = ", ".join(f"`{c}`" for c in COLUMNS)
    return "\n".join([
        "---", "tags: [swm, trl, sft, self-play]", "---", "",
        f"# swm self-play rollouts: run `{run_id}`, {what}", "",
        "One row per seat of each finished rollout: the seat's turns as TRL's conversational `messages` (each prompt "
        "it was given as a user message, its reply as the assistant's) with what it earned. "
        "`load_dataset(\"<this folder>\")` reads `train/` as the train split and `eval/` (the held-out rollouts "
        "after each update) as the test split; "
        "`load_dataset(\"json\", data_files=\"<this folder>/train/iter*.jsonl\")` reads any subset. "
        "`trl sft --dataset_name <this folder>` trains on every seat's replies; keep the seats that earned a reward "
        "first (`ds.filter(lambda r: r[\"reward\"] > 0)`) for rejection-sampling SFT.", "",
        "Settings: " + (", ".join(settings) if settings else "not recorded") + ".", "",
        "| split | iteration | checkpoint that sampled it | rollouts | failed (left out) | rows | file |",
        "| --- | --- | --- | --- | --- | --- | --- |", *rows, "",
        f"Columns: {columns}. `reward` is the seat's return (the sum of `turn_rewards`, one per assistant message, "
        "at episode turns `turns`); `outcome` the task's or game's own score of the seat; `filtered` why the quality "
        "filter zeroed a turn (`\"\"`: it did not); `violations` the rules the seat broke, comma-separated "
        "(`\"\"`: none); `verdict` the checker's verdict as JSON text; `tokens` the seat's generated tokens. With "
        "`transcript` rerender each user message is the turn's whole prompt, the conversation so far included. "
        "Token ids and log-probabilities stay in the store's `selfplay_rollouts` table.", ""])
