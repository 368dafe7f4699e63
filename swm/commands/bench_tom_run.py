"""What ``swm bench tom`` and ``swm bench parse`` run, once their options are read: `swm.commands.bench_tom` holds
the options and imports this module in the command's body, so ``--help`` loads none of the graphs, stores, loaders
and scorers imported here."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import click

from swm.checkpoints import hold_lease
from swm.commands._common import (
    comma_list,
    db_path,
    echo_json,
    make_context,
    record_run,
    resolve_concurrency,
    writable_out,
)
from swm.commands.workers import run_tom_on_ray
from swm.context import SWMContext
from swm.defaults import MODES
from swm.errors import InputError, ItemsFailed
from swm.filenames import file_name
from swm.graphs import ask, parse
from swm.inputs import jsonl_rows
from swm.protocols import prompt_set
from swm.tom.items import BENCHMARKS, SIM
from swm.tom.loaders import load_benchmark, select
from swm.tom.paper import prompt_protocol_line
from swm.tom.parser_score import CORRUPTIONS, combined, corrupt, judge_observation, score_parse
from swm.tom.report import summarise, write_reports
from swm.tom.rules import rule_line
from swm.tom.runner import BenchmarkRun, ensure_tables, result_rows, run_benchmark
from swm.tom.runner import record_run as record_benchmark_run
from swm.tom.simulator import generate_stories, story_items
from swm.tom.splits import SplitMatch, select_paper_split, split_line, split_spec
from swm.validation import validate_s3ap


def run_tom(benchmark: str, data: Path | None, samples: int, fantom_context: str, modes: str, n: int | None,
            seed: int, paper_split: bool,
            concurrency: int | None, workers: int, ray_address: str | None,
            max_attempts: int, repair_temperature: float | None, repair_seed: int | None,
            out_dir: Path | None, no_progress: bool, report_only: bool, db: str | None,
            thread_id: str | None, as_json: bool, **models: Any) -> None:
    """Run ``swm bench tom`` (`swm.commands.bench_tom.tom_command` says what it does)."""

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
    with hold_lease(db_path(db), run_id):  # one process per run: a second one stops at once
        if workers > 0:
            return _run_on_workers(items, mode_list, ctx, db_path(db), run_id, workers, ray_address, meta)
        return run_benchmark(items, mode_list, ctx, db_path(db), run_id, concurrency=in_flight,
                             progress=progress, meta=meta, ask_graph=ask.build())


def _report(out_dir: Path, label: str, result: BenchmarkRun, mode_list: list[str], meta: dict[str, Any],
            items: list[Any], ctx: SWMContext, *, run_id: str, db: str | None, seed: int, split: str,
            fantom_context: str | None, report_only: bool, as_json: bool) -> None:
    """Write the run's table (md, csv, json) and print it, or its JSON; then name the failed items."""
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
        split_spec(benchmark)  # before loading: a benchmark with no manifest is refused at once
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


def run_parse_bench(n_stories: int, seed: int, corruptions: str, parser_spec: str | None, max_attempts: int,
                    data: Path | None, judge: bool, out_dir: Path | None, db: str | None,
                    thread_id: str | None, as_json: bool, **models: Any) -> None:
    """Run ``swm bench parse`` (`swm.commands.bench_tom.parse_bench_command` says what it does)."""

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
            verdicts = [judge_observation(ctx, s.text, p, reference=s.gold_s3ap()) for p, s in pairs]
            valid = [(v["score"], x.structural) for v, x in zip(verdicts, scores, strict=True)
                     if v["score"] is not None]
            entry["judge_observation"] = round(statistics.mean(v for v, _ in valid), 4) if valid else None
            entry["judge_overall"] = round(statistics.mean(combined(st, v) for v, st in valid), 4) if valid else None
            entry["judge_failures"] = len(verdicts) - len(valid)
        table.append(entry)
    _emit({"stories": n_stories, "seed": seed, "table": table}, table, out_dir, as_json)


def _parse_story(ctx: Any, text: str) -> Any:
    out = parse.build().compile().invoke({"narrative": text}, context=ctx)
    world = out.get("world")
    return world.to_s3ap() if world is not None else None


def _judge_file(ctx: Any, path: Path) -> list[dict[str, Any]]:
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
    store = ctx.experience_store()
    ensure_tables(store)
    record_benchmark_run(store, run_id, meta)
    start = time.perf_counter()
    before = len([r for r in result_rows(store, run_id, modes, items) if r.get("status") != "failed"])
    _, startup = run_tom_on_ray(items, modes, ctx, db, run_id, workers=workers, address=address)
    return BenchmarkRun(rows=result_rows(store, run_id, modes, items), wall_seconds=time.perf_counter() - start,
                        skipped=before, run=run_id, engine_startup_seconds=startup)
