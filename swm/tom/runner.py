"""Run theory-of-mind items through the ask graph: concurrent, resumable, every call counted.

Each (mode, item) is its own checkpoint thread ``<run>/<mode>/<item id>`` in the SQLite
checkpointer, and its scored result is a row of the experience store's ``tom_results`` table
(key = that thread id). A rerun with the same database and run id skips items with a row,
resumes items that stopped part-way from their last finished node, and runs the rest; the
report is computed from the rows, so it comes out the same.

An item whose model call still fails after the client's retries (`ModelCallFailed`: HTTP 5xx or
429, a timeout, a dropped connection) is stored with ``status = "failed"`` and its error, and the
run goes on; the report counts it apart from the scored answers, and a rerun retries only the
failed items (from their last finished node). `ctx.failures` stops the run when items keep failing.

In the S3AP modes the parse is cached per story (nodes/parse.py), so a story costs one parse
however many questions ask about it. To keep that true when items run concurrently, the first
question of each story (its *leader*) is submitted before the others, which wait for it.

The caller hands in the ask graph (``swm.graphs.ask.build()``), so this package never imports the wiring.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, NotRequired

from langchain_core.runnables import RunnableConfig
from tqdm import tqdm
from typing_extensions import TypedDict

from swm.checkpoints import open_saver, run_thread
from swm.checkpoints.store import StoreRecords
from swm.context import SWMContext
from swm.errors import InputError, ModelCallFailed
from swm.graph_state import story_hash
from swm.schemas import was_truncated
from swm.tom.items import TomItem
from swm.tom.paper import item_inputs
from swm.tom.scoring import score_answer
from swm.usage import total_usage

RESULTS_TABLE = "tom_results"
RUNS_TABLE = "tom_runs"
PARSE_MODES = ("s3ap", "s3ap_only")


def item_thread(run_id: str, mode: str, item: TomItem) -> str:
    """Return the checkpoint thread (and result key) of one item in one mode."""
    return f"{run_id}/{mode}/{item.id}"


def finished_keys(store: StoreRecords, run_id: str) -> set[str]:
    """Return the result keys a run has finished (failed items are not finished: a rerun retries them)."""
    if not store.has_table(RESULTS_TABLE):
        return set()
    return {r["key"] for r in store.rows(f"select key from {RESULTS_TABLE} where run = ? and "
                                         "coalesce(status, 'done') != 'failed'", [run_id])}


def result_rows(store: StoreRecords, run_id: str, modes: Iterable[str], items: list[TomItem]) -> list[dict[str, Any]]:
    """Return the stored rows of these items and modes, in mode then item order."""
    if not store.has_table(RESULTS_TABLE):
        return []
    stored = {r["key"]: r for r in store.rows(f"select * from {RESULTS_TABLE} where run = ?", [run_id])}
    return [{**stored[k], **score_fields(item, stored[k].get("answer") or "")} if stored[k].get("status") != "failed"
            else stored[k] for mode in modes for item in items if (k := item_thread(run_id, mode, item)) in stored]


def score_fields(item: TomItem, answer: str) -> dict[str, Any]:
    """Return a row's scored columns for an answer, by the current rules.

    Stored rows are rescored whenever they are read, so a report of an older run (or a rerun that
    skips finished items) is computed with the rules this version names in ``rule``.
    """
    score = score_answer(item, answer)
    return {
        "exact": int(score["exact"]), "loose": int(score["loose"]), "strict": int(score["strict"]),
        "hedged": int(item.kind == "location" and score["loose"] and not score["strict"]),
        "value": float(score["value"]), "chosen": score["chosen"],
        "correct": int(bool(score["value"] >= 0.5 if item.kind == "fantom_fact" else score["value"] == 1.0)),
        "rule": score["rule"], "variants": json.dumps(score["variants"], sort_keys=True),
    }


_RESULT_COLUMNS: dict[str, type] = {
    "key": str, "run": str, "mode": str, "item_id": str, "benchmark": str, "qtype": str, "kind": str,
    "group_id": str, "access": str, "question": str, "gold": str, "answer": str, "answer_error": str,
    "exact": int, "loose": int, "strict": int, "hedged": int, "reasoning_truncated": int, "value": float,
    "chosen": str, "correct": int, "calls": int, "parse_calls": int,
    "qa_calls": int, "prompt_tokens": int, "completion_tokens": int, "model_seconds": float, "wall_seconds": float,
    "failures": int, "unknown_usage": int, "parse_cached": int, "parse_problems": int, "social_state": str,
    "story_hash": str,
    "prompts": str, "models": str, "status": str, "error": str, "rule": str, "variants": str, "prompt_protocol": str,
}


def ensure_tables(store: StoreRecords) -> None:
    """Create the results tables up front, in the calling thread.

    A ``CREATE TABLE`` racing the checkpointer's writes from worker threads can fail at once
    with "database is locked" (SQLite's busy wait does not cover it), so workers only insert.
    """
    store.create_table(RESULTS_TABLE, _RESULT_COLUMNS, pk="key", indexes=[["run", "mode"]])
    store.create_table(RUNS_TABLE, {"run": str, "benchmark": str, "data": str, "seed": str, "n": str,
                                    "modes": str, "started": float}, pk="run")


def insert_result(store: StoreRecords, row: dict[str, Any]) -> None:
    """Store one scored row.

    A briefly locked database needs no retry here: the store takes SQLite's write lock first
    (``BEGIN IMMEDIATE``) and waits for it (``busy_timeout``), and an item that fails anyway is
    resumed from its checkpoint on the next run.
    """
    store.insert(RESULTS_TABLE, row, pk="key", replace=True)


def record_run(store: StoreRecords, run_id: str, meta: dict[str, Any]) -> None:
    """Store the run's settings once; a rerun on other settings is refused (use a new run id)."""
    ensure_tables(store)
    if store.has_table(RUNS_TABLE):
        rows = list(store.rows(f"select * from {RUNS_TABLE} where run = ?", [run_id]))
        if rows:
            old = dict(rows[0])
            if old.get("prompt_protocol") == "paper" and old.get("prompt_set") is None:
                # recorded before "paper" meant the appendix's wording: it sent what "repo" sends now
                old["prompt_protocol"] = "repo"
            # runs started before a setting was recorded have none to compare
            for key in ("benchmark", "data", "seed", "n", "fantom_context", "prompt_protocol", "prompt_set", "split"):
                if key in ("fantom_context", "prompt_protocol", "prompt_set", "split") and old.get(key) is None:
                    continue
                if str(old.get(key)) != str(meta.get(key)):
                    hint = ("rerun with the same settings to resume (--prompts repo: the run was recorded as 'paper' "
                            "before that name meant the appendix's wording), or use a new --thread-id"
                            if key == "prompt_protocol" and rows[0].get("prompt_protocol") != old.get(key)
                            else "rerun with the same settings to resume, or use a new --thread-id")
                    raise InputError(f"run {run_id} was started with {key}={old.get(key)}, not {meta.get(key)}", hint)
            return
    store.insert(RUNS_TABLE, {"run": run_id, **{k: str(v) for k, v in meta.items()}, "started": time.time()},
                 pk="run", ignore=True)


def _row(run_id: str, mode: str, item: TomItem, out: dict[str, Any], seconds: float,
         protocol: str = "paper") -> dict[str, Any]:
    usage = out.get("usage") or {}
    total = total_usage(usage)
    parse_stats = usage.get("parse") or {}
    answer_stats = usage.get("answer") or {}
    return {
        "key": item_thread(run_id, mode, item), "run": run_id, "mode": mode, "item_id": item.id,
        "benchmark": item.benchmark, "qtype": item.qtype, "kind": item.kind, "group_id": item.group,
        "access": (item.meta or {}).get("missed_info_accessibility"),
        "question": item.question, "gold": item.answer if isinstance(item.answer, str) else str(item.answer),
        "answer": out.get("answer") or "", "answer_error": out.get("answer_error"),
        **score_fields(item, out.get("answer") or ""),
        "reasoning_truncated": int(was_truncated(out.get("reasoning"))),
        "calls": total["calls"], "parse_calls": parse_stats.get("calls", 0), "qa_calls": answer_stats.get("calls", 0),
        "prompt_tokens": total["prompt_tokens"], "completion_tokens": total["completion_tokens"],
        "model_seconds": round(total["seconds"], 3), "wall_seconds": round(seconds, 3),
        "failures": total["failures"], "unknown_usage": total["unknown_usage"],
        "parse_cached": int(bool(out.get("parse_cached"))),
        "parse_problems": len(out.get("parse_problems") or []), "story_hash": out.get("story_hash"),
        # what the answer stood on (`swm.graph_state.SocialStateUse`); None when no answer was attempted
        "social_state": out.get("social_state"),
        "prompts": out.get("prompts") or {}, "models": out.get("models") or {},
        "status": "failed" if out.get("error") else "done", "error": out.get("error"),
        "prompt_protocol": protocol,
    }


def run_item(graph: Any, ctx: SWMContext, run_id: str, mode: str, item: TomItem) -> dict[str, Any]:
    """Run (or resume, see `checkpoints.run_thread`) one item in one mode; return its scored row (not yet stored)."""
    config: RunnableConfig = {"configurable": {"thread_id": item_thread(run_id, mode, item)}}
    inputs = item_inputs(item, mode, ctx.prompt_protocol)
    start = time.perf_counter()
    try:
        out, _ = run_thread(graph, inputs, config, ctx)
    except InputError as exc:  # the item itself is unusable: record it as a wrong answer, with why
        out = {"answer": "", "answer_error": f"input error: {exc}", "usage": {}}
    except ModelCallFailed as exc:  # failed after the retries: recorded as failed, retried on a rerun
        # the calls that did succeed before it are in the checkpoint, and count
        out = {**graph.get_state(config).values, "answer": "", "error": exc.one_line()}
    return _row(run_id, mode, item, out, time.perf_counter() - start, ctx.prompt_protocol)


Progress = Callable[[str, dict[str, Any]], None]


class BenchmarkRun(TypedDict):
    """What a benchmark run did (`run_benchmark`, or its items on Ray workers): every answer row, and its timing."""

    rows: list[dict[str, Any]]  # `result_rows`: one per item and mode finished
    wall_seconds: float  # this invocation's
    skipped: int  # answers already finished before it
    run: NotRequired[str]
    engine_startup_seconds: NotRequired[float]  # Ray's start, included in the wall time


Queued = tuple[TomItem, threading.Event | None, threading.Event | None]  # an item, the event it waits on, its own


def _leaders_first(todo: list[TomItem], mode: str) -> list[Queued]:
    """Order the items so each story is parsed once: in a parsing mode, the first item of a story (its leader)
    runs first and sets its event when done; the story's other items wait on it and reuse the cached parse."""
    leaders: dict[str, threading.Event] = {}
    order: list[Queued] = []
    followers: list[Queued] = []
    for item in todo:
        digest = story_hash(item.story)
        if mode in PARSE_MODES and digest in leaders:
            followers.append((item, leaders[digest], None))
        else:
            ready = threading.Event()
            leaders[digest] = ready
            order.append((item, None, ready))
    return order + followers  # leaders first: a follower only ever waits on a leader already started


def run_mode(graph: object, ctx: SWMContext, run_id: str, mode: str, items: list[TomItem],
             concurrency: int = 1, on_done: Progress | None = None) -> int:
    """Run every unfinished item of one mode; return how many ran. Stops at the first crash.

    An item that fails after its retries is stored as failed and the others go on. A crash (model
    unreachable, ``ctx.failures`` items failed in a row, any other exception) leaves finished items
    stored and the unfinished ones checkpointed, so the same call resumes them.
    """
    store = ctx.experience_store()
    done = finished_keys(store, run_id)
    todo = [i for i in items if item_thread(run_id, mode, i) not in done]
    if not todo:
        return 0
    stop = threading.Event()
    order = _leaders_first(todo, mode)

    def work(item: TomItem, wait_for: threading.Event | None, ready: threading.Event | None) -> None:
        try:
            if wait_for is not None:
                wait_for.wait()
            if stop.is_set():
                return
            row = run_item(graph, ctx, run_id, mode, item)
            insert_result(store, row)
            if on_done is not None:
                on_done(mode, row)
            if row["status"] == "failed":
                ctx.failures.failure(row["error"])
            else:
                ctx.failures.success()
        except BaseException:
            stop.set()
            raise
        finally:
            if ready is not None:
                ready.set()

    if concurrency <= 1:
        for entry in order:
            work(*entry)
        return len(order)
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="swm-tom")
    futures: list[Future[None]] = [pool.submit(work, *entry) for entry in order]
    try:
        wait(futures, return_when=FIRST_EXCEPTION)
        errors = [f.exception() for f in futures if f.done() and not f.cancelled() and f.exception()]
        if errors:
            stop.set()
            raise errors[0]  # type: ignore[misc]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return len(order)


