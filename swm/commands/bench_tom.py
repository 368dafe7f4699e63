"""``swm bench tom`` (CoT vs S3AP on theory-of-mind data) and ``swm bench parse`` (parser quality)."""

from __future__ import annotations

import json
import statistics
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from swm.commands._common import (
    TableChoice,
    comma_list,
    concurrency_option,
    db_path,
    echo_json,
    make_context,
    model_options,
    prompts_option,
    record_run,
    repair_options,
    resolve_concurrency,
    run_options,
    writable_out,
)
from swm.commands.invocation import config_option
from swm.defaults import MODES
from swm.errors import InputError, ItemsFailed
from swm.filenames import file_name
from swm.tom.items import BENCHMARKS
from swm.tom.loaders import benchmark_names

if TYPE_CHECKING:
    from swm.context import SWMContext
    from swm.tom.runner import BenchmarkRun

SIM = "sim"  # simulated ToMi-world stories, generated here (no --data): not a row of the benchmark table


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
    from swm.protocols import prompt_set
    from swm.tom.rules import rule_line

    mode_list = comma_list(modes, MODES, "mode")
    items, label, split = _load_items(benchmark, data, samples, fantom_context, n, seed, paper_split)
    if report_only and not thread_id:
        raise InputError("--report-only needs the --thread-id of the run to report", "pass --thread-id")
    task = BENCHMARKS[benchmark].task if benchmark in BENCHMARKS else "tomi"  # sim: ToMi-world stories
    ctx = make_context(db, task=task, max_parse_attempts=max_attempts, repair_temperature=repair_temperature,
                       repair_seed=repair_seed, **models)
    in_flight = 1 if report_only else resolve_concurrency(ctx, concurrency)
    run_id = thread_id or f"tom-{label}-{uuid.uuid4().hex[:10]}"
    record_run(ctx.experience_store(), run_id, "tom", "ask")
    out_dir = writable_out(out_dir or Path("swm-results") / file_name(run_id))
    scorer = rule_line("tomi" if benchmark == SIM else benchmark)
    click.echo(f"scorer rule: {scorer}", err=True)
    click.echo(f"prompt protocol: {ctx.prompt_protocol} (--prompts paper|repo|swm; docs/protocols.md)", err=True)
    click.echo(f"split: {split}", err=True)
    if not report_only:
        click.echo(f"run {run_id}: {len(items)} questions × {len(mode_list)} modes (rerun with --thread-id {run_id} "
                   f"--db {db_path(db)} to resume if interrupted)", err=True)
    meta = {"benchmark": label, "data": str(data) if data else "simulator", "seed": seed, "n": n,
            "modes": ",".join(mode_list), "scorer": scorer, "prompt_protocol": ctx.prompt_protocol,
            "prompt_set": prompt_set(ctx, task),
            "split": split,
            **({"samples": samples} if benchmark == "confaide" else {}),
            **({"fantom_context": fantom_context} if benchmark == "fantom" else {})}
    if report_only:
        from swm.tom.runner import BenchmarkRun, result_rows

        rows = result_rows(ctx.experience_store(), run_id, mode_list, items)
        result = BenchmarkRun(rows=rows, wall_seconds=0.0, skipped=len(rows))
    else:
        result = _run_items(items, mode_list, ctx, db, run_id, meta, workers=workers, ray_address=ray_address,
                            in_flight=in_flight, progress=not no_progress)
    _report(out_dir, label, result, mode_list, meta, items, ctx, run_id=run_id, db=db, seed=seed, split=split,
            fantom_context=fantom_context if benchmark == "fantom" else None, report_only=report_only,
            as_json=as_json)


def _run_items(items: list[Any], mode_list: list[str], ctx: SWMContext, db: str | None, run_id: str,
               meta: dict[str, Any], *, workers: int, ray_address: str | None, in_flight: int,
               progress: bool) -> BenchmarkRun:
    """Run every item not yet finished, here or on Ray workers, holding the run's lease."""
    from swm.checkpoints import hold_lease
    from swm.graphs import ask
    from swm.tom.runner import run_benchmark

    with hold_lease(db_path(db), run_id):  # one process per run: a second one stops at once
        if workers > 0:
            return _run_on_workers(items, mode_list, ctx, db_path(db), run_id, workers, ray_address, meta)
        return run_benchmark(items, mode_list, ctx, db_path(db), run_id, concurrency=in_flight,
                             progress=progress, meta=meta, ask_graph=ask.build())


