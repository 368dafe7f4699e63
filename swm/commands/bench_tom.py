"""``swm bench tom`` (CoT vs S3AP on theory-of-mind data) and ``swm bench parse`` (parser quality)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from swm.commands._common import (
    TableChoice,
    concurrency_option,
    model_options,
    prompts_option,
    repair_options,
    run_options,
)
from swm.commands.invocation import config_option
from swm.tom.items import SIM
from swm.tom.loaders import benchmark_names


def _benchmarks() -> tuple[str, ...]:
    """The benchmark table's rows (`swm.tom.items.BENCHMARKS`), then ``sim``."""
    return (*benchmark_names(), SIM)


@click.command("tom")
@config_option
@click.option("--benchmark", type=TableChoice(_benchmarks), required=True,
              help="Which benchmark; 'sim' runs simulated ToMi-world stories (no --data).")
@click.option("--data", type=click.Path(path_type=Path), default=None,
              help="The data file: bAbI *.txt or Percept-ToMi.csv (ToMi/ParaToMi), Hi-ToM_data.json, MMToM-QA "
                   "questions.json, fantom_v1.json, ConfAIde's tier_4.txt / tier_3.txt / benchmark folder, or the "
                   "uniform JSONL of ../shared/benchmarks.")
@click.option("--samples", type=int, default=1, show_default=True,
              help="ConfAIde: answers per prompt (upstream samples 10 at temperature 1).")
@click.option("--fantom-context", type=click.Choice(["short", "full"]), default="short", show_default=True,
              help="FANToM: the conversation each question sees (full relabels the answerability and "
                   "info-accessibility questions as FANToM's own evaluation does).")
@click.option("--modes", default="cot,s3ap", show_default=True, help="Comma list of vanilla, cot, s3ap, s3ap_only.")
@click.option("--n", "n", type=int, default=None, help="Questions to draw (seeded); all when omitted. "
              "FANToM is drawn by whole question sets, ConfAIde by whole scenarios; for 'sim' it is the number "
              "of stories.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draw.")
@concurrency_option("Items")
@click.option("--workers", type=int, default=0, show_default=True,
              help="Spread the items over this many Ray worker processes (0: run here, in threads).")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="Join a running Ray cluster ('auto', ray://head:10001) instead of starting a local one; "
                   "needs --db postgresql://….")
@click.option("--max-attempts", default=3, show_default=True, help="Parse → check → repair attempts per story.")
@repair_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for tom_<benchmark>.md/.csv/.json [default: swm-results/<thread id>].")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@click.option("--report-only", is_flag=True, help="Run nothing: write the table of what the --thread-id run has "
              "finished so far (to look at a long run, or one that cannot be finished).")
@click.option("--paper-split", is_flag=True,
              help="Run exactly the records behind the S3AP paper's numbers: --data is checked against the "
                   "repository's identifier-and-hash manifests (docs/protocols.md says which files match).")
@prompts_option
@model_options("parser", "qa")
@run_options
def tom_command(benchmark: str, data: Path | None, samples: int, fantom_context: str, modes: str, n: int | None,
                seed: int, paper_split: bool,
                concurrency: int | None, workers: int, ray_address: str | None,
                max_attempts: int, repair_temperature: float | None, repair_seed: int | None,
                out_dir: Path | None, no_progress: bool, report_only: bool, db: str | None,
                thread_id: str | None, as_json: bool, **models: Any) -> None:
    """Run the paper's Table 1 protocol: accuracy per mode and question type, with cost and 95% CIs.

    FANToM reports its own set-level metrics (All is the headline), ConfAIde its leak and
    omission rates (mean and worst case over samples), ToMi both the paper's contains rule and
    the strict one, with the hedged answers counted.

    Every item goes through the ask graph as its own checkpoint thread; killed runs resume with
    the same --db and --thread-id, skipping finished items and giving the same table.
    """
    from swm.commands.bench_tom_run import run_tom  # deferred: --help (the graphs, the store, loaders and scorers)

    run_tom(benchmark, data, samples, fantom_context, modes, n, seed, paper_split, concurrency, workers, ray_address,
            max_attempts, repair_temperature, repair_seed, out_dir, no_progress, report_only, db, thread_id, as_json,
            **models)


@click.command("parse")
@click.option("--stories", "n_stories", type=int, default=20, show_default=True, help="Simulated stories to score on.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the simulator.")
@click.option("--corruptions", default="leak,blind,merge,drop_actions", show_default=True,
              help="Corrupted gold states to score as controls (comma list; empty for none).")
@click.option("--parser", "parser_spec", default=None, metavar="SPEC",
              help="Also parse each story with this model and score its S3AP ('embedded', a name, name@url).")
@click.option("--max-attempts", default=3, show_default=True, help="Parse → check → repair attempts (--parser).")
@click.option("--data", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="JSONL of {id, story, parse[, reference]} with no gold events: scored by the LLM judge.")
@click.option("--judge", is_flag=True, help="Also score observation accuracy with the LLM judge (appendix A.3 "
              "step 2) against the gold S3AP; the judge role's model is used.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for parse_scores.md/.json.")
@model_options("judge")
@run_options
def parse_bench_command(n_stories: int, seed: int, corruptions: str, parser_spec: str | None, max_attempts: int,
                        data: Path | None, judge: bool, out_dir: Path | None, db: str | None,
                        thread_id: str | None, as_json: bool, **models: Any) -> None:
    """Score S3AP parses against gold states: 0.3 × structural + 0.7 × exact observation fidelity.

    The simulator's own gold states score 1.0; corrupted copies (an agent observing after it
    left, a witness blind, steps merged, actions dropped) score less.
    """
    from swm.commands.bench_tom_run import run_parse_bench  # deferred: --help (the graphs, the simulator, scorers)

    run_parse_bench(n_stories, seed, corruptions, parser_spec, max_attempts, data, judge, out_dir, db, thread_id,
                    as_json, **models)
