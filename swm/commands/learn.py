"""``swm learn``: the lifelong collect → convert → gate → update → evaluate → deploy loop."""

from __future__ import annotations

import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, cast

import click
from langchain_core.runnables import RunnableConfig

from swm.commands._common import comma_list, db_path, echo_json, make_context, model_options, run_options
from swm.commands.play import inject_test_models
from swm.errors import InputError
from swm.lifelong.state import LifelongState
from swm.tasks.families import FAMILIES, GAME_FAMILIES, LEVELS, TASK_FAMILIES
from swm.usage import total_usage


def _expected_episodes(plan: dict[str, Any]) -> int:
    # each policy (p0 and one candidate per cycle) plays every dev and test task once
    cells = len(plan["levels"]) * len(plan["families"])
    evaluations = cells * (plan["heldout_per_cell"] + plan.get("dev_per_cell", 1))
    return (plan["cycles"] + 1) * evaluations + plan["cycles"] * plan["episodes_per_level"]


def _progress_line(store: Any, plan: dict[str, Any], values: dict[str, Any]) -> str:
    from swm.lifelong import store as ls

    counts = ls.gate_counts(store, plan["run_id"])
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if not k.startswith("_") and v)
    cycle = min(int(values.get("cycle", 0)), plan["cycles"])
    return (f"cycle {cycle}/{plan['cycles']} {values.get('phase', 'start')}; pairs kept "
            f"{counts.get('_kept', 0)}, rejected: {rejected or 'none'}")


# options that define what a run computes: changing one on an existing thread is refused (cycles may grow)
PLAN_OPTIONS = {"cycles": "cycles", "levels": "levels", "families": "families",
                "episodes_per_level": "episodes_per_level", "samples_per_task": "samples_per_task",
                "max_turns": "max_turns", "policy": "policy", "eval_policy": "eval_policy", "self_play": "self_play",
                "judge": "judge", "judge_threshold": "judge_threshold", "gating": "gating", "min_margin": "min_margin",
                "update_method": "update", "replay": "replay", "epsilon": "epsilon",
                "heldout_per_cell": "heldout_per_cell", "dev_per_cell": "dev_per_cell", "hf_model": "hf_model"}


