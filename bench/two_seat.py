"""``python -m bench.two_seat``: self-play on the two-seat mutual-friend task, against its warm start and a control.

``--level multi-turn`` runs the same study on the multi-turn conversation (`swm.tasks.multi_turn`).

Not a timed test. One policy plays both seats (A tells its friends, B names the shared one; the
joint reward is the code checker's). Two arms run the same budget from the same warm-start
adapter and seed (``--from``, an adapter ``swm learn`` trained; none: a fresh adapter):

* ``selfplay`` — `graphs.selfplay` with the chosen estimator and update (``--estimator``, ``--lr``,
  ``--epochs``, ``--minibatch``, ``--kl-coef``; by default the recipe that learned,
  `swm.selfplay.plan.RECIPE_PPO`: group, 2e-4, one epoch, minibatches of 8, no KL);
* ``shuffled`` — the same, with each iteration's training rewards permuted (`SelfPlayPlan.shuffle_rewards`):
  by default every turn's whole reward among all its turns (``--shuffle-scope turn``, the quality filter's cap
  included), or the joint rewards among its rollouts and, with ``--belief``, its belief gains among its turns
  (``--shuffle-scope rollout``, the control before 2026-12-07): equal sampling rounds and sampled rollouts, no
  signal.

Per iteration (from the run's summaries): the training rollouts' joint success (fresh training
tasks every iteration, so an on-policy estimate) with a Wilson interval, per-role reward, and the
time split into sampling, update and the rest. At the end the warm start (checkpoint 0) and each
arm's last checkpoint play the same ``--eval-tasks`` tasks of the test split (one seeded rollout
each): joint success with Wilson intervals and exact McNemar p-values (paired, same tasks) of
each arm against the warm start and of self-play against the control. Every part is kept in
``<out>/two-seat.json`` as it finishes, so a killed run picks up where it stopped (the arms
themselves resume on their SQLite thread); ``<out>/two-seat.md`` is the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from swm.checkpoints.store import ExperienceStore
from swm.graphs.selfplay import train
from swm.selfplay import store as sps
from swm.selfplay.checkpoint import checkpoint_dir, warm_start_adapter
from swm.selfplay.loop import ensure_initial_checkpoint
from swm.selfplay.plan import RECIPE_ESTIMATOR, RECIPE_PPO, SelfPlayPlan
from swm.selfplay.rollout import play
from swm.selfplay.served import (
    ServedSampler,
    default_concurrency,
    plan_seats,
    resolve_sampler,
    sampling_format,
    sampling_threads,
)
from swm.selfplay.serving import POOL, SeededSampler, served_sampler
from swm.serving import formats
from swm.stats import mcnemar_exact, wilson_interval
from swm.tasks.checkers import Utterance
from swm.tasks.families import NAME_POLICIES, TWO_SEAT, two_seat_families
from swm.tasks.levels import seat_levels
from swm.tasks.splits import split_tasks
from swm.tasks.verify import check
from swm.training.advantages import estimator_names

ARMS = ("selfplay", "shuffled")
EVAL_HEADER = "| policy | held-out joint success (Wilson 95%) | speaker listed (mean share; multi-turn: friend named) |"


def plan_of(args: argparse.Namespace, arm: str) -> dict[str, Any]:
    """The arm's `SelfPlayPlan`: same everything, the control's rewards shuffled."""
    return {"run_id": f"two-seat-{arm}", "iterations": args.iterations, "family": args.family, "level": args.level,
            "tasks_per_iteration": args.tasks, "group_size": args.group, "max_turns": args.max_turns, "eval_tasks": 0,
            "seed": args.seed, "stage": args.stage, "names": args.names, "out_dir": str(args.out / "runs"),
            "shuffle_rewards": arm == "shuffled", "shuffle_scope": args.shuffle_scope,
            "policy": {"base": args.base, "sampler": args.sampler, "temperature": args.temperature,
                       "init_adapter": args.warm, "threads": args.threads, "lora_r": 8, "lora_alpha": 16,
                       "autocast": args.autocast, "score_old": args.score_old, "served_format": args.served_format},
            "ppo": {"lr": args.lr, "kl_coef": args.kl_coef, "minibatch": args.minibatch, "epochs": args.epochs,
                    "micro_batch": args.micro_batch, "skip_zero": args.skip_zero, "shared_prefix": args.shared_prefix},
            "advantage": {"estimator": args.estimator, "whiten": args.whiten},
            # the control has no signal: with belief gains mixed in, they are shuffled among its turns too
            "reward": {"answer": args.answer_reward, "attempt": args.attempt_reward, "belief": args.belief,
                       "belief_shuffle": args.belief_shuffle or (arm == "shuffled" and args.belief > 0)}}


def evaluate(plan: dict[str, Any], iteration: int, n: int) -> list[dict[str, Any]]:
    """Play the first ``n`` test-split tasks under checkpoint ``iteration`` (one seeded rollout each), checked.

    Served (the plan's sampler resolves to ``served``): llama.cpp plays the checkpoint's adapter, verified as
    the training rollouts' is, rollouts in parallel over the server's slots, no torch scoring (an evaluation
    needs no log-probabilities). In torch: one at a time under the pool's lock.
    """
    import torch  # noqa: PLC0415 - the [train] extra, needed only here

    sp = SelfPlayPlan.model_validate(plan)
    tasks = split_tasks("test", [sp.level], [sp.family], n, names=sp.names)
    checkpoint = checkpoint_dir(sp.run_dir, iteration)
    if iteration == 0:
        ensure_initial_checkpoint(sp)  # the warm start, written as the run's checkpoint 0 (the arms then reuse it)

    def one(task: Any, sampler: Any) -> dict[str, Any]:
        rollout = play(task, sampler, rollout_id=task.task_id, iteration=iteration, sample=0, max_turns=sp.max_turns)
        if rollout.failed:
            raise RuntimeError(f"evaluation rollout {task.task_id} failed: {rollout.failed}")
        verdict = check(task, [Utterance(agent=a, text=t) for a, t in rollout.transcript()])
        # the speaker's share of its list said (two-seat), or whether the friend was named at all (multi-turn)
        listed = verdict.detail.get("speaker_listed", float(verdict.detail.get("friend_said_at") is not None))
        return {"task": task.task_id, "passed": verdict.passed, "listed": listed,
                "transcript": rollout.transcript()}

    if resolve_sampler(sp.policy) == "served":
        served, _ = served_sampler(sp, checkpoint, "eval")

        def unscored(batch: Any, raw: list[Any]) -> Any:
            return torch.zeros_like(batch.mask)

        def job(task: Any) -> dict[str, Any]:
            sampler = ServedSampler(served.policy, served.base_url, f"eval/{task.task_id}", unscored,
                                    fields=served.fields)
            return one(task, sampler)

        with ThreadPoolExecutor(max_workers=default_concurrency(sp.policy, plan_seats(sp))) as pool:
            return list(pool.map(job, tasks))
    with POOL.lock:
        policy = POOL.get(sp.policy, checkpoint)
        return [one(task, SeededSampler(policy, f"eval/{task.task_id}")) for task in tasks]


def _wilson(k: int, n: int) -> str:
    low, high = wilson_interval(k, n)
    return f"{k}/{n} = {k / n:.3f} [{low:.3f}, {high:.3f}]" if n else "-"


def _train_success(summary: dict[str, Any]) -> str:
    """An iteration's training joint success with its Wilson interval, from its summary."""
    n = int(summary.get("rollouts") or 0) - int(summary.get("failed") or 0)
    return _wilson(round(float(summary.get("pass_rate") or 0.0) * n), n)


def _eval_row(name: str, rows: list[dict[str, Any]]) -> str:
    """A policy's held-out row: joint success with its Wilson interval, and the speaker's mean listed share."""
    listed = sum(float(r["listed"] or 0) for r in rows) / max(len(rows), 1)
    return f"| {name} | {_wilson(sum(r['passed'] for r in rows), len(rows))} | {listed:.2f} |"


def same_draws(db: Path, arms: list[str]) -> dict[str, int]:
    """How many of the arms' iteration-0 training rollouts are the same draw (same task, sample and transcript).

    Both arms start from the same checkpoint and seed, so every iteration-0 rollout should be drawn alike;
    the count checks it on the engine that drew them (a server's prompt cache or slot can change a draw).
    """
    if len(arms) < 2 or not db.is_file():
        return {}
    store = ExperienceStore(db)
    runs = [{(r.task_id, r.sample): r.transcript() for r in sps.load_rollouts(store, f"two-seat-{arm}", 0, "train")}
            for arm in arms[:2]]
    common = runs[0].keys() & runs[1].keys()
    return {"compared": len(common), "same": sum(runs[0][k] == runs[1][k] for k in common)}


def report(results: dict[str, Any]) -> str:
    """The results page's tables."""
    lines = ["| arm | iter | train joint success (Wilson 95%) | mean reward by role | sampling s | update s | "
             "other s |", "|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        for i, s in sorted((results.get("curves", {}).get(arm) or {}).items(), key=lambda kv: int(kv[0])):
            # the task's own roles: speaker / finder (two-seat), opener / responder (multi-turn)
            roles = ", ".join(f"{role} {float((v or {}).get('mean', 0)):.3f}"
                              for role, v in sorted((s.get("reward") or {}).items()))
            lines.append(f"| {arm} | {i} | {_train_success(s)} | {roles or '-'} | {s.get('sampling_s', 0):.0f} | "
                         f"{s.get('update_s', 0):.0f} | {s.get('other_s', 0):.0f} |")
    evals = results.get("eval") or {}
    if evals:
        lines += ["", EVAL_HEADER, "|---|---|---|"]
        lines += [_eval_row(name, rows) for name, rows in evals.items()]
        lines += ["", "| comparison | only first | only second | exact McNemar p |", "|---|---|---|---|"]
        for first, second in (("warm", "selfplay"), ("warm", "shuffled"), ("shuffled", "selfplay")):
            if first in evals and second in evals:
                a, b, p = mcnemar_exact([r["passed"] for r in evals[first]], [r["passed"] for r in evals[second]])
                lines.append(f"| {first} → {second} | {a} | {b} | {p:.3g} |")
    draws = results.get("same_draws") or {}
    if draws:
        lines += ["", f"Iteration-0 training rollouts drawn alike in both arms (same checkpoint and seeds): "
                  f"{draws['same']} of {draws['compared']}."]
    return "\n".join(lines) + "\n"


def combine(stages: list[Path]) -> str:
    """One table over staged runs: each stage continues both arms from the previous stage's last checkpoints
    (``--from <stage>/runs/two-seat-<arm> --warm-eval <stage>/two-seat.json:<arm>``); the warm start is the first
    stage's. Iterations are numbered across stages; every arm's evaluation after each stage is compared (exact
    McNemar, paired on the same test tasks) with the warm start and with the other arm after the same stage."""
    runs = [json.loads((stage / "two-seat.json").read_text()) for stage in stages]
    lines = ["| arm | iter | train joint success (Wilson 95%) | sampling s | update s |", "|---|---|---|---|---|"]
    for arm in ARMS:
        offset = 0
        for run in runs:
            curve = (run.get("curves") or {}).get(arm) or {}
            for i, s in sorted(curve.items(), key=lambda kv: int(kv[0])):
                lines.append(f"| {arm} | {offset + int(i)} | {_train_success(s)} | {s.get('sampling_s', 0):.0f} | "
                             f"{s.get('update_s', 0):.0f} |")
            offset += len(curve)
    warm = runs[0]["eval"]["warm"]
    passed = {"warm": [r["passed"] for r in warm]}
    lines += ["", EVAL_HEADER, "|---|---|---|",
              _eval_row("warm", warm)]
    tests: list[tuple[str, str]] = []
    done = dict.fromkeys(ARMS, 0)  # iterations each arm has run so far (a stage may continue one arm only)
    for run in runs:
        for arm in ARMS:
            done[arm] += len((run.get("curves") or {}).get(arm) or {})
            rows = (run.get("eval") or {}).get(arm)
            if rows:
                name = f"{arm} after {done[arm]}"
                passed[name] = [r["passed"] for r in rows]
                lines.append(_eval_row(name, rows))
                tests.append(("warm", name))
    for name in [n for n in passed if n.startswith("selfplay after ")]:
        control = name.replace("selfplay", "shuffled")
        if control in passed:
            tests.append((control, name))
    lines += ["", "| comparison | only first | only second | exact McNemar p |", "|---|---|---|---|"]
    for first, second in tests:
        a, b, p = mcnemar_exact(passed[first], passed[second])
        lines.append(f"| {first} → {second} | {a} | {b} | {p:.3g} |")
    return "\n".join(lines) + "\n"


def curve_rows(summaries: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Iteration -> its summary with the iteration's time split into sampling, update and the rest (evaluation,
    serving)."""
    rows = {}
    for i, s in summaries.items():
        sampling, update = float(s.get("sampling_seconds") or 0.0), float(s.get("update_seconds") or 0.0)
        rows[str(i)] = s | {"sampling_s": sampling, "update_s": update,
                            "other_s": max(0.0, float(s.get("seconds") or 0.0) - sampling - update)}
    return rows


def parser() -> argparse.ArgumentParser:
    """The command line's options (`main`)."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--from", dest="warm", default=None, help="warm-start adapter (swm selfplay --from accepts "
                    "the same); none: a fresh adapter")
    ap.add_argument("--base", default="embedded")
    ap.add_argument("--family", default="mutual_friend", choices=two_seat_families())
    ap.add_argument("--level", default=TWO_SEAT, choices=list(seat_levels()),
                    help="two-seat, or multi-turn (mutual_friend only: a conversation of up to 8 messages)")
    ap.add_argument("--names", default="disjoint", choices=list(NAME_POLICIES),
                    help="name pools: disjoint train and test pools, or shared (the runs before 2026-11-28)")
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--tasks", type=int, default=4, help="training tasks per iteration")
    ap.add_argument("--group", type=int, default=8, help="G: rollouts per task")
    ap.add_argument("--eval-tasks", type=int, default=200)
    ap.add_argument("--estimator", default=RECIPE_ESTIMATOR, choices=estimator_names())
    ap.add_argument("--lr", type=float, default=RECIPE_PPO.lr)
    ap.add_argument("--kl-coef", type=float, default=RECIPE_PPO.kl_coef)
    ap.add_argument("--minibatch", type=int, default=RECIPE_PPO.minibatch)
    ap.add_argument("--epochs", type=int, default=RECIPE_PPO.epochs)
    ap.add_argument("--micro-batch", type=int, default=None, help="rows per forward/backward inside a minibatch "
                    "(the same update in less memory; default: rows x the longest row within 2,048 tokens, "
                    "PPOConfig.micro_tokens)")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--answer-reward", type=float, default=0.0, help="added to a seat's reward when its own "
                    "first answer is right (multi-turn; 0: the joint reward alone)")
    ap.add_argument("--attempt-reward", type=float, default=0.0, help="added to a seat's reward when its own "
                    "first answer names one person of the lists, unhedged, right or wrong (multi-turn; 0: off)")
    ap.add_argument("--belief", type=float, default=0.0, help="weight of each multi-turn message's belief gain "
                    "(swm.selfplay.belief; 0: off)")
    ap.add_argument("--belief-shuffle", action="store_true", help="the shuffled-turn control of the belief gain")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: every core)")
    ap.add_argument("--autocast", default="auto", choices=["auto", "bfloat16", "off"],
                    help="bfloat16 autocast on the CPU (auto: where it has AVX-512 BF16 or AMX; off: float32, the "
                    "path before 2026-12-01)")
    ap.add_argument("--score-old", default="update", choices=["update", "sample"],
                    help="π_old scored at the update per seat row (update) or each turn as sampled (sample, before)")
    ap.add_argument("--shuffle-scope", default="turn", choices=["turn", "rollout"],
                    help="what the shuffled control permutes: every turn's whole reward among the iteration's turns "
                         "(turn), or the joint rewards among its rollouts (rollout, the control before 2026-12-07)")
    ap.add_argument("--served-format", default="auto",
                    choices=["auto", *formats.FORMATS],
                    help="the base's number format on llama.cpp while sampling (auto: f16; shipped: Q4_1, before)")
    ap.add_argument("--skip-zero", default="auto", choices=["auto", "on", "off"],
                    help="rows whose advantages are all zero are not forwarded (auto: where exact)")
    ap.add_argument("--shared-prefix", default=True, action=argparse.BooleanOptionalAction,
                    help="a group's rows forward their shared first prompt once")
    ap.add_argument("--whiten", default="estimator", choices=["estimator", "centre", "scale", "off"],
                    help="whitening of the token advantages (centre: the two-seat pages' way before 2026-12-01)")
    ap.add_argument("--sampler", default="served", choices=["served", "torch", "auto"],
                    help="served: llama.cpp samples every rollout (training and evaluation) from the iteration's "
                    "adapter, verified; torch: sampled in torch (exactly on-policy, much slower)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stage", type=int, default=0, help="the curriculum stage (a continuation: 1); training tasks "
                    "come from a hash of (seed, stage, iteration, index)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--out", type=Path, default=Path("bench-out/two-seat"))
    ap.add_argument("--warm-eval", default=None, metavar="JSON:ARM", help="the starting policy's evaluation, taken "
                    "from an earlier stage (its two-seat.json and the arm whose last checkpoint --from names) "
                    "instead of playing it again: same policy, same test tasks and seeds")
    ap.add_argument("--combine", type=Path, nargs="+", default=None, metavar="STAGE",
                    help="print one table over staged runs (their --out folders, first stage first) and exit")
    return ap


