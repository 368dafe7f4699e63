"""The TRL hand-off: ``<out>/exports``, which ``load_dataset`` and ``trl <method> --dataset_name`` read as it is.

Layout (``<trainer>`` is the TRL command: ``sft`` for the sft and rs-sft updates, ``dpo``, ``kto`` for kto
and for ppo, whose rows are the samples it trained on with the checker's verdict as ``label``)::

    <out>/exports/
      README.md                 dataset card: how to load it, the columns, which cycles each policy trained on
      <trainer>/cycle<k>.jsonl  the rows first collected in cycle k, each once, with its ``cycle``

``load_dataset("<out>/exports")`` (or ``.../exports/<trainer>``) reads every cycle's rows; the
window policy ``p<c>`` trained on is cycles 1..c with replay, cycle c without, listed in the card
as the files to pass as ``data_files``. Adapters, plots and the report stay outside, so nothing
here but rows is read as data. Every row of a trainer has the same columns (`COLUMNS`) with
values of one type (no nulls), so any subset of the files loads as one dataset. The card holds
no ``configs`` block on purpose: ``datasets`` caches a local folder's YAML configs under a key
that ignores the files, so a second run's folder would load the first one's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swm.lifelong.update import export_rows

EXPORTS = "exports"
_META = ("family", "level", "track", "cycle", "task_id", "source")
_TOOLS = ("tool", "tools")
# every row's columns, in order: TRL's own, then metadata (TRL drops the columns it does not read)
COLUMNS: dict[str, tuple[str, ...]] = {
    "sft": ("messages", *_META, "episode_id", "turn", *_TOOLS),
    "dpo": ("prompt", "chosen", "rejected", *_META, "margin", "pair_id", "episode_id", "rejected_episode", *_TOOLS),
    "kto": ("prompt", "completion", "label", *_META, "margin", "pair_id", "episode_id", *_TOOLS),
}


def trainer_of(method: str) -> str:
    """Return the TRL trainer (and ``trl`` command) of an update method."""
    return {"rs-sft": "sft", "ppo": "kto"}.get(method, method)  # ppo's rows are KTO's: prompt, completion, label


def uniform(rows: Sequence[dict[str, Any]], trainer: str) -> list[dict[str, Any]]:
    """Return the rows with exactly the trainer's columns, in order; a missing or null column is a bug here."""
    columns = COLUMNS[trainer]
    out = []
    for row in rows:
        absent = [c for c in columns if row.get(c) is None]
        if absent:
            raise ValueError(f"{trainer} export row lacks {', '.join(absent)}: {sorted(row)}")
        out.append({c: row[c] for c in columns})
    return out


def cycle_file(out_dir: Path, method: str, cycle: int) -> Path:
    return Path(out_dir) / EXPORTS / trainer_of(method) / f"cycle{cycle}.jsonl"


def window_of(cycle: int, replay: bool) -> list[int]:
    """Return the cycles policy ``p<cycle>`` trains on."""
    return list(range(1, cycle + 1)) if replay else [cycle]


def write_exports(out_dir: Path, method: str, *, cycle: int, replay: bool, rows: Sequence[dict[str, Any]]) -> Path:
    """Write this cycle's rows (and any missing file of its window), then the card; return this cycle's file.

    ``rows`` are the window's training rows, each with its ``cycle``; an earlier cycle's file is
    written by that cycle and only rewritten when missing (an output folder changed on a rerun).
    """
    trainer = trainer_of(method)
    shaped = uniform(rows, trainer)
    window = window_of(cycle, replay)
    stray = sorted({r["cycle"] for r in shaped} - set(window))
    if stray:  # a row outside the window would be trained on but written nowhere
        raise ValueError(f"{trainer} rows of cycles {stray} are outside the window {window}")
    for k in window:
        path = cycle_file(out_dir, method, k)
        if k == cycle or not path.is_file():
            export_rows([r for r in shaped if r["cycle"] == k], path)
    root = Path(out_dir) / EXPORTS
    (root / "README.md").write_text(dataset_card(root, method, replay), encoding="utf-8")
    return cycle_file(out_dir, method, cycle)


def _rows_in(path: Path) -> int:
    with path.open(encoding="utf-8") as fh:
        return sum(1 for line in fh if line.strip())


def dataset_card(root: Path, method: str, replay: bool) -> str:
    """Render the exports' README.md from the files there: how to load them, the columns, each policy's window."""
    trainer = trainer_of(method)
    counts = {int(p.stem.removeprefix("cycle")): _rows_in(p) for p in (root / trainer).glob("cycle*.jsonl")}
    table = []
    for c in sorted(counts):
        window = [k for k in window_of(c, replay) if k in counts]
        files = ", ".join(f"`{trainer}/cycle{k}.jsonl`" for k in window)
        table.append(f"| {c} | p{c} | {counts[c]} | {', '.join(map(str, window))} | {sum(counts[k] for k in window)} "
                     f"| {files} |")
    columns = ", ".join(f"`{c}`" for c in COLUMNS[trainer])
    replayed = "on: policy p<c> trained on cycles 1..c" if replay else "off: policy p<c> trained on cycle c alone"
    return "\n".join([
        "---", f"tags: [swm, trl, {trainer}]", "---", "",
        f"# swm learn exports: `{method}` rows for TRL's `{trainer}` trainer", "",
        f"`load_dataset(\"<this folder>\")` and `trl {trainer} --dataset_name <this folder>` read every cycle's rows "
        f"(the folder `{trainer}/` alone reads the same). `{trainer}/cycle<k>.jsonl` holds the rows first collected "
        f"in cycle k, once each, with their `cycle` column. Replay is {replayed}; "
        "to load one policy's training set, pass its files as `load_dataset(\"json\", data_files=[...])`.", "",
        "| cycle | policy | new rows | trained on cycles | training rows | files |",
        "| --- | --- | --- | --- | --- | --- |", *table, "",
        f"Columns: {columns}. `tools` is TRL's tools column as JSON text: the act step's tool, so a tool-calling chat "
        "template renders the prompt the policy saw (`null` for decisions, sampled as text, and for game and "
        "perception rows); `tool` names the schema the completion follows.", ""])