def _given_options() -> list[str]:
    """Return the plan keys of the options given on the command line or in the environment (not defaults)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    return [key for name, key in PLAN_OPTIONS.items()
            if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)]


def _reconcile(thread: str, status: str, stored: dict[str, Any], given: dict[str, Any],
               keys: list[str]) -> tuple[dict[str, Any], int | None]:
    """Return the plan to go on with, and the old cycle count when a finished run is to be extended.

    Options left at their defaults mean "as the thread was started"; an option given with another
    value is refused with the list of differences, except more cycles on a finished thread, which
    extends it (the curriculum of the cycles already run does not depend on the total).
    """
    from checkpoints import differences

    changed = differences(stored, given, keys)
    more_cycles = "cycles" in keys and given["cycles"] > stored["cycles"]
    if changed == differences(stored, given, ["cycles"]) and more_cycles and status == "finished":
        return {**stored, "cycles": given["cycles"]}, int(stored["cycles"])
    if changed:
        hint = ("let it finish first (rerun without changed options), then rerun with more --cycles to extend it"
                if more_cycles and status != "finished" else "rerun without the changed options to go on with "
                "this thread, or use a new --thread-id for a new run")
        raise InputError(f"thread {thread} was started with other options ({'; '.join(changed)})", hint)
    return stored, None


@click.command("learn")
@click.option("--cycles", default=3, show_default=True, help="Training cycles (after the baseline evaluation).")
@click.option("--levels", default=",".join(LEVELS), show_default=True,
              help="Difficulty levels, in curriculum order: cycle c trains on the c-th (the last repeats).")
@click.option("--families", default=",".join(FAMILIES), show_default=True,
              help=f"Task families; also the hidden-role games {', '.join(GAME_FAMILIES)} (self-play by default).")
@click.option("--episodes-per-level", default=4, show_default=True, help="Training episodes per cycle.")
@click.option("--samples-per-task", default=2, show_default=True,
              help="Episodes per training task (same-state pairs need at least 2).")
@click.option("--max-turns", default=8, show_default=True, help="Turn limit per episode.")
@click.option("--policy", type=click.Choice(["plain", "foresee", "rollout"]), default="plain", show_default=True,
              help="Collection policy (foresee/rollout add world-model predictions: the perception track).")
@click.option("--eval-policy", type=click.Choice(["plain", "foresee", "rollout"]), default="plain",
              show_default=True, help="Policy for the held-out evaluations.")
@click.option("--self-play/--fixed-partner", default=True, show_default=True,
              help="One model in every seat, or the partner role's model in the other seats.")
@click.option("--judge/--no-judge", default=False, show_default=True,
              help="Run the SOTOPIA-EVAL judge on each episode; pass rate then also needs judge goal >= threshold.")
@click.option("--judge-threshold", default=7.0, show_default=True)
@click.option("--gating", type=click.Choice(["on", "off"]), default="on", show_default=True,
              help="'off' keeps every pair (the no-gating ablation); reasons are still recorded.")
@click.option("--min-margin", default=0.1, show_default=True, help="The gate's minimum score margin.")
@click.option("--update", "update_method", type=click.Choice(["memory", "sft", "dpo", "kto"]), default="memory",
              show_default=True, help="Policy update: memory (any API model), or a LoRA adapter trained with TRL "
              "(sft: kept trajectories; dpo/kto: kept pairs), continued from the deployed policy's adapter.")
@click.option("--replay/--no-replay", default=True, show_default=True,
              help="Learn from earlier cycles' kept pairs too (the replay buffer).")
@click.option("--epsilon", default=0.05, show_default=True, help="Deploy gate: allowed drop on earlier levels.")
@click.option("--heldout-per-cell", default=1, show_default=True, type=click.IntRange(1, 4),
              help="Test-split tasks per family and level: they fill R and never choose.")
@click.option("--dev-per-cell", default=1, show_default=True, type=click.IntRange(1, 4),
              help="Dev-split tasks per family and level: the deploy gate chooses on them.")
@click.option("--temperature", default=0.7, show_default=True, help="Sampling temperature of every role.")
@click.option("--concurrency", default=4, show_default=True, help="Episodes played at once.")
@click.option("--workers", type=int, default=0, show_default=True,
              help="Play the collect and evaluate episodes as Ray tasks on this many worker processes "
                   "(0: here, in threads); sets --concurrency to match.")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="Join a running Ray cluster ('auto', ray://head:10001); needs --db postgresql://….")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for report.md, plots and exports [default: swm-learn-<thread>].")
@click.option("--hf-model", default=None, metavar="PATH",
              help="sft/dpo/kto: the base to train (a local Hugging Face directory or a .gguf file) "
              "[default: the embedded SmolLM2 GGUF, dequantised; needs the [train] extra].")
@click.option("--base-gguf", default=None, metavar="FILE",
              help="The GGUF of --hf-model that llama.cpp serves the trained adapters over.")
@click.option("--lora-server", default=None, metavar="URL",
              help="Serve adapters on this OpenAI-compatible server by runtime LoRA loading (vLLM "
              "/v1/load_lora_adapter) instead of the embedded llama.cpp server.")
@click.option("--train-steps", default=-1, show_default=True, help="Training steps per cycle (-1: --train-epochs).")
@click.option("--train-epochs", default=1.0, show_default=True)
@click.option("--train-lr", default=2e-4, show_default=True, help="Learning rate of the LoRA adapter.")
@click.option("--train-rank", default=8, show_default=True, help="LoRA rank of a new adapter.")
@click.option("--train-batch-size", default=2, show_default=True)
@click.option("--train-max-length", default=2048, show_default=True, help="Token limit of prompt + completion.")
@click.option("--train-seed", default=0, show_default=True)
@model_options()
@run_options
def learn_command(cycles: int, levels: str, families: str, episodes_per_level: int, samples_per_task: int,
                  max_turns: int, policy: str, eval_policy: str, self_play: bool, judge: bool, judge_threshold: float,
                  gating: str, min_margin: float, update_method: str, replay: bool, epsilon: float,
                  heldout_per_cell: int, dev_per_cell: int, temperature: float, concurrency: int, workers: int,
                  ray_address: str | None, out_dir: Path | None,
                  hf_model: str | None, base_gguf: str | None, lora_server: str | None, train_steps: int,
                  train_epochs: float, train_lr: float, train_rank: int, train_batch_size: int, train_max_length: int,
                  train_seed: int, db: str | None, thread_id: str | None, as_json: bool, **models: Any) -> None:
    """Run the lifelong loop: verifiable tasks, self-play episodes, gated pairs, updates, retention metrics.

    Kill it at any point and rerun with the same --db and --thread-id: finished episodes are
    kept and none is played twice. A finished thread rewrites its report with no model calls.
    """
    from checkpoints import hold_lease, open_saver, pending_nodes, thread_status
    from graphs import lifelong
    from swm.lifelong import store as ls
    from swm.lifelong.jobs import failed_now
    from swm.lifelong.report import policy_listing, write_report
    from swm.tasks.splits import HELDOUT_VERSION

    if cycles < 1 or episodes_per_level < 1 or samples_per_task < 1 or concurrency < 1:
        raise InputError("cycles, episodes per level, samples per task and concurrency must be at least 1")
    thread = thread_id or f"learn-{uuid.uuid4().hex[:10]}"
    folder = str(out_dir or Path(f"swm-learn-{thread}"))
    plan: dict[str, Any] = {"run_id": thread, "cycles": cycles, "levels": comma_list(levels, LEVELS, "level"),
            "families": comma_list(families, TASK_FAMILIES, "family"), "episodes_per_level": episodes_per_level,
            "samples_per_task": samples_per_task, "max_turns": max_turns, "policy": policy,
            "eval_policy": eval_policy, "self_play": self_play, "judge": judge, "judge_threshold": judge_threshold,
            "gating": gating == "on", "min_margin": min_margin, "update": update_method, "replay": replay,
            "epsilon": epsilon, "heldout_per_cell": heldout_per_cell, "dev_per_cell": dev_per_cell,
            "out_dir": folder, "hf_model": hf_model, "base_gguf": base_gguf, "lora_server": lora_server,
            "train": {"max_steps": train_steps, "epochs": train_epochs, "learning_rate": train_lr, "rank": train_rank,
                      "alpha": 2 * train_rank, "batch_size": train_batch_size, "max_length": train_max_length,
                      "seed": train_seed}}
    ctx = make_context(db, temperature=temperature, **models)
    inject_test_models(ctx)
    ctx.out_dir = folder  # reports and exports go here, whatever folder the thread was started with
    store = ctx.experience_store()
    if workers > 0:
        concurrency = workers
    config: RunnableConfig = {"configurable": {"thread_id": thread}, "max_concurrency": concurrency,
                              "recursion_limit": 10_000}
    start = time.perf_counter()
    from tqdm import tqdm  # type: ignore[import-untyped]

    with ExitStack() as stack:
        stack.enter_context(hold_lease(db_path(db), thread))
        saver = stack.enter_context(open_saver(db_path(db)))
        runner = None
        if workers > 0:
            from swm.commands.workers import lifelong_runner_on_ray, ray_cluster

            runner = lifelong_runner_on_ray(stack.enter_context(ray_cluster(workers, ray_address, db_path(db))),
                                            ctx, db_path(db))
        graph = lifelong.build(runner).compile(checkpointer=saver)
        snapshot = graph.get_state(config)
        status = thread_status(snapshot)
        inputs: Any = {"plan": plan}
        if status != "started":
            plan, extend = _reconcile(thread, status, dict(snapshot.values["plan"]), plan, _given_options())
            plan = {**plan, "out_dir": ctx.out_dir}
            inputs = None
            if extend:
                graph.update_state(config, {"plan": {**snapshot.values["plan"], "cycles": plan["cycles"]}},
                                   as_node="deploy")
                status = "resumed"
                click.echo(f"extending finished thread {thread} from {extend} to {plan['cycles']} cycles", err=True)
        if status == "finished":
            click.echo(f"thread {thread} already finished; rewriting its report in {ctx.out_dir} (no model calls)",
                       err=True)
            values = dict(snapshot.values)
            values["report_path"] = str(write_report(store, plan, usage=values.get("usage"),
                                                     agent_spec=ctx.spec_for("agent")))
        else:
            if status == "resumed":
                pending = pending_nodes(graph.get_state(config))
                click.echo(f"resuming thread {thread} at {', '.join(pending)}", err=True)
                stopped_before_use = bool(set(snapshot.next) & {"convert", "deploy"})
                failed = failed_now(cast(LifelongState, snapshot.values), store) if stopped_before_use else []
                if failed:  # the phase stopped on failed episodes: its node sends only those again
                    ctx.resend_failed = True
                    click.echo(f"playing again the {len(failed)} episode(s) that failed", err=True)
            else:
                click.echo(f"thread: {thread} (rerun with --thread-id {thread} to resume if interrupted)", err=True)
            bar = tqdm(total=_expected_episodes(plan), initial=ls.count_episodes(store, thread), unit="episode",
                       desc="episodes", file=sys.stderr, dynamic_ncols=True)
            seen: dict[str, Any] = dict(snapshot.values or {})
            # sync: each finished episode branch is on disk before the run goes on, so a kill loses
            # no finished work (and none of its usage)
            for chunk in graph.stream(inputs, config, context=ctx, stream_mode="updates", durability="sync"):
                for update in chunk.values():
                    if isinstance(update, dict):
                        seen.update({k: v for k, v in update.items() if k in ("cycle", "phase")})
                bar.n = ls.count_episodes(store, thread)
                bar.set_postfix_str(_progress_line(store, plan, seen), refresh=True)
            bar.close()
            values = dict(graph.get_state(config).values)
    wall = time.perf_counter() - start
    total = total_usage(values.get("usage"))
    counts = ls.gate_counts(store, thread)
    summary = {"thread_id": thread, "report": values.get("report_path"), "wall_seconds": round(wall, 1),
               "episodes": ls.count_episodes(store, thread), "collect": ls.count_episodes(store, thread, "collect"),
               "dev": ls.count_episodes(store, thread, "dev"), "test": ls.count_episodes(store, thread, "test"),
               "calls": total["calls"], "pairs": counts.get("_total", 0), "kept": counts.get("_kept", 0),
               "rejected_by_rule": {k: v for k, v in counts.items() if not k.startswith("_")},
               "deploys": values.get("decisions"), "policies": policy_listing(store, thread, ctx.spec_for("agent")),
               "splits": {"version": HELDOUT_VERSION, **ls.split_ids(store, thread)}, "usage": values.get("usage"),
               "failed": len(ls.failures(store, thread))}
    if as_json:
        echo_json(summary)
        return
    click.echo(f"report: {summary['report']}")
    click.echo(f"episodes {summary['episodes']} (collect {summary['collect']}, dev {summary['dev']}, test "
               f"{summary['test']}); pairs "
               f"{summary['pairs']}, kept {summary['kept']}; rejects {summary['rejected_by_rule']}")
    for cycle, text in sorted((values.get("decisions") or {}).items(), key=lambda kv: int(kv[0])):
        click.echo(f"cycle {cycle}: {text}")
    if summary["failed"]:
        click.echo(f"problem: {summary['failed']} episode(s) failed after their retries; they are listed in the "
                   "report and left out of R and the pairs", err=True)
    click.echo(f"calls {total['calls']}, tokens {total['prompt_tokens']}+{total['completion_tokens']}, "
               f"wall {wall:.1f} s", err=True)


def register(main: click.Group, bench: click.Group) -> None:
    main.add_command(learn_command)
