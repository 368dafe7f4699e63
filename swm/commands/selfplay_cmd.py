"""``swm selfplay``: one model in every seat, per-role rewards, hierarchical or group advantages, PPO on a LoRA.

Its training defaults are the recipe that learned on the two-seat task (`swm.selfplay.plan.RECIPE_PPO`,
docs/results/selfplay.md), and an option it shares with ``swm learn`` (``--train-lr``, ``--train-epochs``,
``--train-batch-size``, ``--train-rank``, ``--estimator``, ``--max-turns``, ``--temperature``) means the same
there. A preset (``--preset``) sets every option it names that was not given.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from swm.commands._common import TableChoice, aliased, db_path, echo_json, endpoint_options, record_run, run_options
from swm.commands.invocation import config_option
from swm.commands.progress import PROGRESS_ALIASES, iteration_line, printer, quiet_option
from swm.credentials import remember
from swm.errors import InputError
from swm.games import game_names
from swm.selfplay.plan import RECIPE_ESTIMATOR, RECIPE_PPO, SelfPlayPlan
from swm.serving.formats import FORMATS
from swm.tasks.families import (
    FAMILIES,
    LEVELS,
    NAME_POLICIES,
    TWO_SEAT,
    level_families,
)
from swm.tasks.levels import LEVEL_ROWS, seat_levels
from swm.tracking import REPORTER_NAMES, check_reporter
from swm.training.advantages import ESTIMATORS, estimator_names


def _families() -> tuple[str, ...]:
    """The task families (episode levels) and every seat level's (two-seat shapes, multi-turn: `seat_levels`)."""
    return tuple(dict.fromkeys([*FAMILIES, *(family for level in seat_levels() for family in level_families(level))]))


def _levels() -> tuple[str, ...]:
    """The episode levels and the levels one model plays in every seat (`swm.tasks.levels`), read when asked."""
    return (*LEVELS, *seat_levels())


# named recipes a results page cites, by the option names of this command: what the page ran
PRESETS: dict[str, dict[str, Any]] = {
    # docs/results/selfplay.md, "Two seats, one model" (2026-11-26): 24.0% -> 54.0% after 16 iterations; its splits
    # drew every name from the shared pool (`--names shared`)
    "two-seat-2026-11": {"family": "mutual_friend", "level": TWO_SEAT, "names": "shared", "estimator": "group",
                         "lr": 2e-4, "train_epochs": 1, "train_batch_size": 8, "kl_coef": 0.0, "iterations": 16,
                         "tasks_per_iteration": 4, "group_size": 8, "max_turns": 4, "eval_tasks": 200,
                         "temperature": 0.7, "lora_r": 8,
                         # as that page ran: float32, advantages whitened about the batch mean, the Q4_1 base served
                         "autocast": "off", "whiten": "centre", "served_format": "shipped"},
    # docs/results/selfplay.md, "Conversations learn at four messages" (2026-12-02): 5.5% -> 17.0% of 200 test tasks
    # after 6 iterations from the rs-SFT warm start (--from); group-turn advantages over the joint outcome plus half
    # of each message's belief gain. The page's second stage (--stage 1), seat draws (SWM_EMBEDDED_DRAW=seat).
    "multi-turn-4-2026-12": {"family": "mutual_friend", "level": "multi-turn-4", "names": "disjoint",
                             "estimator": "group-turn", "belief": 0.5, "lr": 2e-4, "train_epochs": 1,
                             "train_batch_size": 8, "kl_coef": 0.0, "iterations": 6, "tasks_per_iteration": 4,
                             "group_size": 8, "stage": 1, "eval_tasks": 20, "temperature": 0.7, "lora_r": 8,
                             "served_format": "shipped"},  # sampled on the shipped Q4_1 base, as the page ran
    # docs/results/selfplay.md, "Four messages, eight tasks an iteration and the per-seat answer credit" (2026-12-03):
    # 4.5% -> 12.5% of 200 test tasks (p = 0.0015, one seed) from the two-seat adapter itself (--from), no rs-SFT:
    # 8 tasks x G = 8 an iteration, group-turn advantages, half of each message's belief gain and +0.5 to a seat whose
    # own first answer is right; the page's bench.two_seat plan (tests/test_selfplay_defaults.py compares them)
    "multi-turn-4-2026-12-03": {"family": "mutual_friend", "level": "multi-turn-4", "names": "disjoint",
                                "estimator": "group-turn", "belief": 0.5, "answer_reward": 0.5, "lr": 2e-4,
                                "train_epochs": 1, "train_batch_size": 8, "kl_coef": 0.0, "iterations": 6,
                                "tasks_per_iteration": 8, "group_size": 8, "stage": 1, "eval_tasks": 20,
                                "temperature": 0.7, "lora_r": 8, "served_format": "shipped"},  # the Q4_1 base
}


