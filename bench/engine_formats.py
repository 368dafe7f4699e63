"""``python -m bench.engine_formats``: the served base's number format, by speed and by agreement with torch's policy.

The embedded SmolLM2-135M ships as Q4_1; `swm.serving.formats` serves it in another format (``SWM_EMBEDDED_FORMAT``,
converted once by llama.cpp's quantizer). Each format of ``--formats`` is converted (seconds, bytes), served by
llama-server as swm starts it, and measured side by side in one run:

* prompt and single-sequence decode tokens/s at each ``--lengths`` (bench.engine_context's prompts, best of
  ``--repeats``), and decode tokens/s with ``--batch`` sequences in flight at once (the server's own timings);
* agreement: ``--samples`` continuations of the multi-turn task's opening seat prompts (held-out tasks, chat
  template, ``--sample-tokens`` each at temperature 1, seeded) with the server's log-prob of every token it drew,
  against the log-prob the torch policy gives the same token (the shipped weights dequantised to float32, what
  self-play trains; the mean is what `swm.serving.verify.check_sampled` checks a run against, 0.15 allowed);
* greedy answers: the same prompts decoded greedily, and how many give the shipped format's text exactly.

With ``--iteration``, each format also samples the recipe's multi-turn self-play iteration (bench.iteration's plan:
4 tasks × G = 8 rollouts, seat draws as ``SWM_EMBEDDED_DRAW`` says) and plays ``--eval-tasks`` held-out tasks as the
report plays them (each format's rollouts kept under ``--out``/<format>, so a rerun replays them): sampling's and the
evaluation's wall seconds, the tokens evaluated and generated, and the 200-task evaluation it extrapolates to.

Ratios to the first format, not seconds, are the result.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from bench import iteration as recipe
from bench.engine_context import speeds
from bench.engine_speed import complete
from bench.results import results_page
from swm.selfplay.served import default_concurrency, plan_seats
from swm.serving import embedded, formats
from swm.tasks.levels import seat_prompt
from swm.tasks.splits import split_tasks
from swm.training.base import load_base


def batched_decode(root: str, batch: int, decode: int, repeats: int) -> float:
    """Best aggregate decode tokens/s with ``batch`` sequences decoding at once (each a short distinct prompt)."""
    def one(i: int) -> dict[str, Any]:
        body = {"prompt": f"Story {i}: the harbour town wakes early.", "n_predict": decode, "ignore_eos": True,
                "cache_prompt": False, "temperature": 0.0, "seed": 1}
        return complete(root, body)

    best = 0.0
    with ThreadPoolExecutor(batch) as pool:
        for _ in range(repeats):
            start = time.perf_counter()
            replies = list(pool.map(one, range(batch)))
            elapsed = time.perf_counter() - start
            best = max(best, sum(int(r["timings"]["predicted_n"]) for r in replies) / elapsed)
    return best


def prompts(tokenizer: Any, count: int) -> list[list[int]]:
    """Token ids of the multi-turn task's opening seat prompts (test split), chat-templated with their prefill."""
    out = []
    for task in split_tasks("test", ["multi-turn"], ["mutual_friend"], per_cell=(count + 1) // 2):
        for agent in task.agents:
            shown = seat_prompt(task, agent.name, [])
            text = tokenizer.apply_chat_template([{"role": "user", "content": shown.text}], tokenize=False,
                                                 add_generation_prompt=True) + shown.prefill
            out.append([int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]])
    return out[:count]


def draw(root: str, ids: list[int], tokens: int, seed: int, temperature: float) -> tuple[list[int], list[float]]:
    """The server's draw after ``ids``: the tokens and the log-prob it gave each (before sampling)."""
    reply = complete(root, {"prompt": ids, "n_predict": tokens, "temperature": temperature, "seed": seed,
                            "n_probs": 1, "cache_prompt": False, "return_tokens": True})
    probs = reply.get("completion_probabilities") or []
    return [int(p["id"]) for p in probs], [float(p["logprob"]) for p in probs]


