"""The frozen held-out sets: tasks per family and level, generated once and never trained on.

Held-out tasks come from the ``heldout`` split of the generator (a seed space disjoint from
training's by construction: the split is part of the generator's seed string and of the task
id) and are frozen in ``swm/data/lifelong_heldout.jsonl``. The loop reads the file, never the
generator, so a later change to the generator cannot move the benchmark; a test checks the file
still matches and that no held-out task equals a training task. Regenerate (deliberately, as a
new benchmark version) with ``python -m swm.lifelong.heldout``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from swm.lifelong.tasks import FAMILIES, LEVELS, Task, synthesize

PER_CELL = 4
HELDOUT_FILE = Path(__file__).resolve().parents[1] / "data" / "lifelong_heldout.jsonl"


def generate(per_cell: int = PER_CELL) -> list[Task]:
    return [synthesize(f, lvl, seed, split="heldout") for lvl in LEVELS for f in FAMILIES for seed in range(per_cell)]


@cache
def frozen() -> tuple[Task, ...]:
    """Return the frozen held-out tasks from the package file."""
    lines = HELDOUT_FILE.read_text(encoding="utf-8").splitlines()
    return tuple(Task.model_validate_json(line) for line in lines if line.strip())


def heldout(levels: Sequence[str], families: Sequence[str] = FAMILIES, per_cell: int = 1) -> list[Task]:
    """Return the first ``per_cell`` frozen tasks of every family at each level."""
    if not 1 <= per_cell <= PER_CELL:
        raise ValueError(f"per_cell must be between 1 and {PER_CELL}")
    out: list[Task] = []
    for level in levels:
        for family in families:
            cell = [t for t in frozen() if t.level == level and t.family == family]
            out.extend(cell[:per_cell])
    return out


def write(path: Path = HELDOUT_FILE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(t.model_dump(mode="json"), ensure_ascii=False) + "\n" for t in generate()),
                    encoding="utf-8")
    return path


if __name__ == "__main__":
    print(write())
