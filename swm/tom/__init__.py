"""Theory-of-mind benchmarks: loaders, scorers, a ToMi-world simulator with gold S3AP, parser scores.

`swm bench tom` runs the paper's Table 1 protocol (CoT vs S3AP) on real data through the ask
graph; `swm bench parse` scores a parser's S3AP against gold states with no LLM judge.

The parser scores (`swm.tom.parser_score`, which calls a model: the model clients) are imported on first use
(PEP 562), so the benchmark table the commands' ``--benchmark`` choices read loads no model client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from swm.tom.loaders import BENCHMARKS, TomItem, load_benchmark, select
from swm.tom.scoring import contains_match, exact_match, normalise, score_answer, wilson_interval
from swm.tom.simulator import SimStory, generate_stories, generate_story

if TYPE_CHECKING:
    from swm.tom.parser_score import ParseScore, corrupt, score_parse

__all__ = ["BENCHMARKS", "ParseScore", "SimStory", "TomItem", "contains_match", "corrupt", "exact_match",
           "generate_stories", "generate_story", "load_benchmark", "normalise", "score_answer", "score_parse",
           "select", "wilson_interval"]


def __getattr__(name: str) -> Any:
    if name in ("ParseScore", "corrupt", "score_parse"):
        value = getattr(importlib.import_module("swm.tom.parser_score"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
