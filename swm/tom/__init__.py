"""Theory-of-mind benchmarks: loaders, scorers, a ToMi-world simulator with gold S3AP, parser scores.

`swm bench tom` runs the paper's Table 1 protocol (CoT vs S3AP) on real data through the ask
graph; `swm bench parse` scores a parser's S3AP against gold states with no LLM judge.
"""

from swm.tom.loaders import BENCHMARKS, TomItem, load_benchmark, select
from swm.tom.parser_score import ParseScore, corrupt, score_parse
from swm.tom.scoring import contains_match, exact_match, normalise, score_answer, wilson_interval
from swm.tom.simulator import SimStory, generate_stories, generate_story

__all__ = ["BENCHMARKS", "ParseScore", "SimStory", "TomItem", "contains_match", "corrupt", "exact_match",
           "generate_stories", "generate_story", "load_benchmark", "normalise", "score_answer", "score_parse",
           "select", "wilson_interval"]