def _report(out_dir: Path, label: str, result: BenchmarkRun, mode_list: list[str], meta: dict[str, Any],
            items: list[Any], ctx: SWMContext, *, run_id: str, db: str | None, seed: int, split: str,
            fantom_context: str | None, report_only: bool, as_json: bool) -> None:
    """Write the run's table (md, csv, json) and print it, or its JSON; then name the failed items."""
    from swm.tom.paper import prompt_protocol_line
    from swm.tom.report import summarise, write_reports

    rows = result["rows"]
    summary = summarise(rows, mode_list)
    header = {"data": meta["data"], "questions": len(items), "seed": seed, "run": run_id,
              "scorer rule": meta["scorer"], **({"FANToM context": fantom_context} if fantom_context else {}),
              "models": f"parser={ctx.spec_for('parser')}, qa={ctx.spec_for('qa')}",
              "prompt protocol": prompt_protocol_line(ctx, rows), "split": split,
              "wall time (this invocation)": f"{result['wall_seconds']:.1f} s",
              "items skipped as already finished": result["skipped"]}
    if "engine_startup_seconds" in result:
        header["Ray start (included in wall time)"] = f"{result['engine_startup_seconds']:.1f} s"
    if report_only:
        header["report only"] = f"{len(rows)} of {len(items) * len(mode_list)} answers finished"
    paths = write_reports(out_dir, label, summary, header, rows)
    if as_json:
        echo_json({"summary": summary, "header": header, "files": {k: str(v) for k, v in paths.items()}})
        _say_failed(rows, run_id, db)
        return
    click.echo(paths["md"].read_text(encoding="utf-8"))
    click.echo(f"wrote {paths['md']}, {paths['csv']}, {paths['json']}", err=True)
    _say_failed(rows, run_id, db)


def _load_items(benchmark: str, data: Path | None, samples: int, fantom_context: str, n: int | None, seed: int,
                paper_split: bool) -> tuple[list[Any], str, str]:
    """Load the benchmark's items (the paper's split when asked), drawn with --n/--seed; say which split they are
    (`swm.tom.splits.split_line`: the paper's, how it matched, or a sample; with the benchmark's caveat)."""
    from swm.tom.loaders import load_benchmark, select
    from swm.tom.simulator import generate_stories, story_items

    if benchmark == SIM:
        if paper_split:
            raise InputError("the simulator has no paper split", "drop --paper-split, or pass a benchmark file")
        return (story_items(generate_stories(n or 20, seed)), "tomi-sim",
                f"simulated stories, no benchmark split: {n or 20} stories generated with seed {seed}")
    if data is None:
        raise InputError(f"--data is required for {benchmark}",
                         "pass the data file (see `swm bench tom --help` for the formats)")
    if samples < 1:
        raise InputError("--samples must be at least 1", "pass --samples 1 or more")
    if paper_split:
        from swm.tom.splits import split_spec

        split_spec(benchmark)  # before loading: a benchmark with no manifest is refused at once
    from swm.tom.splits import SplitMatch, select_paper_split, split_line

    items = load_benchmark(benchmark, data, samples=samples, context=fantom_context)
    match: SplitMatch | None = None
    if paper_split:
        items, match = select_paper_split(benchmark, data, items)
    chosen = select(items, n, seed)
    return chosen, benchmark, split_line(benchmark, str(data), len(items), len(chosen), n, seed, match)


