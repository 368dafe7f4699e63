"""What the learning benchmarks read back from a `swm learn` store: scored cells and how a table shows them.

A cell counts one policy's evaluation episodes of one phase (``test``, or ``shift`` for the shifted
test cells) by level, family and task variant (the name pool and list length its task id names:
`swm.tasks.families.Variant`). Beside the pass rate it keeps the completion rate (the checker's
goal reached, violations or not) and **correct among well-formed answers**: of the moves that had
the decision's form (one name, one slot, an ``ACCEPT`` or a ``COUNTER``; for a two-turn task, a
first move made and a decision of that form), how many were right. The pass rate alone cannot tell a
policy that learnt the skill from one that learnt the format; this ratio can. A cell whose checker
records no answer form (most families' episodes) shows "–".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swm.lifelong.metrics import Cell
from swm.stats import two_proportion_test, wilson_interval
from swm.tasks.families import parse_task_id


@dataclass(frozen=True)
class Scored:
    """One cell's episodes: how many, passed, completed, well-formed (None: no answer form) and right among those."""

    n: int = 0
    passed: int = 0
    completed: int = 0
    formed: int | None = None
    formed_passed: int = 0

    def add(self, passed: bool, completed: bool, formed: bool | None) -> Scored:
        return Scored(self.n + 1, self.passed + passed, self.completed + completed,
                      None if formed is None and self.formed is None else (self.formed or 0) + bool(formed),
                      self.formed_passed + (passed and bool(formed)))

    @property
    def cell(self) -> Cell:
        return Cell(self.passed, self.n)


def variant_of(task_id: str) -> str:
    """Return the variant a task id names ('' for the generator's defaults)."""
    return parse_task_id(task_id)[4].tag


def scored_cells(store: Any, thread: str, phase: str = "test") -> dict[tuple[str, str, str, str], Scored]:
    """Return a run's cells of one phase, keyed by (policy, level, family, variant)."""
    if not store.has_table("lifelong_episodes"):
        return {}
    out: dict[tuple[str, str, str, str], Scored] = {}
    rows = store.rows("select policy_version, task_id, level, family, passed, completion, record from "
                      "lifelong_episodes where run_id = ? and phase = ?", [thread, phase])
    for r in rows:
        record = json.loads(r["record"]) if isinstance(r["record"], str) else (r["record"] or {})
        formed = ((record.get("verdict") or {}).get("detail") or {}).get("formatted")
        key = (r["policy_version"], r["level"], r["family"], variant_of(r["task_id"]))
        out[key] = out.get(key, Scored()).add(bool(r["passed"]), bool(r["completion"]),
                                               None if formed is None else bool(formed))
    return out


def merge(cells: Iterable[Scored]) -> Scored:
    """Return the cells counted together."""
    total = Scored()
    for c in cells:
        formed = None if c.formed is None and total.formed is None else (total.formed or 0) + (c.formed or 0)
        total = Scored(total.n + c.n, total.passed + c.passed, total.completed + c.completed, formed,
                       total.formed_passed + c.formed_passed)
    return total


def learn_summary(path: Path) -> dict[str, Any]:
    """Return the JSON summary `swm learn --json` wrote to ``path`` ({} if none).

    The trainer logs its loss dicts on stdout before the summary, so the summary is read from its
    first line that opens a JSON object alone.
    """
    try:
        lines = path.read_text().splitlines()
        start = lines.index("{")
        found = json.loads("\n".join(lines[start:]))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def rate_text(successes: int, n: int) -> str:
    """Render ``successes/n = x% [low, high]`` with the Wilson 95% interval ('–' for no episodes)."""
    if not n:
        return "–"
    low, high = wilson_interval(successes, n)
    return f"{successes}/{n} = {100 * successes / n:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def formed_text(s: Scored) -> str:
    """Render correct among well-formed answers ('–' where the level has no answer form or none was well-formed)."""
    if s.formed is None:
        return "–"
    return rate_text(s.formed_passed, s.formed) if s.formed else "– (none well-formed)"


def versus(a: Cell | None, b: Cell | None) -> str:
    """Render b − a in points with the two-proportion test's p ('–' when either is missing)."""
    if a is None or b is None or not a.n or not b.n:
        return "–"
    _, p = two_proportion_test(a.successes, a.n, b.successes, b.n)
    return f"{100 * (b.rate - a.rate):+.1f} pts, p = {p:.2g}"
