"""The registry of graphs the suite measures: how to build each, its i-th input and its call floor.

A case's floor is the minimal number of model calls its algorithm needs for one run on that
input (S3AP ask: one parse per story not yet cached plus one QA call; parse: one). Graphs other
engineers build (foresee_act, lookahead, episode, lifelong) join when their modules exist; a
missing one is reported as a gap, never silently skipped.
"""

from __future__ import annotations

import importlib
from typing import Any

from bench import extra_graphs
from bench.graph_case import GraphCase, NotMeasurable
from swm.graphs import ask, parse

__all__ = ["NAMES", "GraphCase", "NotMeasurable", "core_cases", "extra_cases", "story"]

NAMES = ("Sally", "Anne", "Max", "Lena", "Omar", "Priya", "Tom", "Zoe")


def story(i: int) -> str:
    """Return the i-th distinct two-agent false-belief story (distinct text, so no cache hits)."""
    a, b = NAMES[i % len(NAMES)], NAMES[(i + 3) % len(NAMES)]
    return (f"{a} and {b} are in the kitchen. {a} puts the apple in the green basket and leaves. "
            f"While {a} is away, {b} moves the apple to the red box. {a} comes back. (story {i})")


def _module(name: str) -> Any | None:
    try:
        return importlib.import_module(f"swm.graphs.{name}")
    except ModuleNotFoundError as exc:
        if exc.name in (f"swm.graphs.{name}",):
            return None
        raise


def core_cases() -> list[GraphCase]:
    """Return the parse and ask cases (the core's graphs)."""

    question = "Where will {a} look for the apple?"
    return [
        GraphCase("parse", parse.build, lambda i: {"narrative": story(i)}, lambda inp: 1,
                  note="1 parse call when the first parse is valid"),
        GraphCase("ask (s3ap, new story)", ask.build,
                  lambda i: {"narrative": story(i), "question": question.format(a=NAMES[i % len(NAMES)]),
                             "mode": "s3ap"},
                  lambda inp: 2, note="1 parse + 1 QA"),
        GraphCase("ask (s3ap, cached story)", ask.build,
                  lambda i: {"narrative": story(0), "question": f"Question {i}: where is the apple?",
                             "mode": "s3ap"},
                  lambda inp: 1, note="cached parse counts 0; 1 QA"),
        GraphCase("ask (cot)", ask.build,
                  lambda i: {"narrative": story(i), "question": "Where is the apple?", "mode": "cot"},
                  lambda inp: 1, note="1 QA"),
    ]


def extra_cases() -> tuple[list[GraphCase], list[str]]:
    """Return the cases of the other graphs that exist now, and the names of those that do not."""

    found: list[GraphCase] = []
    gaps: list[str] = []
    for name, make in extra_graphs.MAKERS.items():
        module = _module(name)
        if module is None:
            gaps.append(f"{name}: graphs/{name}.py has not landed")
            continue
        try:
            found.extend(make(module))
        except NotMeasurable as exc:
            gaps.append(f"{name}: {exc}")
    return found, gaps