def run_benchmark(items: list[TomItem], modes: list[str], ctx: SWMContext, db: str | Path, run_id: str,
                  concurrency: int = 1, progress: bool = True, meta: dict[str, Any] | None = None, *,
                  ask_graph: Any) -> BenchmarkRun:
    """Run items in each mode through ``ask_graph`` (a `StateGraph`, compiled here on the SQLite
    checkpointer at ``db``); return the rows and timing."""


    store = ctx.experience_store()
    record_run(store, run_id, meta or {})
    start = time.perf_counter()
    skipped = 0
    with open_saver(db) as saver:
        graph = ask_graph.compile(checkpointer=saver)
        for mode in modes:
            previous = [r for r in result_rows(store, run_id, [mode], items) if r.get("status") != "failed"]
            skipped += len(previous)
            lock = threading.Lock()
            tally = {"n": len(previous), "correct": sum(r["correct"] for r in previous),
                     "calls": sum(r["calls"] for r in previous)}
            bar = tqdm(total=len(items), initial=len(previous), desc=f"{items[0].benchmark if items else ''} {mode}",
                       unit="q", disable=not progress, dynamic_ncols=True, leave=True)

            def on_done(_mode: str, row: dict[str, Any], bar: Any = bar, tally: dict[str, int] = tally,
                        lock: threading.Lock = lock) -> None:
                with lock:
                    failed = row.get("status") == "failed"
                    tally["n"] += 0 if failed else 1
                    tally["failed"] = tally.get("failed", 0) + failed
                    tally["correct"] += row["correct"]
                    tally["calls"] += row["calls"]
                    bar.set_postfix(acc=f"{tally['correct'] / max(1, tally['n']):.3f}", calls=tally["calls"],
                                    failed=tally["failed"], refresh=False)
                    bar.update(1)

            if previous:
                bar.set_postfix(acc=f"{tally['correct'] / max(1, tally['n']):.3f}", calls=tally["calls"])
            try:
                run_mode(graph, ctx, run_id, mode, items, concurrency=concurrency, on_done=on_done)
            finally:
                bar.close()
    rows = result_rows(store, run_id, modes, items)
    return BenchmarkRun(rows=rows, wall_seconds=time.perf_counter() - start, skipped=skipped, run=run_id)
