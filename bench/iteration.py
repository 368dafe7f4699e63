"""``python -m bench.iteration``: one multi-turn self-play iteration of the recipe, phase by phase, at the machine's
limits.

The recipe's iteration (`swm.selfplay.plan`: 4 mutual-friend multi-turn tasks × G = 8 rollouts, group advantages,
PPO at 2e-4 in minibatches of 8 rows, no KL) is sampled once on the embedded llama-server (``SWM_EMBEDDED_DRAW``
as set; the rollouts are stored under ``--out``, so a rerun replays them instead of sampling again). The same
rollouts are then scored and trained twice from the same checkpoint:

* **today's path** (before 2026-12-01): π_old scored turn by turn as each reply came (a seat's growing prompt
  forwarded whole at every turn), advantages whitened about the batch mean, every row forwarded, no shared
  prefix, float32;
* **the new path** (the defaults): π_old scored once per seat's whole transcript at the update, only for rows with
  a signal, each group's shared first prompt forwarded once, bfloat16 autocast where the CPU has it, torch on
  every core (`swm.selfplay.loop.update_policy` itself).

Beside them, in the same run: torch's forward + backward tokens/s for the policy on one seat-sized row (threads
and number format each way), and llama.cpp's prompt and batched-decode tokens/s at the server's threads
(`bench.engine_limit`). The held-out evaluation is timed on ``--eval-tasks`` tasks as the report plays them, and
the update's agreement with the exact path (float32, nothing skipped or shared, the same advantages) is stated:
weight change and π_old log-prob differences. Ratios are the result; seconds are this machine's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from bench import engine_limit
from bench.results import results_page
from swm.checkpoints import open_store
from swm.selfplay import loop
from swm.selfplay import store as sps
from swm.selfplay.checkpoint import checkpoint_dir
from swm.selfplay.plan import RECIPE_PPO, SelfPlayPlan
from swm.selfplay.served import default_concurrency, plan_seats, sampling_format, sampling_threads
from swm.serving import embedded, formats
from swm.serving.llama_server import slots
from swm.training import advantages as adv
from swm.training.config import PolicyConfig, PPOConfig
from swm.training.device import cores, cpu_bf16
from swm.training.policy import LoraValueModel, collate, collate_spans
from swm.training.ppo import Sample, fill_old_logprobs, make_optimizer, ppo_update, training_samples
from swm.training.trajectory import Rollout

RUN = "bench-iteration"
CHECKED_TASKS = 2  # the agreement check's rows: the first tasks' groups (float32 thrice is the bench's longest part)


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def plan_for(args: argparse.Namespace) -> SelfPlayPlan:
    policy: dict[str, Any] = {"init_adapter": str(Path(args.warm).resolve() / "adapter") if args.warm else None}
    return SelfPlayPlan(run_id=RUN, iterations=1, family="mutual_friend", level="multi-turn", tasks_per_iteration=4,
                        group_size=8, max_turns=8, eval_tasks=args.eval_tasks, seed=args.seed, out_dir=args.out,
                        policy=PolicyConfig(**policy), ppo=RECIPE_PPO)


def sample(plan: SelfPlayPlan, db: Path, concurrency: int) -> dict[str, float]:
    """Play the iteration's training rollouts that are not stored yet; the wall time of the whole set is kept beside
    the store (``sampling.json``), so a replay reports the sampling it replays."""
    record = Path(plan.out_dir) / "sampling.json"
    store = open_store(db)
    try:
        jobs = loop.rollout_jobs(plan, store, 0)
        if not jobs and record.is_file():
            return dict(json.loads(record.read_text()))
        loop.ensure_initial_checkpoint(plan)
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            for future in [pool.submit(loop.run_rollout, plan, store, job, 0) for job in jobs]:
                future.result()
        wall = time.perf_counter() - start
        rollouts = sps.load_rollouts(store, plan.run_id, 0, "train")
        out = {"wall_s": wall, "rollouts": float(len(rollouts)), "concurrency": float(concurrency),
               "generated": float(sum(r.tokens for r in rollouts)),
               "evaluated": float(sum(len(s.turns[-1].prompt_ids) + len(s.turns[-1].token_ids)
                                      for r in rollouts for s in r.seats if s.turns)),
               "played_now": float(len(jobs))}
        record.write_text(json.dumps(out))
        return out
    finally:
        store.close()


def evaluate(plan: SelfPlayPlan, db: Path, concurrency: int) -> tuple[float, float]:
    """Play the held-out tasks under the new path's checkpoint 1, as the report plays them; (wall s, rollout-s a
    task). Kept beside the store (``evaluation.json``) with the held-out rollouts, so a rerun reports what it played."""
    record = Path(plan.out_dir) / f"evaluation-{plan.eval_tasks}.json"
    if record.is_file():
        kept = json.loads(record.read_text())
        return float(kept["wall_s"]), float(kept["per_task"])
    store = open_store(db)
    try:
        loop.update_policy(plan, store, 0)
        start = time.perf_counter()
        ev = loop.evaluate_policy(plan, store, 0, concurrency=concurrency)
        wall = time.perf_counter() - start
        per_task = float(ev.get("rollout_seconds") or 0.0) / max(1, int(ev.get("rollouts") or 1))
    finally:
        store.close()
    record.write_text(json.dumps({"wall_s": wall, "per_task": per_task}))
    return wall, per_task


def torch_limit(policy: LoraValueModel, tokens: int, targets: int, repeats: int) -> float:
    """Forward + backward tokens/s of one ``tokens``-token row with ``targets`` generated positions (best of
    ``repeats``), at the policy's threads and number format."""
    ids = [int(i) % 40_000 + 100 for i in range(tokens)]
    batch = collate([ids[:-targets]], [ids[-targets:]], policy.tokenizer.pad_token_id)
    policy.model.train()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        logprobs, _ = policy.score(batch)
        logprobs.sum().backward()
        best = min(best, time.perf_counter() - start)
        policy.model.zero_grad()
    return tokens / best


