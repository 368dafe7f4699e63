"""The frozen evaluation sets, two disjoint splits: *dev* chooses, *test* reports.

* ``test`` — ``swm/tasks/data/test.jsonl``, unchanged since the first version of the loop
  (generator split ``heldout``, seeds 0–3 per family and level). It fills the R matrix and is
  never used to choose anything, so a number read off it cannot be the result of a choice made
  on it.
* ``dev`` — ``swm/tasks/data/dev.jsonl`` (generator split ``dev``, seeds 0–3 per family and
  level). The deploy gate compares the incumbent and the candidate on it.

The splits are disjoint by construction (the split is part of the generator's seed string and
of the task id, so ``dev:…`` and ``heldout:…`` ids never meet, nor do they meet training's
``train:…``), and a test also checks that no two tasks of different splits have the same content.
The loop reads the files, never the generator, so a later change to the generator cannot move
the benchmark; a test checks both files still match. Regenerate (deliberately, as a new
benchmark version, bumping `HELDOUT_VERSION`) with ``python -m swm.tasks.splits``.

Episode cells can also be generated (``episodes="generated"``): the generator's own ``heldout`` and ``dev``
tasks of an episode level, as many a cell as asked (the frozen file's four are a generated cell's first
four), pinned by digest (`decision_digest`) in ``tests/test_episode_splits.py``; the ``starter`` level is
always generated. The frozen cells stay the default, for comparability.

Decision and two-turn tasks are generated, their names drawn by a name policy (``names``,
`swm.tasks.families.variant_for`): ``disjoint`` (the default: training from one pool, dev and test
from another) or ``shared`` (one pool for all, the splits before 2026-11-26). A shift (`SHIFTS`)
gives the test split's shifted cells: names from a pool never used elsewhere, or longer friend lists.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from swm.inputs import refuse_duplicate_ids
from swm.tasks.families import (
    DECISION,
    FAMILIES,
    LEVELS,
    SHIFT_FAMILIES,
    STARTER,
    Task,
    is_game,
    is_sampled,
    synthesize,
    variant_for,
)
from swm.tasks.levels import LEVEL_ROWS

PER_CELL = 4
DATA = Path(__file__).resolve().parent / "data"
HELDOUT_FILE = DATA / "test.jsonl"  # the test split (v1's single held-out set, unchanged)
DEV_FILE = DATA / "dev.jsonl"
# v1: one held-out set that both chose and reported; v2: that set is the test split, plus a dev split.
HELDOUT_VERSION = "heldout@v2"
SPLITS = ("dev", "test")
EPISODE_SOURCES = ("frozen", "generated")  # where a split's episode cells come from
_FILES = {"test": HELDOUT_FILE, "dev": DEV_FILE}
_GENERATOR_SPLIT = {"test": "heldout", "dev": "dev"}


def _check(split: str) -> None:
    if split not in _FILES:
        raise ValueError(f"unknown evaluation split {split!r}; splits are {', '.join(SPLITS)}")


def generate(split: str = "test", per_cell: int = PER_CELL) -> list[Task]:
    """Generate a split's tasks from the task generator (what its frozen file must hold)."""
    _check(split)
    return [synthesize(f, lvl, seed, split=_GENERATOR_SPLIT[split])
            for lvl in LEVELS for f in FAMILIES for seed in range(per_cell)]


@cache
def frozen(split: str = "test") -> tuple[Task, ...]:
    """Return a split's frozen tasks from its package file."""
    _check(split)
    lines = _FILES[split].read_text(encoding="utf-8").splitlines()
    tasks = [(n, Task.model_validate_json(line)) for n, line in enumerate(lines, 1) if line.strip()]
    refuse_duplicate_ids(((t.task_id, f"{_FILES[split]}:{n}") for n, t in tasks), "task")
    return tuple(t for _, t in tasks)


def split_tasks(split: str, levels: Sequence[str], families: Sequence[str] = FAMILIES,
                per_cell: int = 1, names: str = "disjoint", shift: str | None = None,
                episodes: str = "frozen") -> list[Task]:
    """Return the first ``per_cell`` tasks of a split for every family at each level.

    Episode levels read the frozen files, which hold `PER_CELL` tasks a cell (a larger
    ``per_cell`` gets those) unless ``episodes="generated"`` (the generator's split, as many as asked;
    the starter level always); decisions, two-turn tasks, games and a family registered after the shipped
    `FAMILIES` (which no frozen file holds) are generated, as many as asked, and
    decisions, two-turn, two-seat and multi-turn tasks are pinned by `decision_digest`.
    ``names`` is the name policy of those tasks (`swm.tasks.families.variant_for`). With a
    ``shift`` only the decision and two-turn cells of the families it applies to are returned.
    """
    if per_cell < 1:
        raise ValueError("per_cell must be at least 1")
    if episodes not in EPISODE_SOURCES:
        raise ValueError(f"unknown episode source {episodes!r}; sources are {', '.join(EPISODE_SOURCES)}")
    generated = (*LEVEL_ROWS, STARTER, *(LEVELS if episodes == "generated" else ()))
    out: list[Task] = []
    for level in levels:
        for family in families:
            if shift is not None and (not is_sampled(level) or family not in SHIFT_FAMILIES[shift]):
                continue
            if is_game(family) or family not in FAMILIES or level in generated:  # generated, not frozen
                where = _GENERATOR_SPLIT[split]
                variant = variant_for(level, where, names, shift)
                out.extend(synthesize(family, level, seed, split=where, variant=variant) for seed in range(per_cell))
                continue
            cell = [t for t in frozen(split) if t.level == level and t.family == family]
            out.extend(cell[:per_cell])
    return out


def decision_digest(split: str, family: str, n: int, level: str = DECISION, names: str = "disjoint",
                    shift: str | None = None) -> str:
    """Return the digest of a split's first ``n`` decision (two-turn, two-seat) tasks of a family (a test pins it)."""
    _check(split)
    where = _GENERATOR_SPLIT[split]
    variant = variant_for(level, where, names, shift)
    tasks = [synthesize(family, level, seed, split=where, variant=variant).model_dump(mode="json")
             for seed in range(n)]
    return hashlib.sha256(json.dumps([tasks], sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def heldout(levels: Sequence[str], families: Sequence[str] = FAMILIES, per_cell: int = 1) -> list[Task]:
    """Return the test split's first ``per_cell`` tasks of every family at each level."""
    return split_tasks("test", levels, families, per_cell)


def write(split: str) -> Path:
    """Write a split's frozen file from the generator (a new benchmark version)."""
    path = _FILES[split]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(t.model_dump(mode="json"), ensure_ascii=False) + "\n"
                            for t in generate(split)), encoding="utf-8")
    return path


if __name__ == "__main__":
    for name in SPLITS:
        print(write(name))