def apply_preset(ctx: click.Context, name: str | None, params: dict[str, Any]) -> dict[str, Any]:
    """Return ``params`` with the preset's values in place of every option left at its default."""
    if name is None:
        return params
    given = {key for key in params if ctx.get_parameter_source(key) not in (None, ParameterSource.DEFAULT)}
    return {**params, **{key: value for key, value in PRESETS[name].items() if key not in given}}


@click.command("selfplay", cls=aliased(lr="--train-lr", lora_r="--train-rank", max_concurrency="--concurrency",
                                           **PROGRESS_ALIASES))
@config_option
@click.option("--preset", type=click.Choice(sorted(PRESETS)), default=None,
              help="A named recipe a results page cites (two-seat-2026-11: docs/results/selfplay.md's two-seat "
                   "run; multi-turn-4-2026-12: its four-message conversation run, from an rs-SFT warm start; "
                   "multi-turn-4-2026-12-03: the four-message run from the two-seat adapter, 8 tasks an iteration and "
                   "the per-seat answer credit); it sets "
                   "every option it names that is not given.")
@click.option("--iterations", default=2, show_default=True, help="Rollout → update iterations.")
@click.option("--family", type=TableChoice(_families), default="negotiation", show_default=True,
              help="The verifiable task family (its code checker gives the rewards).")
@click.option("--level", type=TableChoice(_levels), default="easy", show_default=True,
              help="An episode level, or a level one model plays in every seat: " + "; ".join(
                  f"{name}: {LEVEL_ROWS[name].summary}" for name in seat_levels()) + ".")
@click.option("--names", type=click.Choice(NAME_POLICIES), default="disjoint", show_default=True,
              help="Name pools of generated (two-seat, multi-turn) tasks: training and test names disjoint, or one "
                   "shared pool (the two-seat splits before 2026-11-28).")
@click.option("--stage", default=0, show_default=True, type=click.IntRange(0),
              help="The run's curriculum stage: training tasks come from a hash of (seed, stage, iteration, "
                   "index), so stages and seeds never share one.")
@click.option("--game", type=TableChoice(game_names), default=None,
              help="Play a hidden-role game instead of the task family (--tasks deals per iteration, --group games "
                   "of each; each iteration's summary pools the moderator's per-role signals over its games).")
@click.option("--players", default=5, show_default=True, help="Seats of the game.")
@click.option("--max-rounds", default=2, show_default=True, help="Game rounds before a draw.")
@click.option("--illegal", type=click.Choice(["drop", "filter"]), default="filter", show_default=True,
              help="An illegal game move fails the rollout (drop), or keeps the game and earns --illegal-reward "
                   "at its own turn (filter: the per-move legality signal).")
@click.option("--illegal-reward", default=-0.5, show_default=True, type=click.FloatRange(max=0),
              help="Reward of an illegal game move (0: no legality signal).")
@click.option("--tasks", "tasks_per_iteration", default=4, show_default=True, help="Training tasks per iteration.")
@click.option("--group", "group_size", default=8, show_default=True, help="G: rollouts per task (a group).")
@click.option("--max-turns", default=8, show_default=True,
              help="Turn limit per rollout (as swm learn's per episode; a two-seat task ends at the first answer, "
                   "a multi-turn task at its budget).")
@click.option("--eval-tasks", default=2, show_default=True, type=click.IntRange(0),
              help="Held-out tasks played after each update (an episode level's frozen file has 4 a family; "
                   "two-seat tasks are generated, any number).")
@click.option("--eval-split", type=click.Choice(["dev", "test"]), default="test", show_default=True,
              help="The held-out split evaluated after each update.")
@click.option("--estimator", type=TableChoice(estimator_names), default=RECIPE_ESTIMATOR, show_default=True,
              help="The advantage estimator: " + "; ".join(f"{row.name}: {row.summary}" for row in ESTIMATORS.values())
              + ".")