def set_mode(policy: LoraValueModel, threads: int, autocast: str) -> None:
    torch.set_num_threads(threads)
    policy.config = policy.config.model_copy(update={"autocast": autocast, "threads": threads})
    policy._autocast = None  # decided again at the next forward


def score_turns_as_sampled(policy: LoraValueModel, rollouts: list[Rollout]) -> tuple[float, int]:
    """Today's π_old: every turn scored on its own prompt as it was sampled (one forward each); (s, tokens)."""
    start, tokens = time.perf_counter(), 0
    policy.model.eval()
    with torch.no_grad():
        for r in rollouts:
            for seat in r.seats:
                for turn in seat.turns:
                    batch = collate([turn.prompt_ids], [turn.token_ids], policy.tokenizer.pad_token_id)
                    policy.score(batch)
                    tokens += len(turn.prompt_ids) + len(turn.token_ids)
    return time.perf_counter() - start, tokens


def advantaged(rollouts: list[Rollout], whiten: str) -> list[Rollout]:
    copies = [r.model_copy(deep=True) for r in rollouts]
    adv.assign_advantages(copies, adv.AdvantageConfig(estimator="group", whiten=whiten))  # type: ignore[arg-type]
    return copies


def train(policy: LoraValueModel, checkpoint: Path, samples: list[Sample], ppo: PPOConfig,
          seed: int) -> tuple[dict[str, float], torch.Tensor, float, float]:
    """π_old at the update (where a row lacks it), then the PPO update, from ``checkpoint``; (stats, weight change,
    scoring s, update s)."""
    policy.load_weights(checkpoint)
    before = torch.cat([p.detach().flatten().clone() for p in policy.parameters()])
    start = time.perf_counter()
    fill_old_logprobs(policy, samples, ppo)
    scored = time.perf_counter() - start
    torch.manual_seed(seed)
    start = time.perf_counter()
    stats = ppo_update(policy, make_optimizer(policy, ppo), samples, ppo)
    updated = time.perf_counter() - start
    after = torch.cat([p.detach().flatten() for p in policy.parameters()])
    return stats, after - before, scored, updated


