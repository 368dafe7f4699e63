"""Concurrency: throughput of N concurrent items over N × serial, against raw ``asyncio.gather``.

swm's path is ``graph.batch(inputs, {"max_concurrency": N}, context=ctx)`` — LangGraph's thread
pool of ``graph.invoke``, each item a full graph run. The reference replays the very HTTP
requests one item made (recorded by the fake server) with ``httpx.AsyncClient`` under
``asyncio.gather``: the best any client can do against this server on this machine. Speedup =
N × (time of one item alone) / (time of N at once); ideal N.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx

from bench.cases import GraphCase
from bench.extra_graphs import SCRIPTS
from swm.context import SWMContext
from swm.testing import FakeOpenAIServer


@dataclass
class ConcurrencyRow:
    graph: str
    n: int
    swm_speedup: float
    raw_speedup: float
    peak_in_flight: int
    calls: int
    floor: int
    cpu_ms_per_item: float = 0.0  # this process's CPU time per item in the batch (all threads)
    raw_cpu_ms_per_item: float = 0.0

    @property
    def efficiency(self) -> float:
        return self.swm_speedup / self.n


async def _replay(base_url: str, bodies: list[dict[str, Any]], n: int) -> tuple[float, float]:
    limits = httpx.Limits(max_connections=max(n, 1) * 2, max_keepalive_connections=max(n, 1) * 2)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as client:
        async def item() -> None:
            for body in bodies:
                reply = await client.post("/chat/completions", json=body)
                reply.raise_for_status()
                reply.json()

        await item()  # warm the connection pool
        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(item() for _ in range(n)))
        return time.perf_counter() - start, time.process_time() - cpu


def measure(case: GraphCase, latency: float, sizes: tuple[int, ...], serial_runs: int = 3,
            repeats: int = 2) -> list[ConcurrencyRow]:
    """Measure swm's batch path and the raw reference for each N, side by side."""

    rows: list[ConcurrencyRow] = []
    with FakeOpenAIServer(latency=latency, scripts=SCRIPTS, process=True) as server:
        ctx = SWMContext(model=server.model_spec, **case.context)
        graph: Any = case.build().compile()
        counter = iter(range(10**9))

        def fresh(count: int) -> list[dict[str, Any]]:
            return [case.inputs(1000 + next(counter)) for _ in range(count)]

        graph.invoke(fresh(1)[0], context=ctx)  # warm-up
        server.reset()
        server.configure(record=True)
        serial = []
        for inp in fresh(serial_runs):
            start = time.perf_counter()
            graph.invoke(inp, context=ctx)
            serial.append(time.perf_counter() - start)
        bodies = server.bodies()
        per_item = len(bodies) // serial_runs
        one_item = bodies[:per_item]
        server.configure(record=False)
        t_serial = min(serial)
        raw_serial = min(asyncio.run(_replay(server.base_url, one_item, 1))[0] for _ in range(2))
        for n in sizes:
            elapsed = raw = float("inf")
            cpu = raw_cpu = 0.0
            for _ in range(repeats):  # best of: other processes on a 2-core machine add noise
                inputs = fresh(n)
                server.reset()
                start, cpu_start = time.perf_counter(), time.process_time()
                graph.batch(inputs, {"max_concurrency": n, "configurable": {"thread_id": uuid.uuid4().hex}},
                            context=ctx)
                if time.perf_counter() - start < elapsed:
                    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
                stats = server.stats()
                seconds, used = asyncio.run(_replay(server.base_url, one_item, n))
                if seconds < raw:
                    raw, raw_cpu = seconds, used
            rows.append(ConcurrencyRow(case.name, n, n * t_serial / elapsed, n * raw_serial / raw,
                                       stats["max_in_flight"], stats["requests"],
                                       sum(case.floor(i) for i in inputs), cpu * 1000 / n, raw_cpu * 1000 / n))
    return rows


def format_rows(rows: list[ConcurrencyRow], latency: float) -> list[str]:
    lines = [f"Concurrency: N concurrent items' throughput over N x serial (model latency {latency * 1000:.0f} ms; "
             "target >= 0.9 N)",
             f"  {'graph':<28} {'N':>3} {'swm batch':>10} {'raw gather':>11} {'swm/N':>6} {'swm/raw':>8} "
             f"{'in flight':>9} {'calls/floor':>12} {'CPU ms/item swm':>16} {'raw':>5}"]
    for r in rows:
        lines.append(f"  {r.graph:<28} {r.n:>3} {r.swm_speedup:>9.2f}x {r.raw_speedup:>10.2f}x {r.efficiency:>6.2f} "
                     f"{r.swm_speedup / r.raw_speedup:>8.2f} {r.peak_in_flight:>9} {r.calls:>5}/{r.floor:<6} "
                     f"{r.cpu_ms_per_item:>16.1f} {r.raw_cpu_ms_per_item:>5.1f}")
    return lines
