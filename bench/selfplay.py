"""``python -m bench.selfplay``: self-play RL on the embedded SmolLM2, the two advantage estimators side by side.

Not a timed test: a few iterations of `graphs.selfplay` on one verifiable task family, once with
the hierarchical estimator (value head) and once with the critic-free group estimator, from the
same seed (so iteration 0's rollouts are the same for both). Per iteration: mean reward per role
with a 95% t-interval on the training rollouts and the frozen held-out tasks, pass rate, KL to
the reference, filtered-turn rate, failed rollouts, tokens/s and seconds; with ``--game werewolf`` also
the game's per-role signals (`swm.games.signals`: legal moves per role, village votes on a werewolf
against chance, the seer's checks and reveals, werewolf survival) with their intervals. Writes
``<out>/selfplay-<estimators>.json`` and the table of every such file in ``<out>`` as
``<out>/selfplay.md`` (so the estimators can run as two processes, side by side, and
``--report`` rebuilds the table).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.learning import run_method
from swm import prompts
from swm.checkpoints import ExperienceStore
from swm.games.signals import signals_table
from swm.graphs.selfplay import train
from swm.lifelong import store as ls
from swm.lifelong.bridge import to_scenario
from swm.selfplay import loop, serving
from swm.selfplay.checkpoint import checkpoint_dir
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.rollout import history
from swm.tasks.families import synthesize

ESTIMATORS = ("hierarchical", "group")


def _cell(stats: dict[str, Any] | None, role: str) -> str:
    v = (stats or {}).get(role)
    if not v or v.get("mean") is None:
        return "-"
    half = v.get("ci95")
    return f"{v['mean']:.2f} ± {half:.2f} (n={v['n']})" if half is not None else f"{v['mean']:.2f} (n={v['n']})"


def _num(x: Any, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _notes(s: dict[str, Any], out: dict[str, Any]) -> str:
    if "pairs" in s:  # a cycle of the DPO loop
        gate = ", ".join(f"{k} {v}" for k, v in sorted((out.get("gate") or {}).items()) if v)
        trained = (f"trained {s['train_seconds']:.0f} s" if s.get("train_seconds") is not None
                   else "nothing trained" if int(s.get("eval_cycle", 1)) else "base")
        return f"held-out n={s.get('eval_n')}; {s['pairs']} pairs; {trained}" + (f"; gate: {gate}" if gate else "")
    return f"sampler {s.get('sampler', 'torch')}"


def table(results: dict[str, dict[str, Any]], roles: list[str]) -> str:
    head = (["estimator", "iter"] + [f"reward {r}" for r in roles] + [f"held-out {r}" for r in roles]
            + ["pass", "held-out pass", "KL", "filtered", "failed", "tokens/s", "seconds", "notes"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for estimator, out in results.items():
        for i, s in sorted((out.get("summaries") or {}).items(), key=lambda kv: int(kv[0])):
            row = ([estimator, i] + [_cell(s.get("reward"), r) for r in roles]
                   + [_cell(s.get("eval_reward"), r) for r in roles]
                   + [_num(s.get("pass_rate"), 2), _num(s.get("eval_pass_rate"), 2), _num(s.get("kl"), 4),
                      _num(s.get("filtered_rate"), 2), "-" if s.get("failed") is None else str(s["failed"]),
                      _num(s.get("tokens_per_s"), 1), _num(s.get("seconds"), 0), _notes(s, out)])
            lines.append("| " + " | ".join(row) + " |")
        if out.get("stopped"):
            lines.append(f"| {estimator} | stopped | {out['stopped']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.selfplay", description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--family", default="negotiation")
    parser.add_argument("--level", default="easy")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--eval-tasks", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--micro-batch", type=int, default=None, help="PPO rows per forward/backward (accumulated)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core box)")
    parser.add_argument("--base", default="embedded")
    parser.add_argument("--sampler", default="auto", choices=["auto", "served", "torch"],
                        help="served: llama.cpp serves each iteration's adapter (default when it can)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the rollouts")
    parser.add_argument("--judge-weight", type=float, default=0.0,
                        help="weight of per-turn judge scores (the judge is the embedded base model unless "
                             "SWM_MODEL_JUDGE names another)")
    parser.add_argument("--game", default=None, choices=["werewolf"], help="play Werewolf instead of --family")
    parser.add_argument("--players", type=int, default=5)
    parser.add_argument("--max-rounds", type=int, default=2)
    parser.add_argument("--illegal", default="filter", choices=["drop", "filter"])
    parser.add_argument("--dpo", action="store_true",
                        help="also run the DPO loop of `swm learn` (issue 'Close the learning loop') on the same "
                             "family, level, held-out tasks and budget, and put its test pass rates beside")
    parser.add_argument("--dpo-steps", type=int, default=8, help="DPO training steps per cycle")
    parser.add_argument("--dpo-lr", type=float, default=1e-4)
    parser.add_argument("--label", default="", help="suffix of this run's JSON file and thread ids")
    parser.add_argument("--samplers", type=int, default=0, metavar="N",
                        help="instead of training: sample N first turns of --family tasks with the served and the "
                             "torch sampler side by side (tokens/s) and compare llama.cpp's log-probs with torch's")
    parser.add_argument("--memory", type=int, default=0, metavar="L",
                        help="instead of training: peak memory of one PPO minibatch (forward + backward) on prompts "
                             "of L tokens, scoring only the generated positions against the full vocabulary "
                             "projection, each in its own process")
    parser.add_argument("--estimators", default=",".join(ESTIMATORS))
    parser.add_argument("--out", type=Path, default=Path("swm-bench-selfplay"))
    parser.add_argument("--report", action="store_true", help="only rebuild selfplay.md from the JSON files in --out")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.samplers:
        print(json.dumps(compare_samplers(args), indent=1))
        return
    if args.memory:
        print(json.dumps(scoring_memory(args), indent=1))
        return
    if not args.report:
        measure(args)
    report(args.out)


_MEMORY_CHILD = """
import json, resource, sys, torch
from swm.training.config import PolicyConfig
from swm.training.policy import LoraValueModel, collate
mode, base, length, new, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(1)
policy = LoraValueModel.create(PolicyConfig(base=base))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(100, 40000, (length - 7 * i,), generator=g).tolist() for i in range(rows)]
completions = [torch.randint(100, 40000, (new,), generator=g).tolist() for _ in range(rows)]
batch = collate(prompts, completions, policy.tokenizer.pad_token_id)
if mode == "full":
    out = policy.model(input_ids=batch.input_ids, attention_mask=batch.attention, output_hidden_states=True)
    logits = out.logits[:, :-1].float()
    lp = torch.log_softmax(logits, -1).gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
