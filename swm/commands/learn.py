"""``swm learn``: the lifelong collect → convert → gate → update → evaluate → deploy loop."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Any, Literal, Union, cast, get_args, get_origin

import click
from pydantic import ValidationError

from swm import drain
from swm.commands._common import (
    CommaList,
    OnOff,
    TableChoice,
    concurrency_option,
    db_path,
    echo_json,
    make_context,
    model_options,
    record_run,
    resolve_concurrency,
    run_options,
    serving_record,
    writable_out,
)
from swm.commands.invocation import config_option, given
from swm.commands.play import inject_test_models
from swm.credentials import remember
from swm.errors import InputError, ItemsFailed
from swm.filenames import file_name
from swm.lifelong.plan import LifelongPlan
from swm.serving import formats
from swm.tables import Names
from swm.tracking import check_reporter, tracking
from swm.usage import total_usage

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph.state import CompiledStateGraph
    from langgraph.types import StateSnapshot

    from swm.checkpoints.store import StoreRecords
    from swm.context import LifelongContext, SWMContext
    from swm.lifelong.state import EpisodeJob, LifelongInput, LifelongOutput, LifelongState

    LifelongGraph = CompiledStateGraph[LifelongState, LifelongContext, LifelongInput, LifelongOutput]


def _expected_episodes(plan: LifelongPlan) -> int:
    from swm.lifelong.jobs import shift_tasks  # deferred: --help

    # each policy (p0 and one candidate per cycle) plays every dev and test task once
    cells = len(plan.levels) * len(plan.eval_families or plan.families)
    evaluations = cells * (plan.heldout_per_cell + plan.dev_per_cell) + len(shift_tasks(plan))
    return (plan.cycles + 1) * evaluations + plan.cycles * plan.episodes_per_level


def _progress_line(store: StoreRecords, plan: LifelongPlan, values: dict[str, Any]) -> str:
    from swm.lifelong import store as ls

    counts = ls.gate_counts(store, plan.run_id)
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if not k.startswith("_") and v)
    cycle = min(int(values.get("cycle", 0)), plan.cycles)
    return (f"cycle {cycle}/{plan.cycles} {values.get('phase', 'start')}; pairs kept "
            f"{counts.get('_kept', 0)}, rejected: {rejected or 'none'}")


def _given_options() -> list[str]:
    """Return the plan keys of the run-defining options given on the command line, in the environment or in the
    ``--config`` file.

    A --train-* option is named by its field, ``train.<field>``, the key `_comparable` gives it.
    """
    ctx = click.get_current_context()
    return [key for key in LifelongPlan.DEFINING if given(ctx, key)] + [
        f"train.{field}" for option, field in CLI_TRAIN.items() if given(ctx, option)]


def _comparable(plan: LifelongPlan) -> dict[str, Any]:
    """Return the plan's values with each training setting also as its own key, ``train.<field>``, to compare."""
    return {**plan.model_dump(mode="json"), **{f"train.{field}": value for field, value in plan.train.items()}}


# the plan fields `swm learn` takes as options, in --help order; everything else about each comes from LifelongPlan
CLI_PLAN = ("cycles", "levels", "families", "eval_families", "names", "eval_shifts", "shift_per_cell",
            "episodes_per_level",
            "samples_per_task", "max_turns", "act_order", "act_strategy", "eval_act_strategy", "self_play", "judge",
            "judge_threshold", "gating", "min_margin", "update", "estimator", "ppo_groups", "ppo_iterations",
            "ppo_group", "keep", "balance", "balance_share", "replay", "served_format",
            "epsilon", "gate_alpha", "episode_split", "heldout_per_cell", "dev_per_cell", "hf_model", "base_gguf",
            "lora_server",
            "verify_served", "report_to")
_SPELLING = {"self_play": "--self-play/--fixed-partner"}  # flags whose off form is not --no-X
_ON_OFF = ("gating", "balance")  # booleans written --x on|off
_METAVAR = {"hf_model": "PATH", "base_gguf": "FILE", "lora_server": "URL"}
# --train-* options: TrainSettings fields (their defaults are TrainSettings' own)
CLI_TRAIN = {"train_steps": "max_steps", "train_epochs": "epochs", "train_lr": "learning_rate", "train_rank": "rank",
             "train_batch_size": "batch_size", "train_max_length": "max_length", "train_seed": "seed"}