def logprob_gap(policy: LoraValueModel, checkpoint: Path, samples: list[Sample], threads: int) -> dict[str, float]:
    """π_old of the rows under bfloat16 autocast against float32: |Δ log π| per token and the first PPO ratio's."""
    rows = [s for s in samples if any(s.advantages)][:6]
    pad = policy.tokenizer.pad_token_id
    policy.load_weights(checkpoint)
    got = {}
    for mode in ("off", "bfloat16"):
        set_mode(policy, threads, mode)
        with torch.no_grad():
            got[mode] = [policy.score(collate_spans([s.sequence], [s.targets], pad))[0] for s in rows]
    diffs = torch.cat([(a - b).abs().flatten()[(a != 0).flatten()] for a, b in zip(got["off"], got["bfloat16"],
                                                                                    strict=True)])
    return {"mean": float(diffs.mean()), "max": float(diffs.max()), "ratio_max": float(diffs.max().exp() - 1),
            "tokens": float(len(diffs))}


def _times(old: float, new: float) -> str:
    """``old`` over ``new`` as a ratio, or — where the new path took no measurable time (every row skipped)."""
    return f"{old / new:.1f}x" if new >= 0.05 else "— (new: no time)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.iteration", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path.home() / "swm-runs" / "bench-iteration"),
                        help="run folder (its store and checkpoints): a rerun replays its rollouts")
    parser.add_argument("--warm", default=None, help="a self-play checkpoint folder to start from (default: the base)")
    parser.add_argument("--eval-tasks", type=int, default=8, help="held-out tasks timed (200 is extrapolated)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2, help="repeats of each limit measurement (best kept)")
    parser.add_argument("--sample-only", action="store_true", help="stop after sampling (its wall time and tokens): "
                        "to compare server settings, each with its own --out")
    parser.add_argument("--no-page", action="store_true")
    args = parser.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    plan = plan_for(args)
    db = Path(args.out) / "store.sqlite"
    with results_page("iteration", "One multi-turn self-play iteration against the machine's limits", "bench.iteration",
                      argv, enabled=not args.no_page, markdown=True):
        run(plan, db, args)


def run(plan: SelfPlayPlan, db: Path, args: argparse.Namespace) -> None:
    sampling_threads(plan.policy)  # as swm selfplay samples: every core for llama-server unless set
    sampling_format(plan.policy)  # and the base in F16 unless SWM_EMBEDDED_FORMAT says otherwise
    concurrency = default_concurrency(plan.policy, plan_seats(plan))
    n = cores()
    print(f"cores {n}; CPU bfloat16 (AVX-512 BF16 / AMX): {cpu_bf16()}; llama-server slots {slots()}, threads "
          f"{os.environ.get('SWM_EMBEDDED_THREADS') or max(1, n - 1)}; draw {os.environ.get('SWM_EMBEDDED_DRAW')}; "
          f"format {formats.chosen()}; "
          f"torch {torch.__version__}; load {os.getloadavg()[0]:.2f}\n")
    log("sampling (or replaying the stored rollouts)")
    sampled = sample(plan, db, concurrency)
    if args.sample_only:
        print(f"sampling: {json.dumps(sampled)}")
        return
    store = open_store(db)
    try:
        scored = loop.score_rollouts(plan, store, 0, "train")
        rollouts = [r for r in sps.load_rollouts(store, plan.run_id, 0, "train") if not r.failed]
    finally:
        store.close()
    checkpoint = checkpoint_dir(plan.run_dir, 0)
    policy = LoraValueModel.create(plan.policy, adapter=checkpoint)
    server_threads = int(os.environ.get("SWM_EMBEDDED_THREADS") or max(1, n - 1))
    row = int(statistics.median(len(s.turns[-1].prompt_ids) + len(s.turns[-1].token_ids)
                                for r in rollouts for s in r.seats if s.turns))

    log("the machine's limits")
    limits: dict[tuple[int, str], float] = {}
    for threads in sorted({1, n}):
        for mode in ("off", "bfloat16") if cpu_bf16() else ("off",):
            set_mode(policy, threads, mode)
            limits[(threads, mode)] = torch_limit(policy, max(row, 256), 200, args.repeats)
    engine = engine_limit.measure(formats.served(embedded.gguf_path()), threads=server_threads,
                                  parallel=(1, concurrency * 2), prompt=512, context=256, steps=32)

    log("today's path: π_old turn by turn, then the update")
    set_mode(policy, n, "off")
    old_score_s, old_scored_tokens = score_turns_as_sampled(policy, rollouts)
    old_samples = training_samples(advantaged(rollouts, "centre"))
    old_ppo = plan.ppo.model_copy(update={"value_coef": 0.0, "skip_zero": "off", "shared_prefix": False})
    old_stats, _, _, old_update_s = train(policy, checkpoint, old_samples, old_ppo, plan.seed)

    log("the new path")
    # the new path: at the signal these rollouts have, and with every row forwarded (an iteration where every group
    # has a signal costs that)
    fast = "bfloat16" if cpu_bf16() else "off"
    set_mode(policy, n, fast)
    new_rows = advantaged(rollouts, "scale")
    new_ppo = plan.ppo.model_copy(update={"value_coef": 0.0})
    new_stats, _, new_score_s, new_update_s = train(policy, checkpoint, training_samples(new_rows), new_ppo,
                                                    plan.seed)
    every_ppo = new_ppo.model_copy(update={"skip_zero": "off"})
    all_stats, _, all_score_s, all_update_s = train(policy, checkpoint, training_samples(new_rows), every_ppo,
                                                    plan.seed)

    # the same update: on these rollouts with advantages of ±1 by rollout (a check of the arithmetic only: no
    # learning is claimed from it), the exact path (float32, nothing skipped or shared) against the new one
    first_tasks = sorted({r.task_id for r in rollouts})[:CHECKED_TASKS]
    checked = [r.model_copy(deep=True) for r in rollouts if r.task_id in first_tasks]
    for r in checked:
        for seat in r.seats:
            for turn in seat.turns:
                turn.advantages = [(1.0 if r.sample % 2 else -1.0) if r.sample % 4 else 0.0] * len(turn.token_ids)
                turn.returns = [0.0] * len(turn.advantages)
    log("the agreement check")
    set_mode(policy, n, "off")
    _, exact_delta, exact_score_s, exact_update_s = train(policy, checkpoint, training_samples(checked), old_ppo,
                                                          plan.seed)
    fp32_stats, fp32_delta, _, _ = train(policy, checkpoint, training_samples(checked), new_ppo, plan.seed)
    set_mode(policy, n, fast)
    _, fast_delta, _, _ = train(policy, checkpoint, training_samples(checked), new_ppo, plan.seed)
    gap = logprob_gap(policy, checkpoint, training_samples(checked), n)
    del policy

    # the held-out evaluation, as the report plays it (the new path's update gives checkpoint 1)
    eval_s = per_task = None
    if plan.eval_tasks:
        log("the held-out evaluation")
        eval_s, per_task = evaluate(plan, db, concurrency)

    def rel(delta: torch.Tensor) -> float:
        return float((delta - exact_delta).norm() / exact_delta.norm().clamp(min=1e-30))

    old_total = old_score_s + old_update_s
    new_total = new_score_s + new_update_s
    print(f"## The iteration: {int(sampled['rollouts'])} rollouts, {int(sampled['generated'])} tokens generated, "
          f"pass rate {scored.get('pass_rate')}\n")
    print("| phase | today's path | new path | today / new |\n|---|---|---|---|")
    print(f"| sampling (llama-server, {int(sampled['concurrency'])} in flight) | π_old scored in torch each turn "
          f"(below) | {sampled['wall_s']:.0f} s | — |")
    print(f"| scoring π_old | {old_score_s:.1f} s ({old_scored_tokens} tokens, every turn's whole prompt) | "
          f"{new_score_s:.1f} s ({int(new_stats.get('rows', 0) - new_stats.get('skipped_rows', 0))} rows) | "
          f"{_times(old_score_s, new_score_s)} |")
    print("| reference pass | none (kl_coef 0) | none | — |")
    print(f"| update | {old_update_s:.1f} s, {int(old_stats['rows'])} rows, {int(old_stats['steps'])} steps, "
          f"{int(old_stats['forwarded_tokens'])} tokens | {new_update_s:.1f} s, "
          f"{int(new_stats['rows'] - new_stats['skipped_rows'])} rows ({int(new_stats['skipped_rows'])} skipped), "
          f"{int(new_stats['steps'])} steps, {int(new_stats['forwarded_tokens'])} tokens | "
          f"{_times(old_update_s, new_update_s)} |")
    print(f"| scoring + update | {old_total:.1f} s | {new_total:.1f} s | {_times(old_total, new_total)} |")
    every = all_score_s + all_update_s
    print(f"| scoring + update, every row forwarded (skip off) | {old_total:.1f} s | {all_score_s:.1f} + "
          f"{all_update_s:.1f} s, {int(all_stats['forwarded_tokens'])} tokens | {_times(old_total, every)} |")
    if eval_s is not None and per_task is not None:
        print(f"| held-out evaluation | — | {eval_s:.0f} s for {plan.eval_tasks} tasks ({per_task:.1f} rollout-s a "
              f"task); 200 tasks ≈ {eval_s / plan.eval_tasks * 200 / 60:.0f} min | — |")
    print()
    best = max(limits.values())
    print("## Against the machine's limits\n")
    print("| torch forward + backward, one row of "
          f"{max(row, 256)} tokens (the median seat row), 200 generated | tokens/s |\n|---|---|")
    for (threads, mode), rate in sorted(limits.items()):
        print(f"| {threads} thread(s), {'float32' if mode == 'off' else 'bfloat16 autocast'} | {rate:.0f} |")
    update_rate = all_stats["forwarded_tokens"] / max(all_update_s, 1e-9)
    limit_now = limits[(n, fast)]
    print(f"\nThe new update, every row forwarded, ran {update_rate:.0f} tokens/s: "
          f"**{update_rate / limit_now:.2f} of the torch limit** at "
          f"its setting ({n} threads, {fast}); today's {old_stats['forwarded_tokens'] / max(old_update_s, 1e-9):.0f} "
          f"tokens/s, {old_stats['forwarded_tokens'] / max(old_update_s, 1e-9) / limits[(n, 'off')]:.2f} of its "
          f"(float32). Best limit measured: {best:.0f} tokens/s.\n")
    prompt_rate = float(engine.get("prompt_tokens_per_s") or engine.get("prompt") or 0.0)
    print(f"llama.cpp at {server_threads} thread(s) (bench.engine_limit, no server): `{json.dumps(engine)}`\n")
    decode = engine.get("generate") or engine.get("decode") or {}
    if isinstance(decode, dict) and prompt_rate:
        rate = float(max(decode.values()))
        floor = sampled["evaluated"] / prompt_rate + sampled["generated"] / rate
        print(f"Sampling's floor at those rates (each seat's transcript evaluated once, {int(sampled['evaluated'])} "
              f"tokens, and {int(sampled['generated'])} generated at the batched rate): {floor:.0f} s; sampling took "
              f"{sampled['wall_s']:.0f} s, **{floor / sampled['wall_s']:.2f} of llama.cpp's limit**.\n")
    print("## The same rollouts, the same update\n")
    print(f"Advantages of ±1 by rollout on the rows of the first {CHECKED_TASKS} tasks (a check of the arithmetic, "
          "not a reward). Against the exact "
          f"path (float32, every row forwarded whole; {exact_score_s:.1f} s scoring + {exact_update_s:.1f} s update), "
          f"the weight change of the new path in float32 (rows without signal skipped: "
          f"{int(fp32_stats['skipped_rows'])}, shared prefixes) differs by **{rel(fp32_delta):.2e}** of its norm, and "
          f"with {fast} by **{rel(fast_delta):.2e}**. {fast} π_old against float32 over {int(gap['tokens'])} "
          f"tokens: mean |Δ log π| {gap['mean']:.4f}, max {gap['max']:.4f} nats (a first PPO ratio off 1 by at most "
          f"{gap['ratio_max']:.3f}; the clip is {plan.ppo.clip}).")


if __name__ == "__main__":
    main()
