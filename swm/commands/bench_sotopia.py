"""``swm bench sotopia``: SOTOPIA episodes under several policies side by side, with one table."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from swm.commands._common import (
    act_order_option,
    comma_list,
    concurrency_option,
    db_path,
    finish_bench,
    given_options,
    make_context,
    model_options,
    record_run,
    resolve_concurrency,
    run_options,
    serving_record,
    writable_out,
)
from swm.commands.invocation import config_option
from swm.commands.play import EPISODE_ROLES, inject_test_models
from swm.defaults import EPISODE_POLICIES as POLICIES
from swm.errors import InputError
from swm.filenames import file_name

if TYPE_CHECKING:
    from swm.context import ActOrder, SWMContext
    from swm.social.bench import EpisodesRun

ACT_ORDER_BEFORE = {"act_order": "sotopia"}  # a run begun before --act-order acted in SOTOPIA's order


def episode_player(ctx: SWMContext, db: str | Path) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    """Return ``play(episode_id, inputs)``: run (or resume) one episode on its own thread and database connection."""
    from langchain_core.runnables import RunnableConfig

    from swm.checkpoints import open_saver, run_thread
    from swm.graphs import episode

    def play(episode_id: str, inputs: dict[str, Any]) -> dict[str, Any]:
        config: RunnableConfig = {"configurable": {"thread_id": episode_id}}
        with open_saver(db) as saver:
            out, _ = run_thread(episode.build().compile(checkpointer=saver), inputs, config, ctx)
        return out

    return play


def _scenarios(hard: bool, data: Path | None, n: int | None) -> list[Any]:
    """Return the scenarios to play: ``--data`` (a file, or ``shipped``) or the package's SOTOPIA sample, ``n`` of
    them."""
    from swm.scenarios import load_jsonl, load_sotopia, shipped
    from swm.social.bench import spread

    if str(data) == "shipped":
        pool = shipped()
    elif data is not None:
        pool = load_jsonl(data)
        if hard and any(s.hard for s in pool):  # a file that flags no hard rows is taken whole
            pool = [s for s in pool if s.hard]
    else:
        pool = load_sotopia(hard=True if hard else None)
    scenarios = spread(pool, n)
    if not scenarios:
        raise InputError("no scenario selected", "check --data, --hard/--all and --n")
    return scenarios


@click.command("sotopia")
@config_option
@click.option("--hard/--all", "hard", default=True, show_default=True,
              help="The 70 pairings of SOTOPIA's 14 hard scenarios, or all 146 rows of the SOTOPIA sample.")
@click.option("--data", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Scenario JSONL [default: the SOTOPIA sample shipped in the package, swm/data/sotopia/"
                   "sotopia_scenarios.jsonl]; 'shipped' for swm's own few scenarios.")
@click.option("--policies", default="plain,foresee", show_default=True,
              help="Comma list of the tested agent's policies to compare (plain, foresee, lookahead).")
@click.option("--partner-policy", type=click.Choice(POLICIES), default="plain", show_default=True)
@click.option("--n", "n", type=int, default=None,
              help="Scenarios per policy, spread over environments (each env's first pairing first) [default: all]; "
                   "each is played once per tested seat.")
@click.option("--seats", type=click.Choice(["both", "first", "second"]), default="both", show_default=True,
              help="Which side is the tested agent: both (each scenario played twice, as SOTOPIA evaluates), or one.")
@click.option("--max-turns", type=int, default=20, show_default=True)
@click.option("--width", type=int, default=1, show_default=True, help="Rollout candidates N.")
@click.option("--depth", type=int, default=1, show_default=True, help="Rollout steps k.")
@concurrency_option("Episodes")
@click.option("--workers", type=int, default=0, show_default=True,
              help="Play the episodes as Ray tasks on this many worker processes (0: here, in threads).")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="Join a running Ray cluster ('auto', ray://head:10001); needs --db postgresql://….")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for sotopia.md, sotopia.json, episodes.jsonl and transcripts/ "
                   "[default: swm-results/<run id>].")
@click.option("--judge-protocol", type=click.Choice(["sotopia", "swm"]), default="sotopia", show_default=True,
              help="sotopia: sotopia's own evaluator (one call judges both agents with its full rubric, 'did "
                   "nothing' turns filtered, no end reason; a reply out of range is reformatted once, then the "
                   "episode is unscored and counted); swm: one call per agent with swm's short rubric.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@act_order_option
@model_options(*EPISODE_ROLES)
@run_options
def sotopia_command(hard: bool, data: Path | None, policies: str, partner_policy: str, n: int | None, seats: str,
                    max_turns: int, width: int, depth: int, concurrency: int | None, workers: int,
                    ray_address: str | None, out_dir: Path | None, judge_protocol: str,
                    no_progress: bool, act_order: str, db: str | None, thread_id: str | None, as_json: bool,
                    **models: Any) -> None:
    """Run SOTOPIA episodes per policy and write goal and every SOTOPIA-EVAL dimension (mean ± 95% CI).

    Each scenario is played with each side as the tested agent (--seats), the partner playing
    --partner-policy; scores are the tested agent's, over all episodes, per side and per setting
    (cooperative / competitive / mixed). Also reports LLM calls and tokens per turn and episodes
    per hour. The judge is its own model (--judge-model, SWM_MODEL_JUDGE, or gpt-4o on OpenAI);
    a judge that is the agent's own model is warned about and recorded. Rerun with the same --db
    and --thread-id to resume: finished episodes are skipped.
    """
    from swm.checkpoints import hold_lease

    chosen = comma_list(policies, POLICIES, "policy")
    scenarios = _scenarios(hard, data, n)
    run_id = thread_id or f"sotopia-{uuid.uuid4().hex[:10]}"
    # the lease first: a second run of a thread another one holds is refused before it builds anything (the models,
    # the stores) or records itself as a run
    with hold_lease(db_path(db), run_id):
        ctx = make_context(db, lookahead_width=width, lookahead_depth=depth, act_order=act_order, **models)
        inject_test_models(ctx)
        in_flight = resolve_concurrency(ctx, concurrency)
        ctx, opts = _recorded_options(ctx, run_id, {"partner_policy": partner_policy, "max_turns": max_turns,
                                                    "width": width, "depth": depth, "judge_protocol": judge_protocol,
                                                    "act_order": act_order})
        record_run(ctx.experience_store(), run_id, "sotopia", "episode")
        folder = writable_out(out_dir or Path("swm-results") / file_name(run_id))
        seat_list = {"both": (0, 1), "first": (0,), "second": (1,)}[seats]
        self_judged = ctx.judge_is_agent()
        if self_judged:
            click.echo(self_judging_warning(ctx), err=True)
        click.echo(f"judge protocol: {opts['judge_protocol']}; acting prompt order: {opts['act_order']}", err=True)
        episodes = sum(1 for s in scenarios for k in seat_list if k < len(s.names)) * len(chosen)
        click.echo(f"run {run_id}: {len(scenarios)} scenarios × {len(seat_list)} seats × {len(chosen)} policies, "
                   f"max {opts['max_turns']} turns (rerun with --thread-id {run_id} --db {db_path(db)} to resume if "
                   "interrupted)", err=True)
        result, in_flight = _play_episodes(ctx, db, run_id, opts, scenarios, chosen, seat_list, episodes=episodes,
                                           workers=workers, ray_address=ray_address, in_flight=in_flight,
                                           no_progress=no_progress)
        _report(ctx, folder, result, opts, scenarios, chosen, run_id=run_id, seats=seats, hard=hard,
                self_judged=self_judged, in_flight=in_flight, as_json=as_json)


def self_judging_warning(ctx: SWMContext) -> str:
    """Return the warning for a judge that is the tested agent's own model, naming where the judge's model came from:
    a judge model given (``--judge-model``, or ``judge-model`` in ``--config``) or ``SWM_MODEL_JUDGE`` needs another
    model, a judge left to its default needs one given."""
    head = f"warning: the judge is the tested agent's own model ({ctx.spec_for('judge')}): self-judging inflates scores"
    injected = ctx.llm is not None or bool(ctx.chat_models)  # a given --judge-model is not what judges then
    if ctx.models.get("judge") and not injected:
        fix = "the judge model given (--judge-model or the config's judge-model) is the agent's: give it another one"
    elif os.environ.get("SWM_MODEL_JUDGE") and not injected:
        fix = "SWM_MODEL_JUDGE names the agent's model: set it to another one, or pass --judge-model"
    else:
        fix = "pass --judge-model (or SWM_MODEL_JUDGE)"
    return f"{head}; {fix}. Recorded in the results."


def _recorded_options(ctx: SWMContext, run_id: str, options: dict[str, Any]) -> tuple[SWMContext, dict[str, Any]]:
    """The options the run goes on with: a rerun keeps what it recorded for those left at their defaults."""
    from swm.checkpoints import run_options_for

    kept = run_options_for(ctx.experience_store(), run_id, options, given_options(*options), added=ACT_ORDER_BEFORE)
    if kept != options:
        click.echo(f"run {run_id} goes on with its recorded "
                   f"{', '.join(f'{k} {kept[k]}' for k in options if kept[k] != options[k])}", err=True)
        ctx.lookahead_width, ctx.lookahead_depth = kept["width"], kept["depth"]
        ctx = ctx.with_act_order(cast("ActOrder", kept["act_order"]))
    return ctx, kept


def _play_episodes(ctx: SWMContext, db: str | None, run_id: str, opts: dict[str, Any], scenarios: list[Any],
                   chosen: list[str], seat_list: tuple[int, ...], *, episodes: int, workers: int,
                   ray_address: str | None, in_flight: int, no_progress: bool) -> tuple[EpisodesRun, int]:
    """Play every episode not yet done, here or on Ray workers (the run's lease held by the caller); return the
    result and the episodes that were in flight at once."""
    from contextlib import ExitStack

    from tqdm import tqdm

    from swm.checkpoints import pin_run_options
    from swm.social.bench import bench_episodes, run_bench

    with ExitStack() as stack:
        bar = stack.enter_context(tqdm(total=episodes, desc="episodes", disable=no_progress))
        play: Any = episode_player(ctx, db_path(db))
        if workers > 0:
            in_flight = workers
        planned = bench_episodes(ctx.experience_store(), run_id, chosen, scenarios, seat_list,
                                 on_done=lambda: bar.update(1))
        # a cluster only when an episode is left to play: a rerun of a finished run starts none
        if workers > 0 and planned[1]:
            from swm.commands.workers import player_on_ray, ray_cluster

            ray = stack.enter_context(ray_cluster(workers, ray_address, db_path(db)))
            play = player_on_ray(ray, "episode", ctx, db_path(db))
        # what an episode's result depends on; more scenarios, seats or policies only add episodes
        pin_run_options(ctx.experience_store(), run_id, {
            **opts, **{f"{role}_model": ctx.spec_for(role) for role in EPISODE_ROLES}}, added=ACT_ORDER_BEFORE)
        result = run_bench(scenarios, chosen, ctx, play, run_id,
                           partner_policy=opts["partner_policy"], max_turns=opts["max_turns"], concurrency=in_flight,
                           seats=seat_list, on_done=lambda: bar.update(1), judge_protocol=opts["judge_protocol"],
                           planned=planned)
    return result, in_flight


def _report(ctx: SWMContext, folder: Path, result: EpisodesRun, opts: dict[str, Any], scenarios: list[Any],
            chosen: list[str], *, run_id: str, seats: str, hard: bool, self_judged: bool, in_flight: int,
            as_json: bool) -> None:
    """Write the run's table, episodes and transcripts under ``folder``, then report it (`finish_bench`)."""
    from swm.social.bench import markdown, setting_of, summarise
    from swm.social.export import transcript, write_jsonl

    store = ctx.experience_store()
    table = summarise(store, result["episodes"], chosen)
    (folder / "transcripts").mkdir(parents=True, exist_ok=True)
    done = [e for e in result["episodes"] if e not in result["failed"]]
    write_jsonl(store, done, folder / "episodes.jsonl")
    for eid in done:
        (folder / "transcripts" / f"{file_name(eid)}.txt").write_text(transcript(store, eid) + "\n", encoding="utf-8")
    text = (f"Judge protocol: {opts['judge_protocol']}; acting prompt order: {opts['act_order']} (docs/protocols.md)."
            "\n\n" + markdown(table))
    if result["failed"]:
        text += (f"\n\nFailed episodes (not in the table): {len(result['failed'])}; rerun with the same "
                 "--thread-id to retry only them.")
    meta = {"run_id": run_id, "judge_protocol": opts["judge_protocol"], "act_order": opts["act_order"],
            "policies": chosen, "partner_policy": opts["partner_policy"], "max_turns": opts["max_turns"],
            "scenarios": [s.id for s in scenarios], "seats": seats, "hard": hard, "width": opts["width"],
            "depth": opts["depth"], "models": {r: ctx.spec_for(r) for r in EPISODE_ROLES}, "self_judged": self_judged,
            "settings": {s.id: setting_of(s) for s in scenarios}, "ran": result["ran"], "skipped": result["skipped"],
            "failed": result["failed"], "wall_seconds": round(result["wall"], 1),
            "serving": serving_record(ctx, in_flight)}
    warning = ("**Self-judged:** the judge is the tested agent's own model; scores are not comparable with a "
               "separate judge's.\n\n" if self_judged else "")
    finish_bench(folder, "sotopia", f"SOTOPIA run {run_id}", warning + text, meta, table, result, as_json, "episode")