def measure(fmt: str, args: argparse.Namespace, ids: list[list[int]]) -> dict[str, Any]:
    """Convert, serve and measure one format: speeds, batched decode, seeded draws and greedy replies."""
    os.environ[formats.ENV] = fmt
    model = formats.served(embedded.gguf_path())
    converted = 0.0
    if fmt != formats.SHIPPED:  # what a first use costs, timed on a copy of its own (the cached one is served)
        with tempfile.TemporaryDirectory(prefix="swm-formats-") as tmp:
            start = time.perf_counter()
            formats.quantize(embedded.gguf_path(), Path(tmp) / f"{fmt}.gguf", fmt)
            converted = time.perf_counter() - start
    server = embedded.ensure_server()
    root = server.base_url.removesuffix("/v1")
    lengths = [int(n) for n in args.lengths.split(",") if n]
    out: dict[str, Any] = {
        "bytes": model.stat().st_size, "convert_s": converted,
        "speeds": speeds(root, lengths, args.decode, args.repeats),
        "batched": batched_decode(root, args.batch, args.decode, args.repeats),
        "draws": [draw(root, p, args.sample_tokens, seed, 1.0) for seed, p in enumerate(ids)],
        "greedy": [draw(root, p, args.sample_tokens, 1, 0.0)[0] for p in ids],
        "threads": server.command[server.command.index("--threads") + 1]}
    embedded.stop_server()
    if args.iteration:
        out["iteration"] = play(fmt, args)
    return out


def play(fmt: str, args: argparse.Namespace) -> dict[str, float]:
    """Sample the recipe's iteration and play ``--eval-tasks`` held-out tasks on the format served now."""
    ns = argparse.Namespace(out=str(Path(args.out).expanduser() / fmt), warm=args.warm, eval_tasks=args.eval_tasks,
                            seed=0)
    plan = recipe.plan_for(ns)
    Path(plan.out_dir).mkdir(parents=True, exist_ok=True)
    db = Path(plan.out_dir) / "store.sqlite"
    concurrency = default_concurrency(plan.policy, plan_seats(plan))
    sampled = recipe.sample(plan, db, concurrency)
    eval_s, per_task = recipe.evaluate(plan, db, concurrency) if plan.eval_tasks else (0.0, 0.0)
    embedded.stop_server()
    return sampled | {"eval_s": eval_s, "eval_per_task": per_task}


def torch_gaps(ids: list[list[int]], draws: list[tuple[list[int], list[float]]], model: Any) -> tuple[float, float]:
    """Mean and largest |served − torch| log-prob over every drawn token (torch: the policy self-play trains)."""
    gaps: list[float] = []
    for prompt, (tokens, served) in zip(ids, draws, strict=True):
        if not tokens:
            continue
        sequence = torch.tensor([prompt + tokens])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=sequence).logits[0].float(), -1)
        for k, (token, value) in enumerate(zip(tokens, served, strict=True)):
            gaps.append(abs(float(logp[len(prompt) - 1 + k, token]) - value))
    return (sum(gaps) / len(gaps), max(gaps)) if gaps else (float("nan"), float("nan"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.engine_formats", description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default="shipped,q8_0,q4_0,f16,bf16",
                        help=f"formats in turn, the first the baseline (of: {', '.join(formats.FORMATS)})")
    parser.add_argument("--lengths", default="40,600,1200", help="prompt lengths in tokens (about)")
    parser.add_argument("--decode", type=int, default=48, help="tokens decoded after each prompt")
    parser.add_argument("--batch", type=int, default=4, help="sequences decoding at once for the batched rate")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                        help="llama-server threads (SWM_EMBEDDED_THREADS) [default: every core, as self-play samples]")
    parser.add_argument("--samples", type=int, default=16, help="seat prompts drawn from, one seed each")
    parser.add_argument("--sample-tokens", type=int, default=48)
    parser.add_argument("--iteration", action="store_true",
                        help="also sample the recipe's iteration and time a held-out evaluation on each format")
    parser.add_argument("--eval-tasks", type=int, default=8, help="held-out tasks timed with --iteration")
    parser.add_argument("--warm", default=None, help="with --iteration: a self-play checkpoint folder to start from")
    parser.add_argument("--out", default=str(Path.home() / "swm-runs" / "bench-formats"),
                        help="with --iteration: run folders, one a format (a rerun replays their rollouts)")
    parser.add_argument("--no-page", action="store_true")
    args = parser.parse_args(argv)
    with results_page("engine-formats", "The served base's number format: speed and agreement with torch",
                      "bench.engine_formats", argv, enabled=not args.no_page, markdown=True):
        run(args)


