"""``swm selfplay``: one model in every seat, per-role rewards, hierarchical or group advantages, PPO on a LoRA."""

from __future__ import annotations

import uuid
from pathlib import Path

import click

from swm.commands._common import TableChoice, aliased, db_path, echo_json, endpoint_options, record_run, run_options
from swm.commands.progress import PROGRESS_ALIASES, iteration_line, printer, quiet_option
from swm.credentials import remember
from swm.errors import InputError
from swm.tasks.families import FAMILIES, LEVELS, TWO_SEAT, TWO_SEAT_SHAPES, two_seat_families
from swm.training.advantages import ESTIMATORS, estimator_names


def _families() -> tuple[str, ...]:
    """The task families (episode levels) and the two-seat ones (`TWO_SEAT_SHAPES`)."""
    return tuple(dict.fromkeys([*FAMILIES, *two_seat_families()]))


@click.command("selfplay", cls=aliased(lr="--train-lr", lora_r="--train-rank", max_concurrency="--concurrency",
                                           **PROGRESS_ALIASES))
@click.option("--iterations", default=2, show_default=True, help="Rollout → update iterations.")
@click.option("--family", type=TableChoice(_families), default="negotiation", show_default=True,
              help="The verifiable task family (its code checker gives the rewards).")
@click.option("--level", type=click.Choice([*LEVELS, TWO_SEAT]), default="easy", show_default=True,
              help="An episode level, or two-seat: one model plays both seats of a short exchange (" + "; ".join(
                  f"{shape.family}: {shape.summary}" for shape in TWO_SEAT_SHAPES.values()) + ").")
@click.option("--game", type=click.Choice(["werewolf"]), default=None,
              help="Play a hidden-role game instead of the task family (--tasks deals per iteration, --group games "
                   "of each; each iteration's summary pools the moderator's per-role signals over its games).")
@click.option("--players", default=5, show_default=True, help="Seats of the game.")
@click.option("--max-rounds", default=2, show_default=True, help="Game rounds before a draw.")
@click.option("--illegal", type=click.Choice(["drop", "filter"]), default="filter", show_default=True,
              help="An illegal game move fails the rollout (drop), or keeps the game and earns --illegal-reward "
                   "at its own turn (filter: the per-move legality signal).")
@click.option("--illegal-reward", default=-0.5, show_default=True, type=click.FloatRange(max=0),
              help="Reward of an illegal game move (0: no legality signal).")
@click.option("--tasks", "tasks_per_iteration", default=2, show_default=True, help="Training tasks per iteration.")
@click.option("--group", "group_size", default=8, show_default=True, help="G: rollouts per task (a group).")
@click.option("--max-turns", default=4, show_default=True)
@click.option("--eval-tasks", default=2, show_default=True, type=click.IntRange(0),
              help="Held-out tasks played after each update (an episode level's frozen file has 4 a family; "
                   "two-seat tasks are generated, any number).")
@click.option("--eval-split", type=click.Choice(["dev", "test"]), default="test", show_default=True,
              help="The held-out split evaluated after each update.")
@click.option("--estimator", type=TableChoice(estimator_names), default="hierarchical", show_default=True,
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
@click.option("--train-lr", "lr", default=1e-4, show_default=True, help="Learning rate of the LoRA adapter.")
@click.option("--micro-batch", default=None, type=click.IntRange(1, None),
              help="Rows per forward/backward inside a PPO minibatch, gradients accumulated (less memory, "
                   "same update).")
@click.option("--kl-coef", default=0.05, show_default=True)
@click.option("--train-rank", "lora_r", default=8, show_default=True, help="LoRA rank of a new adapter.")
@click.option("--from", "warm_start", default=None, metavar="PATH",
              help="Start from a trained adapter instead of a fresh one: a swm learn adapter folder (or its --out "
                   "with one adapter), a self-play checkpoint or run folder.")
@click.option("--threads", default=None, type=int, help="torch threads (default: torch's choice).")
@click.option("--seed", default=0, show_default=True)
@click.option("--concurrency", "max_concurrency", default=None, type=click.IntRange(1),
              help="Rollouts played at once [default: the embedded server's slots when served, 1 in torch].")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("swm-selfplay"),
              show_default=True, help="Run folder: checkpoints/iter-NNNN (adapter, value head, optimiser).")
