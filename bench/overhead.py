"""Overhead per graph and calls against the floor, from the same runs.

Overhead = wall time of ``graph.invoke`` / seconds the fake server actually slept for that run's
calls (server side, so client-side HTTP and JSON cost count as swm's overhead). It is also
given against the client-side model seconds the graph itself records in ``usage``, which
isolates what happens between calls (graph steps, checkpoints, store, prompts, validation).
Each graph runs without a checkpointer and with the SQLite one (``durability="sync"``, as the
CLI runs it; the experience store on the same file).
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cases import GraphCase
from bench.extra_graphs import SCRIPTS
from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.context import SWMContext
from swm.testing import FakeOpenAIServer
from swm.usage import total_usage


@dataclass
class OverheadRow:
    graph: str
    checkpointer: str
    runs: int
    wall: float
    slept: float
    client_seconds: float
    calls: int
    floor: int
    critical: int  # calls on the critical path, summed over runs
    note: str = ""
    error: str = ""
    per_run: list[float] = field(default_factory=list)  # each run's wall / model time

    @property
    def median_overhead(self) -> float:
        """The median run's ratio: one run slowed by another process does not move it."""
        return median(self.per_run) if self.per_run else self.overhead

    @property
    def model_time(self) -> float:
        """The model's share of the wall time: all slept time, or the critical path's when calls overlap."""
        if self.critical >= self.calls or not self.calls:
            return self.slept
        return self.slept / self.calls * self.critical

    @property
    def overhead(self) -> float:
        return self.wall / self.model_time if self.model_time else float("nan")

    @property
    def between_calls(self) -> float:
        return self.wall / self.client_seconds if self.client_seconds else float("nan")

    @property
    def floor_ratio(self) -> float:
        return self.calls / self.floor if self.floor else float("nan")


def _total_seconds(out: dict[str, Any]) -> float:
    return float(total_usage(out.get("usage"))["seconds"])


def measure_case(case: GraphCase, server: FakeOpenAIServer, *, runs: int, checkpointer: bool,
                 workdir: Path) -> OverheadRow:
    """Run a case ``runs`` times after one warm-up and sum wall time, slept time and calls."""

    with ExitStack() as stack:
        db = workdir / f"{uuid.uuid4().hex[:8]}.db"
        ctx = SWMContext(model=server.model_spec, **case.context)
        ctx.store = ExperienceStore(db if checkpointer else ":memory:")
        stack.callback(ctx.store.close)
        saver = stack.enter_context(sqlite_saver(db)) if checkpointer else None
        graph: Any = case.build().compile(checkpointer=saver)
        kwargs: dict[str, Any] = {"context": ctx}
        if checkpointer:
            kwargs["durability"] = case.durability

        def config() -> dict[str, Any]:
            return {"configurable": {"thread_id": uuid.uuid4().hex}}

        graph.invoke(case.inputs(0), config(), **kwargs)  # warm-up: imports, connections, caches
        wall = slept = client = 0.0
        calls = floor = critical = 0
        per_run: list[float] = []
        for i in range(1, runs + 1):
            inp = case.inputs(i)
            server.reset()
            start = time.perf_counter()
            out = graph.invoke(inp, config(), **kwargs)
            took = time.perf_counter() - start
            stats = server.stats()
            one = OverheadRow("", "", 1, took, stats["slept_total"], 0.0, stats["requests"], case.floor(inp),
                              case.critical_calls(inp))
            per_run.append(one.overhead)
            wall += took
            slept += stats["slept_total"]
            calls += stats["requests"]
            client += _total_seconds(out)
            floor += case.floor(inp)
            critical += case.critical_calls(inp)
    label = f"sqlite/{case.durability}" if checkpointer else "none"
    return OverheadRow(case.name, label, runs, wall, slept, client, calls, floor,
                       critical, case.note, per_run=per_run)


def measure(cases: list[GraphCase], latency: float, runs: int) -> list[OverheadRow]:
    """Measure every case without and with the SQLite checkpointer, side by side."""

    rows: list[OverheadRow] = []
    with tempfile.TemporaryDirectory(prefix="swm-bench-") as tmp, \
            FakeOpenAIServer(latency=latency, scripts=SCRIPTS, process=True) as server:
        for case in cases:
            for checkpointer in (False, True):
                try:
                    rows.append(measure_case(case, server, runs=runs, checkpointer=checkpointer, workdir=Path(tmp)))
                except Exception as exc:  # noqa: BLE001 - a failing graph is a row of the table, not the end of it
                    label = f"sqlite/{case.durability}" if checkpointer else "none"
                    rows.append(OverheadRow(case.name, label, 0, 0.0, 0.0, 0.0, 0, 0, 0, case.note,
                                            error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"))
    return rows


def format_rows(rows: list[OverheadRow], latency: float) -> list[str]:
    lines = [f"Overhead per graph (model latency {latency * 1000:.0f} ms; target <= 1.01) and calls against "
             "the floor (target 1.00)",
             "  (wall/model: median run's wall time / model time — all calls' latency, or the critical path's "
             "where calls overlap;",
             "   wall/usage: total wall / the client-side call seconds the graph records in `usage`)",
             f"  {'graph':<28} {'checkpointer':<12} {'runs':>4} {'wall/model':>10} {'wall/usage':>10} "
             f"{'ms/run over':>11} {'calls/floor':>14}"]
    for r in rows:
        if r.error:
            lines.append(f"  {r.graph:<28} {r.checkpointer:<12} FAILED: {r.error}")
            continue
        extra = (r.median_overhead - 1) * r.model_time * 1000 / r.runs  # the median run's ms over the model
        lines.append(f"  {r.graph:<28} {r.checkpointer:<12} {r.runs:>4} {r.median_overhead:>10.3f} "
                     f"{r.between_calls:>10.3f} {extra:>11.1f} {r.calls:>5}/{r.floor:<5}={r.floor_ratio:.2f}")
    return lines


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