_TRAIN_HELP = {"train_steps": "Training steps per cycle (-1: --train-epochs).",
               "train_lr": "Learning rate of the LoRA adapter.", "train_rank": "LoRA rank of a new adapter.",
               "train_max_length": "Token limit of prompt + completion."}


def _names_of(annotation: object) -> Sequence[str] | Callable[[], Sequence[str]]:
    """Return a list item's choices: a `Literal`'s values, or the names a table holds when asked (`Names`, such as
    the task families: a game registered after the command was built is offered too)."""
    table = next((m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, Names)), None)
    return table.names if table is not None else get_args(annotation)


def _plan_option(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Return the click option of plan field ``name``: its flag, default, help and choices from `LifelongPlan`."""
    field = LifelongPlan.model_fields[name]
    flag, annotation = "--" + name.replace("_", "-"), field.annotation
    optional = get_origin(annotation) in (Union, UnionType) and type(None) in get_args(annotation)
    if optional:  # `list[Family] | None`: the option is the list's, and not giving it is None
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    default = field.get_default(call_default_factory=True)
    common: dict[str, Any] = {"help": field.description, "show_default": default is not None}
    if name in _ON_OFF:
        return click.option(flag, name, type=OnOff(), default="on" if default else "off", **common)
    if annotation is bool:
        return click.option(_SPELLING.get(name, f"{flag}/--no-{flag[2:]}"), name, default=default, **common)
    if get_origin(annotation) is list:
        what = name.rstrip("s").replace("familie", "family")
        return click.option(flag, name, type=CommaList(_names_of(get_args(annotation)[0]), what),
                            default=",".join(default) if default else None, **common)
    if get_origin(annotation) is Literal:
        return click.option(flag, name, type=click.Choice(get_args(annotation)), default=default, **common)
    table = next((m for m in field.metadata if isinstance(m, Names)), None)
    if table is not None:  # a name in an extension table (an estimator): the choices are the table's rows
        return click.option(flag, name, type=TableChoice(table.names), default=default, **common)
    if annotation in (int, float):
        bounds = {k: getattr(m, k) for m in field.metadata for k in ("ge", "le") if hasattr(m, k)}
        kind = click.IntRange(bounds.get("ge"), bounds.get("le")) if annotation is int and bounds else annotation
        return click.option(flag, name, type=kind, default=default, **common)
    return click.option(flag, name, default=default, metavar=_METAVAR.get(name), **common)


def plan_options(command: Callable[..., object]) -> Callable[..., Any]:
    """Add ``swm learn``'s plan options (`CLI_PLAN`) and its --train-* options (`TrainSettings`)."""
    from swm.training.trl_update import TrainSettings

    defaults = TrainSettings()
    for option, key in reversed(CLI_TRAIN.items()):
        command = click.option("--" + option.replace("_", "-"), option, default=getattr(defaults, key),
                               show_default=True, help=_TRAIN_HELP.get(option))(command)
    for name in reversed(CLI_PLAN):
        command = _plan_option(name)(command)
    return command


def build_plan(thread: str, folder: str, options: dict[str, Any]) -> LifelongPlan:
    """Return the run's plan from the command's options, checked by `LifelongPlan` (a one-line error if not)."""
    check_reporter(options["report_to"])  # its own line, rather than as one of the plan's problems
    train = {key: options.pop(option) for option, key in CLI_TRAIN.items()}
    if options.get("eval_shifts") is None:  # not given: no shifted cells
        options["eval_shifts"] = []
    train["alpha"] = 2 * train["rank"]
    if options.get("lora_server"):  # stored with its key as ***; the key stays in this process (swm.credentials)
        options["lora_server"] = remember(options["lora_server"])
    try:
        plan = LifelongPlan(run_id=thread, out_dir=folder, train=train, **options)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise InputError(f"invalid plan: {problems}", "see swm learn --help") from None
    return plan


def _reconcile(thread: str, status: str, stored: LifelongPlan, given: LifelongPlan,
               keys: list[str]) -> tuple[LifelongPlan, int | None]:
    """Return the plan to go on with, and the old cycle count when a finished run is to be extended.

    Options left at their defaults mean "as the thread was started"; an option given with another
    value (a --train-* setting and --lora-server included) is refused with the list of differences,
    never silently replaced by the stored one, except more cycles on a finished thread, which
    extends it (the curriculum of the cycles already run does not depend on the total).
    """
    from swm.checkpoints import differences

    changed = differences(_comparable(stored), _comparable(given), keys)
    more_cycles = "cycles" in keys and given.cycles > stored.cycles
    if changed == differences(_comparable(stored), _comparable(given), ["cycles"]) and more_cycles \
            and status == "finished":
        return stored.model_copy(update={"cycles": given.cycles}), stored.cycles
    if changed:
        hint = ("let it finish first (rerun without changed options), then rerun with more --cycles to extend it"
                if more_cycles and status != "finished" else "rerun without the changed options to go on with "
                "this thread, or use a new --thread-id for a new run")
        raise InputError(f"thread {thread} was started with other options ({'; '.join(changed)})", hint)
    return stored, None


@click.command("learn")
@config_option
@plan_options
@click.option("--temperature", default=0.7, show_default=True, help="Sampling temperature of every role.")
@concurrency_option("Episodes")
@click.option("--workers", type=int, default=0, show_default=True,
              help="Play the collect and evaluate episodes as Ray tasks on this many worker processes "
                   "(0: here, in threads); sets --concurrency to match.")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="Join a running Ray cluster ('auto', ray://head:10001); needs --db postgresql://….")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for report.md, plots and exports [default: swm-learn-<thread>].")