@endpoint_options
@run_options
@quiet_option
def selfplay_command(iterations: int, family: str, level: str, game: str | None, players: int, max_rounds: int,
                     illegal: str, illegal_reward: float, tasks_per_iteration: int, group_size: int,
                     max_turns: int, eval_tasks: int, estimator: str, gamma: float, lam: float, gamma_tok: float,
                     lam_tok: float, turn_signal: str, judge_weight: float, judge_model: str | None,
                     no_filter: bool, base: str, sampler: str, lora_server: str | None, base_gguf: str | None,
                     max_new_tokens: int, temperature: float, lr: float, micro_batch: int | None, kl_coef: float,
                     lora_r: int, warm_start: str | None, eval_split: str,
                     threads: int | None, seed: int, max_concurrency: int | None,
                     out_dir: Path, timeout: float | None, max_retries: int, db: Path | None, thread_id: str | None,
                     as_json: bool, quiet: bool) -> None:
    """Self-play RL: one LoRA policy plays every seat of a verifiable task; PPO on per-role rewards.

    Needs the train extra (torch, peft, transformers, gguf). Kill it at any point and rerun with
    the same --db and --thread-id: stored rollouts are not played again, and the adapter,
    value head and optimiser state of each iteration are saved atomically. Rollouts and each
    iteration's summary are shown on stderr as they land (--no-progress: none).
    """
    from pydantic import ValidationError

    from swm.graphs.selfplay import train
    from swm.selfplay.checkpoint import warm_start_adapter
    from swm.selfplay.plan import SelfPlayPlan

    thread = thread_id or f"selfplay-{uuid.uuid4().hex[:10]}"
    init_adapter = str(warm_start_adapter(warm_start).resolve()) if warm_start else None
    try:
        plan = SelfPlayPlan.model_validate({
            "run_id": thread, "iterations": iterations, "family": family, "level": level, "game": game,
            "players": players, "game_options": {"max_rounds": max_rounds}, "illegal": illegal,
            "tasks_per_iteration": tasks_per_iteration, "group_size": group_size, "max_turns": max_turns,
            "eval_tasks": eval_tasks, "eval_split": eval_split, "seed": seed, "out_dir": str(out_dir),
            # the server's key stays in this process (swm.credentials): the plan records the URL with *** for it
            "policy": {"base": base, "sampler": sampler, "lora_server": remember(lora_server) if lora_server else None,
                       "base_gguf": base_gguf, "max_new_tokens": max_new_tokens,
                       "temperature": temperature, "init_adapter": init_adapter,
                       "lora_r": lora_r, "lora_alpha": 2 * lora_r,
                       "threads": threads},
            "ppo": {"lr": lr, "kl_coef": kl_coef, "micro_batch": micro_batch},
            "advantage": {"estimator": estimator, "gamma": gamma, "lam": lam, "gamma_tok": gamma_tok,
                          "lam_tok": lam_tok, "turn_signal": turn_signal},
            "reward": {"judge_weight": judge_weight, "quality_filter": not no_filter,
                       "illegal_move": illegal_reward}})
    except ValidationError as err:
        raise InputError(f"bad self-play setting: {err.errors()[0]['loc']}: {err.errors()[0]['msg']}") from err
    try:
        import peft  # noqa: F401
        import torch  # noqa: F401
    except ImportError as err:
        raise InputError(f"swm selfplay needs the train extra ({err.name} is missing)",
                         "pip install torch==2.13.0 && pip install -e '.[train]'") from err
    click.echo(f"thread: {thread} (rerun with --thread-id {thread} to resume if interrupted)", err=True)
    from swm.checkpoints import open_store

    runs = open_store(db_path(db))
    record_run(runs, thread, "selfplay", "selfplay")
    runs.close()
    context = None
    if judge_weight > 0:
        from swm.commands._common import make_context

        context = make_context(db, judge_model=judge_model, timeout=timeout, max_retries=max_retries)
    out = train(plan, db=db_path(db), thread_id=thread, context=context, on_event=printer(quiet),
                max_concurrency=max_concurrency)
    if as_json:
        echo_json({k: out.get(k) for k in ("thread_id", "iteration", "stopped", "summaries", "current")})
        return
    for i, summary in sorted((out.get("summaries") or {}).items(), key=lambda kv: int(kv[0])):
        click.echo(iteration_line(i, summary))
    if out.get("stopped"):
        click.echo(f"stopped early: {out['stopped']}", err=True)
    click.echo(f"adapter: {(out.get('current') or {}).get('adapter')}")
