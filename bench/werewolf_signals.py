"""``python -m bench.werewolf_signals``: Werewolf's per-role signals of the base policy over N self-play games.

Not a timed test. Plays ``--games`` games of Werewolf with one policy in every seat, as self-play's
rollouts play them (`swm.selfplay.game_rollout.play_game_rollout`: each seat's prompt from its own
perspective, a choice parsed from the reply's text, the moderator's record kept), with the base
model served by the embedded llama.cpp server and sampled as self-play's served sampler samples:
the prompt chat-templated by the base's tokenizer, ``/v1/completions``, temperature
``--temperature``, top-k 0, top-p 1, min-p 0, no repeat penalty, a seed per game and move. This is
the policy iteration 0 of a self-play run plays (a fresh LoRA adapter is the base); only the torch
log-probabilities a PPO update needs are not computed, since the signals read the text only.

Reports every signal of `swm.games.signals` with its 95% interval, the units one game gave each
signal, the games an interval of ±0.2 needs at that many units a game, and the seconds a game
took. Each game is appended to ``<out>/werewolf-signals.jsonl`` as it ends, so a killed run
resumes where it stopped; ``--budget`` stops starting games after that many seconds, and the
table reports the games that fit.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import openai
from openai import OpenAI

from bench.results import results_page
from swm.games.signals import games_for_half_width, signals_table, summarise_signals, units_for_half_width
from swm.selfplay.game_rollout import play_game_rollout
from swm.selfplay.served import seed_of
from swm.serving.embedded import ensure_server
from swm.stats import mean_ci
from swm.tasks.decisions import Stop, stops
from swm.training.base import resolve_base
from swm.training.trajectory import Generation

RUN = "bench-signals"


class BaseSampler:
    """Samples a reply from the embedded server as `swm.selfplay.served.ServedSampler` does, without torch scoring.

    The token ids and log-probabilities of a `Generation` are placeholders (one a completion token):
    the game rollout needs them non-empty, the signals never read them.
    """

    def __init__(self, tokenizer: Any, base_url: str, seed_key: str, temperature: float, max_tokens: int) -> None:
        self.tokenizer = tokenizer
        self.client = OpenAI(base_url=base_url, api_key="sk-no-key-needed", timeout=600.0, max_retries=2)
        self.seed_key = seed_key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.calls = 0

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None) -> Generation:
        text_prompt = str(self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                             add_generation_prompt=True, tokenize=False)) + prefill
        seed = seed_of(f"{self.seed_key}/{self.calls}")
        self.calls += 1
        reply = self.client.completions.create(
            model="embedded", prompt=text_prompt, max_tokens=max_tokens or self.max_tokens,
            temperature=self.temperature, top_p=1.0, seed=seed, stop=list(stops(stop)) or openai.omit,
            extra_body={"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0})
        text = reply.choices[0].text or ""
        n = max(1, reply.usage.completion_tokens if reply.usage else len(text.split()))
        return Generation(text=prefill + text, prompt_ids=[], token_ids=[0] * n, logprobs=[0.0] * n)


def _tokenizer(base: str) -> Any:
    import transformers  # noqa: PLC0415 - the [train] extra

    where, gguf_file = resolve_base(base)
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    return transformers.AutoTokenizer.from_pretrained(str(where), local_files_only=True, **kwargs)


def play(args: argparse.Namespace, done: dict[int, dict[str, Any]], log: Path) -> None:
    """Play the games not yet in ``log`` (deal seeds ``--seed`` … ``--seed + games − 1``), appending each."""
    todo = [args.seed + i for i in range(args.games) if args.seed + i not in done]
    if not todo:
        return
    tokenizer = _tokenizer(args.base)
    base_url = ensure_server().base_url
    started = time.perf_counter()
    for seed in todo:
        if args.budget and time.perf_counter() - started > args.budget:
            print(f"budget of {args.budget:.0f} s spent: {len(done)} games played", flush=True)
            return
        task_id = f"werewolf:train:{seed}"
        rollout_id = f"{RUN}/i0/train/{task_id}/g0"
        sampler = BaseSampler(tokenizer, base_url, f"{args.seed}/{rollout_id.split('/', 1)[1]}", args.temperature,
                              args.max_new_tokens)
        rollout = play_game_rollout("werewolf", sampler, seed=seed, players=args.players,
                                    options={"max_rounds": args.max_rounds}, rollout_id=rollout_id, task_id=task_id,
                                    iteration=0, sample=0, illegal="filter")
        row = {"seed": seed, "seconds": rollout.seconds, "moves": len(rollout.order), "failed": rollout.failed,
               "signals": (rollout.verdict or {}).get("signals"), "end": rollout.end_reason}
        done[seed] = row
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"game {seed}: {row['moves']} moves, {row['seconds']:.0f} s, {row['end']}", flush=True)


def report(args: argparse.Namespace, done: dict[int, dict[str, Any]]) -> str:
    """The signals table, the games ±0.2 needs per signal, and the seconds a game took."""
    played = [row for row in done.values() if row["signals"]]
    summary = summarise_signals(row["signals"] for row in played)
    seconds, half, n = mean_ci(row["seconds"] for row in played)
    moves, _, _ = mean_ci(row["moves"] for row in played)
    failed = sum(1 for row in done.values() if not row["signals"])
    setting = f"base, {args.players} players, ≤ {args.max_rounds} rounds, T {args.temperature}"
    lines = [f"{len(played)} games played ({failed} failed); a game: "
             + (f"{seconds:.0f} s" + (f" ± {half:.0f}" if half is not None else "") + f", {moves:.1f} moves"
                if seconds is not None else "none"), "", signals_table([(setting, summary)]), "",
             f"Units a game gave each pooled signal, and the games a 95% Wilson interval within ±0.2 needs at any "
             f"rate ({units_for_half_width(0.2)} units) at that many a game:", "",
             "| signal | units a game | games for ±0.2 | half-width here |", "|---|---|---|---|"]
    widths = {"legal moves": summary["legal"]["all"], "village votes": summary["village_votes"],
              "seer checks": summary["seer_checks"], "seer reveals": summary["seer_reveals"],
              "werewolves": summary["wolf_survived"], "games": summary["wins"]["village"]}
    need = games_for_half_width(summary, 0.2)
    for name, per in summary["per_game"].items():
        lines.append(f"| {name} | {per:.2f} | {need[name] if need[name] is not None else '-'} | "
                     f"±{widths[name]['half']:.2f} (n={widths[name]['n']}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.werewolf_signals", description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=12, help="games to play (deal seeds --seed … --seed + games − 1)")
    parser.add_argument("--players", type=int, default=5)
    parser.add_argument("--max-rounds", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=32, help="a reply's length limit (swm selfplay's)")
    parser.add_argument("--temperature", type=float, default=0.7, help="sampling temperature (swm selfplay's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--base", default="embedded", help="the base whose tokenizer templates the prompt")
    parser.add_argument("--budget", type=float, default=0.0, help="stop starting games after this many seconds")
    parser.add_argument("--out", type=Path, default=Path("swm-bench-signals"))
    parser.add_argument("--report", action="store_true", help="only rebuild the table from the games kept")
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "werewolf-signals.jsonl"
    done = {int(r["seed"]): r for r in map(json.loads, log.read_text().splitlines())} if log.is_file() else {}
    if not args.report:
        play(args, done, log)
    with results_page("werewolf-signals", "Werewolf's per-role signals of the base policy", "bench.werewolf_signals",
                      argv, enabled=not (args.no_page or args.report), markdown=True):
        text = report(args, {s: r for s, r in done.items() if args.seed <= s < args.seed + args.games})
        print(text)
    (args.out / "werewolf-signals.md").write_text(text)


if __name__ == "__main__":
    main()
