"""The unit every theory-of-mind benchmark is loaded into: `TomItem`, and the benchmark registry."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# benchmark -> the parser's task-specific instructions (nodes/parse.py TASKS) and the scorer
BENCHMARKS: dict[str, dict[str, str]] = {
    "tomi": {"task": "tomi", "scorer": "location"},
    "paratomi": {"task": "tomi", "scorer": "location"},
    "hitom": {"task": "hitom", "scorer": "choice"},
    "mmtom": {"task": "mmtom", "scorer": "choice"},
    "fantom": {"task": "fantom", "scorer": "fantom"},
    "confaide": {"task": "confaide", "scorer": "confaide"},
}
# benchmarks drawn and scored by whole groups (FANToM's question sets, ConfAIde's scenarios)
GROUPED = ("fantom", "confaide")


@dataclass
class TomItem:
    """One question about one story, with everything a scorer needs.

    ``options`` maps a letter to its option text for multiple choice (``answer`` is then the
    gold option's text and ``answer_letter`` its letter). ``group`` ties the questions of one
    FANToM set together for its set-level "All" metric. ``kind`` names the scoring rule.
    """

    id: str
    story: str
    question: str
    answer: Any
    qtype: str
    benchmark: str
    kind: str = "location"  # location | choice | fantom_* | confaide_* (see swm.tom.scoring)
    options: dict[str, str] = field(default_factory=dict)
    answer_letter: str | None = None
    wrong_answer: Any = None
    group: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def task(self) -> str:
        return BENCHMARKS.get(self.benchmark, {"task": "generic"})["task"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