def _say_failed(rows: list[dict[str, Any]], run_id: str, db: str | None) -> None:
    failed = [r for r in rows if r.get("status") == "failed"]
    if failed:
        raise ItemsFailed(f"{len(failed)} question(s) failed after their retries (first: {failed[0]['error']})",
                          f"rerun with --thread-id {run_id} --db {db_path(db)} to retry only them")


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
    from swm.tom.parser_score import CORRUPTIONS, corrupt, score_parse
    from swm.tom.simulator import generate_stories

    kinds = comma_list(corruptions, CORRUPTIONS, "corruption", allow_empty=True)
    needs_model = judge or data is not None or parser_spec is not None
    ctx = make_context(db, task="tomi", max_parse_attempts=max_attempts,
                       **({"parser_model": parser_spec} if parser_spec else {}), **models) if needs_model else None
    if data is not None:
        rows = _judge_file(ctx, data)
        _emit({"source": str(data), "results": rows}, [], out_dir, as_json)
        return
    stories = generate_stories(n_stories, seed)
    sources: dict[str, list[tuple[Any, Any]]] = {"gold": [(s.gold_s3ap(), s) for s in stories]}
    for kind in kinds:
        pairs = [(corrupt(s, kind, seed=i), s) for i, s in enumerate(stories)]
        # a story where every agent saw everything cannot leak: it is left out, not scored as perfect
        sources[f"corrupted:{kind}"] = [(p, s) for p, s in pairs if p is not None]
    if parser_spec:
        sources[f"parser:{parser_spec}"] = [(_parse_story(ctx, s.text), s) for s in stories]
    table = []
    for name, pairs in sources.items():
        scores = [score_parse(p, s) for p, s in pairs]
        entry = {"source": name, "stories": len(scores),
                 "structural": round(statistics.mean(x.structural for x in scores), 4),
                 "observation": round(statistics.mean(x.observation for x in scores), 4),
                 "overall": round(statistics.mean(x.overall for x in scores), 4),
                 "perfect": sum(1 for x in scores if x.overall >= 1.0 - 1e-9)}
        if judge and ctx is not None:
            from swm.tom.parser_score import combined, judge_observation

            verdicts = [judge_observation(ctx, s.text, p, reference=s.gold_s3ap()) for p, s in pairs]
            valid = [(v["score"], x.structural) for v, x in zip(verdicts, scores, strict=True)
                     if v["score"] is not None]
            entry["judge_observation"] = round(statistics.mean(v for v, _ in valid), 4) if valid else None
            entry["judge_overall"] = round(statistics.mean(combined(st, v) for v, st in valid), 4) if valid else None
            entry["judge_failures"] = len(verdicts) - len(valid)
        table.append(entry)
    _emit({"stories": n_stories, "seed": seed, "table": table}, table, out_dir, as_json)


def _parse_story(ctx: Any, text: str) -> Any:
    from swm.graphs import parse

    out = parse.build().compile().invoke({"narrative": text}, context=ctx)
    world = out.get("world")
    return world.to_s3ap() if world is not None else None


def _judge_file(ctx: Any, path: Path) -> list[dict[str, Any]]:
    from swm.inputs import jsonl_rows
    from swm.tom.parser_score import combined, judge_observation
    from swm.validation import validate_s3ap

    rows = []
    for _, item in jsonl_rows(path, ("story", "parse")):
        structural = validate_s3ap(item["parse"]).structural_score
        verdict = judge_observation(ctx, item["story"], item["parse"], reference=item.get("reference"))
        rows.append({"id": item.get("id"), "structural": structural, "judge_observation": verdict["score"],
                     "overall": combined(structural, verdict["score"]) if verdict["score"] is not None else None,
                     "error": verdict["error"]})
    return rows


def _emit(payload: dict[str, Any], table: list[dict[str, Any]], out_dir: Path | None, as_json: bool) -> None:
    lines = ["| source | stories | structural | observation | overall (0.3/0.7) | perfect |",
             "|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['source']} | {r['stories']} | {r['structural']:.3f} | {r['observation']:.3f} | "
                     f"{r['overall']:.3f} | {r['perfect']} |")
        if "judge_observation" in r:
            lines[-1] += f" judge obs {r['judge_observation']}, judge overall {r['judge_overall']}"
    text = "\n".join(lines) + "\n"
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "parse_scores.md").write_text(text, encoding="utf-8")
        (out_dir / "parse_scores.json").write_text(json.dumps(payload, indent=2), encoding="utf-8")
    if as_json:
        echo_json(payload)
    elif table:
        click.echo(text)
    else:
        echo_json(payload)


def _run_on_workers(items: list[Any], modes: list[str], ctx: SWMContext, db: str | Path, run_id: str, workers: int,
                    address: str | None, meta: dict[str, Any]) -> BenchmarkRun:
    """Run the unfinished items as Ray tasks (`swm.commands.workers`); return what `run_benchmark` returns."""
    import time

    from swm.commands.workers import run_tom_on_ray
    from swm.tom.runner import BenchmarkRun, ensure_tables, record_run, result_rows

    store = ctx.experience_store()
    ensure_tables(store)
    record_run(store, run_id, meta)
    start = time.perf_counter()
    before = len([r for r in result_rows(store, run_id, modes, items) if r.get("status") != "failed"])
    _, startup = run_tom_on_ray(items, modes, ctx, db, run_id, workers=workers, address=address)
    return BenchmarkRun(rows=result_rows(store, run_id, modes, items), wall_seconds=time.perf_counter() - start,
                        skipped=before, run=run_id, engine_startup_seconds=startup)