@click.option("--no-progress", is_flag=True, default=False, help="Hide the progress bar.")
@model_options()
@run_options
def learn_command(temperature: float, concurrency: int | None, workers: int, ray_address: str | None,
                  out_dir: Path | None, no_progress: bool, db: str | None, thread_id: str | None, as_json: bool,
                  **options: Any) -> None:
    """Run the lifelong loop: verifiable tasks, self-play episodes, gated pairs, updates, retention metrics.

    Kill it at any point and rerun with the same --db and --thread-id: finished episodes are
    kept and none is played twice. A finished thread rewrites its report with no model calls.
    """
    from swm.checkpoints import hold_lease

    thread = thread_id or f"learn-{uuid.uuid4().hex[:10]}"
    folder = str(writable_out(out_dir or Path(f"swm-learn-{file_name(thread)}")))
    plan_keys = [*CLI_PLAN, *CLI_TRAIN]
    plan = build_plan(thread, folder, {k: options.pop(k) for k in plan_keys})
    # the lease first: a second run of a thread another one holds is refused before it builds anything (the model,
    # the stores) or records itself as a run
    with hold_lease(db_path(db), thread):
        ctx = make_context(db, temperature=temperature, **options)
        inject_test_models(ctx)
        ctx.out_dir = folder  # reports and exports go here, whatever folder the thread was started with
        in_flight = workers if workers > 0 else resolve_concurrency(ctx, concurrency)
        config: RunnableConfig = {"configurable": {"thread_id": thread}, "max_concurrency": in_flight,
                                  "recursion_limit": 10_000}
        start = time.perf_counter()
        record_run(ctx.experience_store(), thread, "learn", "lifelong")
        values = _run_thread(plan, ctx, config, db, workers, ray_address, progress=not no_progress)
    summary = {**_summary(ctx, thread, values, time.perf_counter() - start), "serving": serving_record(ctx, in_flight)}
    _print_summary(summary, values, as_json)


