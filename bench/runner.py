"""Run the performance suite and print one table of side-by-side ratios.

Sections: ``overhead`` (with the calls-against-floor column), ``concurrency``, ``resume``,
``store``, ``embedded``. ``--quick`` shrinks every section for a CI-like smoke run; the defaults
finish in well under ten minutes on two cores.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import cases as bench_cases
from bench import concurrency, embedded, overhead, resume, scenario_growth, store_growth
from bench.results import machine

SECTIONS = ("overhead", "concurrency", "resume", "store", "embedded")


@dataclass
class Settings:
    latency: float = 0.2
    runs: int = 3
    sizes: tuple[int, ...] = (1, 4, 16, 32)
    resume_sizes: tuple[int, ...] = (10, 100, 1000)
    store_sizes: tuple[int, ...] = (100, 1000, 10_000)
    scenario_mb: float = 5.0  # the large scenario of the store section's checkpoint-growth case
    embedded_calls: int = 2
    repeats: int = 2  # best-of repetitions for the concurrency batches

    @classmethod
    def quick(cls) -> Settings:
        return cls(latency=0.05, runs=1, sizes=(1, 4, 16), resume_sizes=(10, 100), store_sizes=(100, 500),
                   scenario_mb=1.0, embedded_calls=1, repeats=1)


def run(sections: tuple[str, ...] = SECTIONS, settings: Settings | None = None,
        echo: Callable[[str], None] = print, json_path: Path | None = None) -> dict[str, Any]:
    """Run the chosen sections, printing each as it finishes; return every measurement."""
    settings = settings or Settings()
    started = time.perf_counter()
    results: dict[str, Any] = {"machine": machine(), "settings": asdict(settings), "gaps": []}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    results["load_average"] = load
    echo(f"swm performance suite — {results['machine']}; load average at start {load:.1f}")
    echo(f"fake model: loopback OpenAI-compatible server in its own process, {settings.latency * 1000:.0f} ms "
         "per call; every figure below is a ratio measured in this run")

    core = bench_cases.core_cases()
    extra, gaps = bench_cases.extra_cases()
    results["gaps"] = gaps
    for gap in gaps:
        echo(f"gap: {gap}")
    if "overhead" in sections:
        rows = overhead.measure(core + extra, settings.latency, settings.runs)
        _section(echo, overhead.format_rows(rows, settings.latency))
        results["overhead"] = [{**asdict(r), "overhead": r.overhead, "wall_over_usage": r.between_calls,
                                "calls_over_floor": r.floor_ratio} for r in rows]
    if "concurrency" in sections:
        rows_c = []
        targets = [c for c in core if c.name.startswith("ask (s3ap, new")]
        targets += [c for c in extra if c.name.startswith("episode (foresee")]
        for case in targets:
            rows_c += concurrency.measure(case, settings.latency, settings.sizes, repeats=settings.repeats)
        _section(echo, concurrency.format_rows(rows_c, settings.latency))
        results["concurrency"] = [{**asdict(r), "efficiency": r.efficiency} for r in rows_c]
    if "resume" in sections:
        rows_r = resume.measure(settings.resume_sizes)
        extra_rows = resume.measure_episode(settings.resume_sizes) if any(c.name.startswith("episode") for c in extra) \
            else []
        _section(echo, resume.format_rows(rows_r + extra_rows))
        results["resume"] = [asdict(r) for r in rows_r + extra_rows]
    if "store" in sections:
        rows_s, source, indexed = store_growth.measure(settings.store_sizes)
        _section(echo, store_growth.format_rows(rows_s, source, indexed))
        results["store"] = {"rows": [asdict(r) for r in rows_s], "source": source, "indexed": indexed}

        rows_g = scenario_growth.measure(int(settings.scenario_mb * scenario_growth.MB),
                                         pg=scenario_growth.pg_server())
        _section(echo, scenario_growth.format_rows(rows_g))
        results["store"]["scenario_growth"] = [{**asdict(r), "copies": r.copies} for r in rows_g]
    if "embedded" in sections:
        try:
            rows_e, model = embedded.measure(settings.embedded_calls)
        except Exception as exc:  # noqa: BLE001 - an absent embedded model is reported, not fatal
            _section(echo, [f"Embedded model: not measured ({type(exc).__name__}: {str(exc)[:200]})"])
            results["embedded"] = {"error": str(exc)}
        else:
            _section(echo, embedded.format_rows(rows_e, model))
            results["embedded"] = {"model": model, "rows": [{**asdict(r), "tokens_per_second": r.tokens_per_second}
                                                            for r in rows_e]}
    results["seconds"] = time.perf_counter() - started
    echo(f"\nsuite finished in {results['seconds']:.0f} s")
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2, default=str))
    return results


def _section(echo: Callable[[str], None], lines: list[str]) -> None:
    echo("")
    for line in lines:
        echo(line)
