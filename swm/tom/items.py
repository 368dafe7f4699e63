"""The unit every theory-of-mind benchmark is loaded into (`TomItem`), and the benchmark table (`BENCHMARKS`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from swm.tables import Table


@dataclass(frozen=True)
class LoadOptions:
    """What `swm bench tom` passes every loader: ConfAIde's answers per prompt, FANToM's conversation input."""

    samples: int = 1
    context: str = "short"


@dataclass(frozen=True)
class Benchmark:
    """One theory-of-mind benchmark, a row of `BENCHMARKS` (`register_benchmark`): loader, parser task, rules.

    ``load(path, options)`` reads the benchmark's file (or folder, with ``folder``) into items; ``task`` is
    the parser's task-specific instructions (`swm.nodes.parse`, `swm.context.ParseTask`); ``headline`` is
    the scoring rule its numbers are reported by (name, one-line definition) and ``variants`` the named
    readings scored beside it (`swm.tom.rules`); the items' ``kind`` picks the scorer (`swm.tom.scoring`).
    ``grouped``: drawn and scored by whole groups (FANToM's question sets, ConfAIde's scenarios).

    What a report says about the data is the row's too, and a row must say it (no default): ``licence``
    (the data's terms), ``public`` (where and since when it is public: the report's contamination line, or
    None for data generated fresh, never public), ``source`` (the official code its headline rule follows:
    repository, file, commit; None for a rule of swm's own) and ``paper`` (the S3AP paper's Table 1 numbers
    for GPT-4o, CoT then S3AP; None where the paper has none).
    """

    name: str
    task: str
    load: Callable[[Path, LoadOptions], list[TomItem]]
    headline: tuple[str, str]
    variants: dict[str, str] = field(default_factory=dict)
    grouped: bool = False
    folder: bool = False
    licence: str = field(kw_only=True)
    public: str | None = field(kw_only=True)
    source: str | None = field(kw_only=True)
    paper: tuple[float, float] | None = field(kw_only=True)


# every benchmark `swm bench tom` runs (swm.tom.loaders registers the shipped ones): its CLI choices, the
# loader, the parser task and the rules are read from here
BENCHMARKS: Table[Benchmark] = Table("benchmark")


def register_benchmark(row: Benchmark) -> Benchmark:
    """Add a benchmark to `BENCHMARKS` (a different one of the same name is an error); return it."""
    return BENCHMARKS.register(row.name, row)


def benchmark_names() -> tuple[str, ...]:
    """Return the registered benchmarks' names, in registration order."""
    return BENCHMARKS.names()


SIM = "sim"  # `swm bench tom --benchmark sim`: simulated ToMi-world stories (swm.tom.simulator), not a table row


class Score(TypedDict):
    """One answer scored (`swm.tom.scoring.score_answer`): the headline verdict, and the named readings beside it."""

    exact: bool
    loose: bool
    strict: bool
    value: float  # what the item contributes to the headline
    chosen: str | None  # the option picked, the yes/no read, or the ConfAIde flags raised
    rule: str  # the headline rule's name (`swm.tom.rules.HEADLINE`)
    variants: dict[str, int]  # each named reading's verdict, 0 or 1


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
        row = BENCHMARKS.get(self.benchmark)
        return row.task if row is not None else "generic"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