def _run_thread(plan: LifelongPlan, ctx: SWMContext, config: RunnableConfig, db: str | None, workers: int,
                ray_address: str | None, progress: bool = True) -> dict[str, Any]:
    """Start, resume, extend or re-report the thread (its lease held by the caller); return the graph's final values."""
    from langgraph.types import Command  # deferred: --help

    from swm.checkpoints import open_saver, thread_status
    from swm.graphs import lifelong
    from swm.lifelong.jobs import plan_of
    from swm.lifelong.report import write_report

    thread = str(config["configurable"]["thread_id"])
    store = ctx.experience_store()
    reporter = plan.report_to  # this invocation's: a resumed thread reports where the command says
    # on Ray workers each episode is played through the cluster's runner, which starts only once there are episodes
    # to play (below); the graph, compiled once, reaches it through `on_ray`
    on_ray: list[Callable[[EpisodeJob, LifelongContext], LifelongState]] = []

    def play_on_ray(job: EpisodeJob, run_ctx: LifelongContext) -> LifelongState:
        return on_ray[0](job, run_ctx)

    with ExitStack() as stack:
        saver = stack.enter_context(open_saver(db_path(db)))
        graph = lifelong.build(play_on_ray if workers > 0 else None).compile(checkpointer=saver)
        snapshot = graph.get_state(config)
        status = thread_status(snapshot)
        inputs: LifelongInput | None = {"plan": plan}
        if status != "started":
            stored = plan_of(cast("LifelongState", snapshot.values))
            plan, extend = _reconcile(thread, status, stored, plan, _given_options())
            plan = plan.model_copy(update={"out_dir": ctx.out_dir})
            inputs = None
            if extend:
                # as if the last deploy had routed on to the next cycle (deploy routes itself: `deploy_node`)
                graph.update_state(config, Command(goto="synthesize", update={
                    "plan": stored.model_copy(update={"cycles": plan.cycles})}), as_node="deploy")
                status = "resumed"
                click.echo(f"extending finished thread {thread} from {extend} to {plan.cycles} cycles", err=True)
        if status != "finished":
            check_training(plan)
        if status == "finished":
            click.echo(f"thread {thread} already finished; rewriting its report in {ctx.out_dir} (no model calls)",
                       err=True)
            values = dict(snapshot.values)
            values["report_path"] = str(write_report(store, plan, usage=values.get("usage"),
                                                     agent_spec=ctx.spec_for("agent")))
            return values
        fmt = serve_base_as(plan)
        if fmt and fmt != formats.SHIPPED:  # said only when it is not the base as shipped
            click.echo(f"llama-server: the base served in {fmt} (--served-format)", err=True)
        if workers > 0:  # a cluster only once there are episodes to play: a finished thread needs none (seconds saved)
            from swm.commands.workers import lifelong_runner_on_ray, ray_cluster

            on_ray.append(lifelong_runner_on_ray(stack.enter_context(ray_cluster(workers, ray_address, db_path(db))),
                                                 ctx, db_path(db)))
        ctx.tracker = stack.enter_context(tracking(reporter, thread, Path(str(ctx.out_dir)) / "runs",
                                                   plan.model_dump(mode="json")))
        _announce(graph, snapshot, status, config, ctx)
        return _stream(graph, inputs, config, ctx, plan, dict(snapshot.values or {}), progress)


def serve_base_as(plan: LifelongPlan) -> str | None:
    """Serve the base in the plan's ``served_format`` (``SWM_EMBEDDED_FORMAT``, which the embedded server reads, and
    Ray workers inherit); return the format set, None where adapters are served elsewhere (``lora_server``)."""
    if plan.lora_server:
        return None
    from swm.serving.adapters import find_base_gguf  # deferred: --help (it loads the GGUF writer)

    fmt: str = plan.served_format
    if fmt == "auto":
        base = find_base_gguf(plan.hf_model, plan.base_gguf)
        quantised = plan.update == "ppo" and base is not None and base.is_file() and formats.quantised(base)
        fmt = os.environ.get(formats.ENV) or ("f16" if quantised else formats.SHIPPED)
    os.environ[formats.ENV] = fmt
    return fmt


def check_training(plan: LifelongPlan) -> None:
    """Refuse, before the first model call, training settings the plan's update method would refuse after collection."""
    if plan.update == "memory":
        return
    from swm.lifelong.exports import trainer_of
    from swm.training.trl_update import TrainSettings, refused_settings

    method = "ppo" if plan.update == "ppo" else trainer_of(plan.update)
    refused = refused_settings(method, TrainSettings(**(plan.train or {})))
    if refused:
        raise InputError(f"--update {plan.update} cannot train with {'; '.join(refused)}",
                         "change those options (see swm learn --help); a thread started with them needs a new "
                         "--thread-id")


def _announce(graph: LifelongGraph, snapshot: StateSnapshot, status: str, config: RunnableConfig,
              ctx: SWMContext) -> None:
    """Say what the run does: starts a thread, or resumes one (sending failed episodes again, if any)."""
    from swm.checkpoints import pending_nodes
    from swm.lifelong.jobs import failed_now

    thread = config["configurable"]["thread_id"]
    if status != "resumed":
        click.echo(f"thread: {thread} (rerun with --thread-id {thread} to resume if interrupted)", err=True)
        return
    click.echo(f"resuming thread {thread} at {', '.join(pending_nodes(graph.get_state(config)))}", err=True)
    stopped_before_use = bool(set(snapshot.next) & {"convert", "deploy"})
    failed = failed_now(cast("LifelongState", snapshot.values), ctx.experience_store()) if stopped_before_use else []
    if failed:  # the phase stopped on failed episodes: its node sends only those again
        ctx.resend_failed = True
        click.echo(f"playing again the {len(failed)} episode(s) that failed", err=True)