else:
    lp, _ = policy.score(batch)
(lp * batch.mask).sum().backward()
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"mode": mode, "peak_mb": after / 1024, "model_mb": before / 1024}))
"""


def scoring_memory(args: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS of one minibatch's forward + backward, generated positions only vs the full projection."""

    out: dict[str, Any] = {"prompt_tokens": args.memory, "new_tokens": args.max_new_tokens, "rows": 4}
    for mode in ("positions", "full"):
        done = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, mode, args.base, str(args.memory),
                               str(args.max_new_tokens), "4"], capture_output=True, text=True)
        if done.returncode != 0:
            out[mode] = {"error": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
            continue
        out[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    if all("peak_mb" in out[m] for m in ("positions", "full")):
        extra = {m: out[m]["peak_mb"] - out[m]["model_mb"] for m in ("positions", "full")}
        out["full_over_positions_above_model"] = round(extra["full"] / extra["positions"], 1)
    return out


def compare_samplers(args: argparse.Namespace) -> dict[str, Any]:
    """Sample the first turn of ``--samplers`` tasks with both samplers from the same fresh adapter.

    Reports tokens/s of each (sampling plus the torch log-prob recomputation, one process,
    one after the other) and, for the served sampler, how far llama.cpp's own log-probabilities
    of its sampled tokens are from torch's recomputation (the quantised base against the
    dequantised one): mean |Δ| per token and the mean Δ per turn, over the turns whose
    retokenised text gives back the server's tokens (their share is reported too). Needs
    ``--temperature 1``, where llama.cpp's log-probs (of the raw logits) are the sampling ones.
    """

    if args.temperature != 1.0:
        raise SystemExit("--samplers compares log-probs at --temperature 1 only")
    plan = SelfPlayPlan.model_validate({
        "run_id": "bench-samplers", "family": args.family, "level": args.level, "out_dir": str(args.out),
        "policy": {"base": args.base, "max_new_tokens": args.max_new_tokens, "threads": args.threads}})
    loop.ensure_initial_checkpoint(plan)
    checkpoint = checkpoint_dir(plan.run_dir, 0)
    template = prompts.load("selfplay_turn")
    turns = []
    for i in range(args.samplers):
        scenario = to_scenario(synthesize(args.family, args.level, 5000 + i))
        name = scenario.names[0]
        turns.append(template.render(agent=name, background=scenario.background_for(name), history=history([]),
                                     turn=0))
    served, _ = serving.served_sampler(plan, checkpoint, "bench-samplers", server_logprobs=True)
    policy = serving.POOL.get(plan.policy, checkpoint)
    torch_sampler = serving.SeededSampler(policy, "bench-samplers")
    out: dict[str, Any] = {"turns": len(turns), "max_new_tokens": args.max_new_tokens}
    gaps: list[float] = []
    per_turn: list[float] = []
    for name, sampler in (("served", served), ("torch", torch_sampler)):
        start, tokens = time.perf_counter(), 0
        for prompt in turns:
            gen = sampler.generate(prompt)
            tokens += len(gen.token_ids)
            if gen.served_logprobs is not None:
                pairs = list(zip(gen.served_logprobs, gen.logprobs, strict=False))
                gaps += [abs(a - b) for a, b in pairs]
                per_turn.append(sum(b - a for a, b in pairs))
        seconds = time.perf_counter() - start
        out[name] = {"tokens": tokens, "seconds": round(seconds, 2), "tokens_per_s": round(tokens / seconds, 2)}
    out["speedup_served_over_torch"] = round(out["served"]["tokens_per_s"] / out["torch"]["tokens_per_s"], 1)
    out["comparable_turns"] = len(per_turn)
    out["mean_abs_logprob_gap_per_token"] = round(sum(gaps) / len(gaps), 4) if gaps else None
    out["mean_torch_minus_served_logprob_per_turn"] = round(sum(per_turn) / len(per_turn), 3) if per_turn else None
    return out


def signals(results: dict[str, dict[str, Any]]) -> str:
    """Werewolf's per-role signals of every iteration (training games, then held-out), or nothing for a task family."""
    rows = [(f"{estimator} {i} {phase}", s[key]) for estimator, out in results.items()
            for i, s in sorted((out.get("summaries") or {}).items(), key=lambda kv: int(kv[0]))
            for phase, key in (("train", "signals"), ("held-out", "eval_signals")) if s.get(key)]
    return signals_table(rows) + "\n\n" if rows else ""


def report(out: Path) -> None:
    """Write ``selfplay.md``: one table over every ``selfplay-*.json`` in ``out``."""
    results: dict[str, dict[str, Any]] = {}
    machines = []
    for path in sorted(out.glob("selfplay-*.json")):
        data = json.loads(path.read_text())
        results.update(data["results"])
        machines.append(f"{path.stem}: {data['machine']}")
    roles = sorted({r for res in results.values() for s in (res.get("summaries") or {}).values()
                    for r in (s.get("reward") or {})})
    md = table(results, roles) + "\n\n" + signals(results) + "\n".join(machines) + "\n"
    (out / "selfplay.md").write_text(md)
    print(md)


def measure(args: argparse.Namespace) -> None:
    """Run the plan once per estimator (one after the other in this process); write ``selfplay-<estimators>.json``."""
    results: dict[str, dict[str, Any]] = {}
    plans: dict[str, Any] = {}
    started = time.perf_counter()
    label = f"-{args.label}" if args.label else ""
    for estimator in [e for e in args.estimators.split(",") if e]:
        run_id = f"bench-{estimator}{label}"
        plan = SelfPlayPlan.model_validate({
            "run_id": run_id, "iterations": args.iterations, "family": args.family,
            "level": args.level, "game": args.game, "players": args.players,
            "game_options": {"max_rounds": args.max_rounds}, "illegal": args.illegal,
            "tasks_per_iteration": args.tasks, "group_size": args.group,
            "max_turns": args.max_turns, "eval_tasks": args.eval_tasks, "out_dir": str(args.out),
            "policy": {"base": args.base, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
                       "sampler": args.sampler, "temperature": args.temperature},
            "ppo": {"lr": args.lr, "micro_batch": args.micro_batch}, "advantage": {"estimator": estimator},
            "reward": {"judge_weight": args.judge_weight}})
        plans[estimator] = plan.model_dump(mode="json")
        out = train(plan, db=args.out / f"{run_id}.db", thread_id=run_id)
        results[f"{estimator}{label}"] = {k: out.get(k) for k in ("summaries", "stopped", "current", "iteration")}
        print(f"{estimator}: done after {time.perf_counter() - started:.0f} s", flush=True)
    if args.dpo:
        results[f"dpo-loop{label}"] = dpo_loop(args, label)
        print(f"dpo loop: done after {time.perf_counter() - started:.0f} s", flush=True)
    meta = (f"{platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores, torch threads "
            f"{args.threads}, wall {time.perf_counter() - started:.0f} s")
    what = args.estimators.replace(",", "-") + ("-dpo" if args.dpo else "")
    name = args.out / f"selfplay-{what}{label}.json"
    name.write_text(json.dumps({"plans": plans, "results": results, "machine": meta}, indent=1))


def dpo_loop(args: argparse.Namespace, label: str) -> dict[str, Any]:
    """Run `swm learn --update dpo` on the self-play run's family, level and budget; return its per-cycle test rates.

    Same held-out tasks (the test split's first ``--eval-tasks`` of the family and level), as many
    cycles as iterations, ``tasks × group`` collected episodes per cycle (``group`` samples a
    task), the same turns and temperature. Its episodes are the episode graph's (JSON actions),
    its update DPO on gated preference pairs (a LoRA trained by TRL, served by llama.cpp).
    """

    if args.game:
        raise SystemExit("--dpo compares on a task family; Werewolf's lifelong family is not a self-play game run")
    ns = argparse.Namespace(cycles=args.iterations, levels=args.level, families=args.family,
                            episodes=args.tasks * args.group, samples=args.group, max_turns=args.max_turns,
                            test_per_cell=max(args.eval_tasks, 1), dev_per_cell=1, temperature=args.temperature,
                            train_steps=args.dpo_steps, train_lr=args.dpo_lr, min_margin=0.1,
                            prefix=f"bench{label}", out=args.out)
    out = run_method("dpo", ns)
    store = ExperienceStore(args.out / "learn.db")
    summaries: dict[str, Any] = {}
    for metric in ("pass", "completion"):
        matrix = ls.matrix(store, out["thread"], metric, "candidate")
        for (cycle, level), cell in matrix.items():
            if level == args.level:
                entry = summaries.setdefault(str(cycle), {})
                entry[f"eval_{metric}_rate" if metric == "completion" else "eval_pass_rate"] = (
                    cell.successes / cell.n if cell.n else None)
                entry["eval_n"] = cell.n
    for key, entry in summaries.items():
        entry["eval_cycle"] = int(key)
        policy = ls.get_policy(store, out["thread"], f"p{key}")
        train = policy.train if policy is not None else None
        entry["pairs"] = policy.pairs_used if policy is not None else 0
        entry["train_seconds"] = train.seconds if train else None
        entry["train_tokens_per_s"] = train.tokens_per_s if train else None
    counts = ls.gate_counts(store, out["thread"])
    gate = {k: v for k, v in counts.items() if not k.startswith("_")} | {"kept": counts.get("_kept", 0)}
    return {"summaries": summaries, "wall": out["wall"], "thread": out["thread"], "stopped": None, "gate": gate}


if __name__ == "__main__":
    main()