def main() -> None:
    args = parser().parse_args()
    if args.combine:
        print(combine(args.combine))
        return
    if args.warm:
        args.warm = str(warm_start_adapter(args.warm).resolve())

    args.out.mkdir(parents=True, exist_ok=True)
    policy = SelfPlayPlan.model_validate(plan_of(args, "selfplay")).policy
    sampling_threads(policy)  # every core while sampling
    sampling_format(policy)  # the base in F16 unless the plan or SWM_EMBEDDED_FORMAT says otherwise
    path = args.out / "two-seat.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    results["meta"] = {"args": {k: str(v) for k, v in vars(args).items()}, "commit": commit,
                       "machine": f"{platform.machine()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")}

    def save() -> None:
        path.write_text(json.dumps(results, indent=1))
        (args.out / "two-seat.md").write_text(report(results))

    evals = results.setdefault("eval", {})
    arms = args.arms.split(",")
    if args.warm_eval and "warm" not in evals:
        source, arm = args.warm_eval.rsplit(":", 1)
        evals["warm"] = json.loads(Path(source).read_text())["eval"][arm]
    if "warm" not in evals:
        evals["warm"] = evaluate(plan_of(args, arms[0]), 0, args.eval_tasks)
        save()
    for arm in arms:
        start = time.perf_counter()
        curves = results.setdefault("curves", {}).setdefault(arm, {})

        def saved_as_it_goes(kind: str, payload: Any, curves: dict[str, Any] = curves) -> None:
            """Each iteration's summary lands in the report when its evaluation ends: a stopped run shows its
            curve so far (the run itself resumes from its thread)."""
            if kind == "done" and isinstance(payload[1], dict) and payload[1].get("summaries"):
                curves.update(curve_rows(payload[1]["summaries"]))
                save()

        out = train(plan_of(args, arm), db=args.out / "bench.sqlite", thread_id=f"two-seat-{arm}",
                    on_event=saved_as_it_goes)
        curves.update(curve_rows(out.get("summaries") or {}))
        results.setdefault("seconds", {})[arm] = results.get("seconds", {}).get(arm, 0.0) + time.perf_counter() - start
        save()
        if arm not in evals:
            evals[arm] = evaluate(plan_of(args, arm), args.iterations, args.eval_tasks)
            save()
    results["same_draws"] = same_draws(args.out / "bench.sqlite", arms)
    save()
    print(report(results))


if __name__ == "__main__":
    main()