@click.option("--gamma", default=1.0, show_default=True, help="Turn-level discount γ.")
@click.option("--lam", default=0.95, show_default=True, help="Turn-level GAE λ.")
@click.option("--gamma-tok", default=1.0, show_default=True, help="Token-level discount γ_tok.")
@click.option("--lam-tok", default=0.95, show_default=True, help="Token-level GAE λ_tok.")
@click.option("--turn-signal", type=click.Choice(["return", "advantage"]), default="return", show_default=True,
              help="What a turn's last token is rewarded with in the token-level GAE.")
@click.option("--judge-weight", default=0.0, show_default=True,
              help="Weight of per-turn judge scores in [0, 1] (0: no judge; task families only).")
@click.option("--judge-model", default=None, metavar="SPEC",
              help="The judge's model (a spec as for every role; default: SWM_MODEL_JUDGE, SWM_MODEL, OpenAI or "
                   "the embedded model).")
@click.option("--answer-reward", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="Added to a seat's reward when its own first answer is right (multi-turn tasks; 0: the joint "
                   "reward alone).")
@click.option("--attempt-reward", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="Added to a seat's reward when its own first answer names one person of the lists, unhedged, "
                   "right or wrong (multi-turn tasks): silence below a guess; 0: off.")
@click.option("--belief", "belief", default=0.0, show_default=True, type=click.FloatRange(min=0),
              help="Weight of each multi-turn message's belief gain (the partner's log-probability of the shared "
                   "friend on its closing prompt after the message minus before, under the sampling policy; pays "
                   "for the seat's own names disclosed, never for a broken cap, an echo or an answer: "
                   "swm.selfplay.belief). 0: off.")
@click.option("--belief-shuffle", is_flag=True, help="The shuffled-turn control: the iteration's belief gains are "
                                                     "permuted among its turns before they are mixed in.")
@click.option("--no-filter", is_flag=True, help="Turn the quality filter off (the reward-hacking ablation).")
@click.option("--base", default="embedded", show_default=True,
              help="Base model: 'embedded' (SmolLM2 GGUF, dequantised), a .gguf file or a HF model directory.")
@click.option("--sampler", type=click.Choice(["auto", "served", "torch"]), default="auto", show_default=True,
              help="served: a server plays each iteration's adapter for the rollouts (llama.cpp as a GGUF LoRA, or "
                   "--lora-server); torch: sample in torch; auto: served with --lora-server, or when "
                   "llama-cpp-python and a base GGUF are there.")
@click.option("--lora-server", default=None, metavar="URL",
              help="Serve each iteration's adapter on this OpenAI-compatible server by runtime LoRA loading (vLLM "
                   "with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), which must read --out; the "
                   "adapter is checked after every load (listed by name, its content, a greedy probe).")
@click.option("--base-gguf", default=None, metavar="PATH",
              help="The GGUF llama.cpp serves for a HF-directory --base (same weights and vocabulary).")