def _stream(graph: LifelongGraph, inputs: LifelongInput | None, config: RunnableConfig, ctx: SWMContext,
            plan: LifelongPlan, seen: dict[str, Any], progress: bool = True) -> dict[str, Any]:
    """Run the graph with a progress bar of finished episodes (none when not ``progress``); return its final values."""
    from tqdm import tqdm  # type: ignore[import-untyped]

    from swm.lifelong import store as ls

    store, thread = ctx.experience_store(), plan.run_id
    bar = tqdm(total=_expected_episodes(plan), initial=ls.count_episodes(store, thread), unit="episode",
               desc="episodes", file=sys.stderr, dynamic_ncols=True, disable=not progress)
    # sync: each finished episode branch is on disk before the run goes on, so a kill loses
    # no finished work (and none of its usage)
    try:
        for chunk in graph.stream(inputs, config, context=ctx, stream_mode="updates", durability="sync",
                                  control=drain.control()):
            for update in chunk.values():
                if isinstance(update, dict):
                    seen.update({k: v for k, v in update.items() if k in ("cycle", "phase")})
            bar.n = ls.count_episodes(store, thread)
            bar.set_postfix_str(_progress_line(store, plan, seen), refresh=True)
    finally:  # on an error too: the bar's line is ended, so the `error:` line starts a line of its own
        bar.close()
    return dict(graph.get_state(config).values)


def _summary(ctx: SWMContext, thread: str, values: dict[str, Any], wall: float) -> dict[str, Any]:
    """Return the run's summary: report, episodes, pairs, deploys, policies, the held-out results (R and its
    metrics per metric and curve: `heldout_results`), usage and failures."""
    from swm.lifelong import store as ls
    from swm.lifelong.jobs import SHIFT
    from swm.lifelong.report import heldout_results, policy_listing
    from swm.tasks.splits import HELDOUT_VERSION

    store = ctx.experience_store()
    counts = ls.gate_counts(store, thread)
    return {"thread_id": thread, "report": values.get("report_path"), "wall_seconds": round(wall, 1),
            "episodes": ls.count_episodes(store, thread), "collect": ls.count_episodes(store, thread, "collect"),
            "dev": ls.count_episodes(store, thread, "dev"), "test": ls.count_episodes(store, thread, "test"),
            "shift": ls.count_episodes(store, thread, SHIFT),
            "calls": total_usage(values.get("usage"))["calls"], "pairs": counts.get("_total", 0),
            "kept": counts.get("_kept", 0),
            "rejected_by_rule": {k: v for k, v in counts.items() if not k.startswith("_")},
            "deploys": values.get("decisions"), "policies": policy_listing(store, thread, ctx.spec_for("agent")),
            "heldout": heldout_results(store, thread),
            "splits": {"version": HELDOUT_VERSION, **ls.split_ids(store, thread)}, "usage": values.get("usage"),
            "failed": len(ls.failures(store, thread))}


def _print_summary(summary: dict[str, Any], values: dict[str, Any], as_json: bool) -> None:
    """Print the summary as JSON, or as the report path, counts, each cycle's decision and the cost."""
    if as_json:
        echo_json(summary)
        if summary["failed"]:
            raise ItemsFailed(f"{summary['failed']} episode(s) failed after their retries",
                              f"rerun with --thread-id {summary['thread_id']} to retry them")
        return
    total = total_usage(values.get("usage"))
    click.echo(f"report: {summary['report']}")
    click.echo(f"episodes {summary['episodes']} (collect {summary['collect']}, dev {summary['dev']}, test "
               f"{summary['test']}); pairs "
               f"{summary['pairs']}, kept {summary['kept']}; rejects {summary['rejected_by_rule']}")
    for cycle, text in sorted((values.get("decisions") or {}).items(), key=lambda kv: int(kv[0])):
        click.echo(f"cycle {cycle}: {text}")
    click.echo(f"calls {total['calls']}, tokens {total['prompt_tokens']}+{total['completion_tokens']}, "
               f"wall {summary['wall_seconds']:.1f} s", err=True)
    if summary["failed"]:
        raise ItemsFailed(f"{summary['failed']} episode(s) failed after their retries; they are listed in the "
                          "report and left out of R and the pairs",
                          f"rerun with --thread-id {summary['thread_id']} to retry them")