def run(args: argparse.Namespace) -> None:
    os.environ["SWM_EMBEDDED_ENGINE"] = "llama-server"
    os.environ["SWM_EMBEDDED_THREADS"] = str(args.threads)
    load = os.getloadavg()
    model, tokenizer = load_base(None)
    ids = prompts(tokenizer, args.samples)
    names = [f for f in args.formats.split(",") if f]
    results = {fmt: measure(fmt, args, ids) for fmt in names}
    os.environ.pop(formats.ENV, None)
    for result in results.values():
        result["gap"] = torch_gaps(ids, result["draws"], model)
    print(f"Load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores); llama-server, "
          f"{results[names[0]]['threads']} thread(s); best of {args.repeats}; {len(ids)} seat prompts of "
          f"{min(map(len, ids))}-{max(map(len, ids))} tokens drawn from.\n")
    table(names, results, args)
    print(f"\nLoad average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}.")


def table(names: list[str], results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    """Print one row per measure, one column per format, and each format's ratio to the first."""
    first = results[names[0]]
    rows: list[tuple[str, Any]] = [("file, MB", lambda r: r["bytes"] / 1e6),
                                   ("conversion, s", lambda r: r["convert_s"])]
    for i, (tokens, _, _) in enumerate(first["speeds"]):
        rows.append((f"prompt tok/s at {tokens} tokens", lambda r, i=i: r["speeds"][i][1]))
        rows.append((f"decode tok/s after {tokens} tokens", lambda r, i=i: r["speeds"][i][2]))
    rows.append((f"decode tok/s, {args.batch} in flight", lambda r: r["batched"]))
    rows.append(("mean \\|served − torch\\| log-prob, nats", lambda r: r["gap"][0]))
    rows.append(("largest, nats", lambda r: r["gap"][1]))
    print("| | " + " | ".join(names) + " | " + " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |")
    print("|---|" + "---|" * (2 * len(names) - 1))
    for label, value in rows:
        cells = [f"{value(results[n]):.3f}" if "nats" in label else f"{value(results[n]):.0f}" for n in names]
        ratios = [f"{value(results[n]) / value(first):.2f}x" if value(first) else "—" for n in names[1:]]
        print(f"| {label} | " + " | ".join(cells + ratios) + " |")
    if "iteration" in first:
        iteration_table(names, results, args.eval_tasks)
    same = {n: sum(a == b for a, b in zip(results[n]["greedy"], first["greedy"], strict=True)) for n in names}
    print(f"\nGreedy replies equal to {names[0]}'s, of {len(first['greedy'])}: "
          + ", ".join(f"{n} {same[n]}" for n in names[1:]) + ".")


def iteration_table(names: list[str], results: dict[str, dict[str, Any]], eval_tasks: int) -> None:
    """Print the recipe's iteration on each format: sampling, tokens, the timed evaluation and its 200-task cost."""
    played = {n: results[n]["iteration"] for n in names}
    first = played[names[0]]
    rows = [("sampling the iteration, s", lambda r: r["wall_s"]), ("rollouts", lambda r: r["rollouts"]),
            ("tokens evaluated (seat transcripts)", lambda r: r["evaluated"]),
            ("tokens generated", lambda r: r["generated"]), ("held-out evaluation, s", lambda r: r["eval_s"]),
            ("200 held-out tasks at that rate, min", lambda r: r["eval_s"] / max(1, eval_tasks) * 200 / 60)]
    print(f"\n## The recipe's iteration on each format ({int(first['concurrency'])} rollouts in flight; "
          f"{eval_tasks} held-out tasks timed)\n")
    print("| | " + " | ".join(names) + " | " + " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |")
    print("|---|" + "---|" * (2 * len(names) - 1))
    for label, value in rows:
        cells = [f"{value(played[n]):.0f}" for n in names]
        ratios = [f"{value(played[n]) / value(first):.2f}x" if value(first) else "—" for n in names[1:]]
        print(f"| {label} | " + " | ".join(cells + ratios) + " |")
    print()


if __name__ == "__main__":
    main()