@click.option("--max-new-tokens", default=32, show_default=True)
@click.option("--temperature", default=0.7, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Sampling temperature of the rollouts (0.7 suits small models).")
@click.option("--train-lr", "lr", default=RECIPE_PPO.lr, show_default=True, help="Learning rate of the LoRA adapter.")
@click.option("--train-epochs", default=RECIPE_PPO.epochs, show_default=True, type=click.IntRange(1),
              help="PPO epochs over each iteration's turns (as swm learn --update ppo's).")
@click.option("--train-batch-size", default=RECIPE_PPO.minibatch, show_default=True, type=click.IntRange(1),
              help="Turns per optimizer step, the PPO minibatch (swm learn's rows per step; its default, 2, is "
                   "for whole decision or episode samples).")
@click.option("--micro-batch", default=None, type=click.IntRange(1, None),
              help="Rows per forward/backward inside a PPO minibatch, gradients accumulated (less memory, "
                   "same update). Default: as many as keep rows x the longest row within 2,048 tokens "
                   "(PPOConfig.micro_tokens; a multi-turn seat's transcript goes one row at a time).")
@click.option("--kl-coef", default=RECIPE_PPO.kl_coef, show_default=True,
              help="KL penalty to the base (0: no penalty and no reference pass).")
@click.option("--train-rank", "lora_r", default=8, show_default=True, help="LoRA rank of a new adapter.")
@click.option("--from", "warm_start", default=None, metavar="PATH",
              help="Start from a trained adapter instead of a fresh one: a swm learn adapter folder (or its --out "
                   "with one adapter), a self-play checkpoint or run folder.")
@click.option("--threads", default=None, type=int, help="torch threads (default: every core this process may use).")
@click.option("--autocast", type=click.Choice(["auto", "bfloat16", "off"]), default="auto", show_default=True,
              help="bfloat16 autocast of torch's scoring and update on the CPU (auto: where the CPU has AVX-512 "
                   "BF16 or AMX; off: float32, the path before 2026-12-01).")
@click.option("--score-old", type=click.Choice(["update", "sample"]), default="update", show_default=True,
              help="π_old of a served rollout: scored at the update, once per seat's transcript and only for rows "
                   "with a signal (update), or each turn as it is sampled (sample, the path before).")
@click.option("--served-format", type=click.Choice(["auto", *FORMATS]),
              default="auto", show_default=True,
              help="The number format llama.cpp serves the base in while sampling (auto: SWM_EMBEDDED_FORMAT, "
                   "else f16, the weights torch trains; shipped: SmolLM2's Q4_1, the path before 2026-12-07).")
@click.option("--skip-zero", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="Rows whose advantages are all zero are not forwarded (auto: only where exact, no KL and no "
                   "value head).")
@click.option("--shared-prefix/--no-shared-prefix", default=True, show_default=True,
              help="A group's rows forward the prefix they share (each seat's first prompt) once.")
@click.option("--whiten", type=click.Choice(["estimator", "centre", "scale", "off"]), default="estimator",
              show_default=True, help="Whitening of token advantages per role over the batch (estimator: the "
                                      "estimator's own; group's is scale, so a group without signal keeps 0).")
@click.option("--seed", default=0, show_default=True, help="Seeds the adapter, the training tasks and the sampling.")
@click.option("--concurrency", "max_concurrency", default=None, type=click.IntRange(1),
              help="Rollouts played at once [default: the embedded server's slots when served, 1 in torch].")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("swm-selfplay"),
              show_default=True, help="Run folder: checkpoints/iter-NNNN (adapter, value head, optimiser).")
@click.option("--report-to", type=click.Choice(REPORTER_NAMES), default="none", show_default=True,
              help="Log each iteration's numbers (per-role rewards, held-out rates, KL, loss, clip fraction, filter, "
                   "speed: swm.selfplay.scalars) to one tracker run named after the thread: TensorBoard event files "
                   "in <out>/<thread>/runs, or a wandb / mlflow / trackio run set up by their own environment "
                   "variables (WANDB_MODE=offline, MLFLOW_TRACKING_URI, ...). A tracker whose package is not "
                   "installed is refused before the run starts.")
@click.option("--export", "export_path", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR", help="Also write every seat of the run's finished rollouts to DIR as JSONL with a "
                                  "dataset card (TRL's messages with rewards; datasets.load_dataset(DIR) reads "
                                  "train/ and eval/): after the run, or at once for a finished --thread-id.")
@endpoint_options
@run_options
@quiet_option
@click.pass_context
def selfplay_command(ctx: click.Context, preset: str | None, **params: Any) -> None:
    """Self-play RL: one LoRA policy plays every seat of a verifiable task; PPO on per-role rewards.

    Needs the train extra (torch, peft, transformers, gguf). Kill it at any point and rerun with
    the same --db and --thread-id: stored rollouts are not played again, and the adapter,
    value head and optimiser state of each iteration are saved atomically. Rollouts and each
    iteration's summary are shown on stderr as they land (--no-progress: none).
    """
    options = apply_preset(ctx, preset, params)
    thread = options["thread_id"] or f"selfplay-{uuid.uuid4().hex[:10]}"
    _run(options, thread, selfplay_plan(thread, options))
    if options["export_path"] is not None:
        from swm.selfplay.export import export_from_db

        click.echo(export_from_db(db_path(options["db"]), thread, options["export_path"]), err=True)


def selfplay_plan(thread: str, o: dict[str, Any]) -> SelfPlayPlan:
    """Return the run's `SelfPlayPlan` from the command's options (a one-line error if it does not hold)."""
    from pydantic import ValidationError

    from swm.selfplay.checkpoint import warm_start_adapter

    check_reporter(o["report_to"])  # before the warm start is read or the run is recorded
    init_adapter = str(warm_start_adapter(o["warm_start"]).resolve()) if o["warm_start"] else None
    lora_server = o["lora_server"]
    try:
        return SelfPlayPlan.model_validate({
            "run_id": thread, "iterations": o["iterations"], "family": o["family"], "level": o["level"],
            "game": o["game"], "players": o["players"], "game_options": {"max_rounds": o["max_rounds"]},
            "illegal": o["illegal"], "tasks_per_iteration": o["tasks_per_iteration"], "group_size": o["group_size"],
            "max_turns": o["max_turns"], "eval_tasks": o["eval_tasks"], "eval_split": o["eval_split"],
            "seed": o["seed"], "out_dir": str(o["out_dir"]), "names": o["names"], "stage": o["stage"],
            "report_to": o["report_to"],
            # the server's key stays in this process (swm.credentials): the plan records the URL with *** for it
            "policy": {"base": o["base"], "sampler": o["sampler"],
                       "lora_server": remember(lora_server) if lora_server else None,
                       "base_gguf": o["base_gguf"], "max_new_tokens": o["max_new_tokens"],
                       "temperature": o["temperature"], "init_adapter": init_adapter,
                       "lora_r": o["lora_r"], "lora_alpha": 2 * o["lora_r"], "threads": o["threads"],
                       "autocast": o["autocast"], "score_old": o["score_old"],
                       "served_format": o["served_format"]},
            "ppo": {"lr": o["lr"], "kl_coef": o["kl_coef"], "epochs": o["train_epochs"],
                    "minibatch": o["train_batch_size"], "micro_batch": o["micro_batch"],
                    "skip_zero": o["skip_zero"], "shared_prefix": o["shared_prefix"]},
            "advantage": {"estimator": o["estimator"], "gamma": o["gamma"], "lam": o["lam"],
                          "gamma_tok": o["gamma_tok"], "lam_tok": o["lam_tok"], "turn_signal": o["turn_signal"],
                          "whiten": o["whiten"]},
            "reward": {"judge_weight": o["judge_weight"], "quality_filter": not o["no_filter"],
                       "illegal_move": o["illegal_reward"], "answer": o["answer_reward"],
                       "attempt": o["attempt_reward"],
                       "belief": o["belief"], "belief_shuffle": o["belief_shuffle"]}})
    except ValidationError as err:
        raise InputError(f"bad self-play setting: {err.errors()[0]['loc']}: {err.errors()[0]['msg']}") from err


def _run(o: dict[str, Any], thread: str, plan: SelfPlayPlan) -> None:
    from swm.graphs.selfplay import train

    db, judge_weight, as_json = o["db"], o["judge_weight"], o["as_json"]
    try:
        import peft  # noqa: F401
        import torch  # noqa: F401
    except ImportError as err:
        raise InputError(f"swm selfplay needs the train extra ({err.name} is missing)",
                         "pip install torch==2.13.0 && pip install -e '.[train]'") from err
    from swm.selfplay.served import sampling_format, sampling_threads

    threads = sampling_threads(plan.policy)
    if threads:
        click.echo(f"llama-server: {threads} threads while sampling (SWM_EMBEDDED_THREADS sets them)", err=True)
    served_format = sampling_format(plan.policy)
    if served_format:
        click.echo(f"llama-server: the base served in {served_format} (--served-format)", err=True)
    click.echo(f"thread: {thread} (rerun with --thread-id {thread} to resume if interrupted)", err=True)
    from swm.checkpoints import open_store

    runs = open_store(db_path(db))
    record_run(runs, thread, "selfplay", "selfplay")
    runs.close()
    context = None
    if judge_weight > 0:
        from swm.commands._common import make_context

        context = make_context(db, judge_model=o["judge_model"], timeout=o["timeout"], max_retries=o["max_retries"])
    out = train(plan, db=db_path(db), thread_id=thread, context=context, on_event=printer(o["quiet"]),
                max_concurrency=o["max_concurrency"])
    if as_json:
        echo_json({k: out.get(k) for k in ("thread_id", "iteration", "stopped", "summaries", "current")})
        return
    for i, summary in sorted((out.get("summaries") or {}).items(), key=lambda kv: int(kv[0])):
        click.echo(iteration_line(i, summary))
    if out.get("stopped"):
        click.echo(f"stopped early: {out['stopped']}", err=True)
    click.echo(f"adapter: {(out.get('current') or {}).get('adapter')}")
