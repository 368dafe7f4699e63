"""``python -m bench.engine_speed``: multi-turn episodes at the engine's speed, re-rendered seats against append-only.

Each workload is played on the embedded SmolLM2-135M served by llama-server, once per path, side by side
in one run:

* **rerender** (the path before): every turn's whole prompt rendered again (``transcript="rerender"``) and
  sent with ``cache_prompt: false`` (the ``fresh`` draw mode), so the server evaluates all of it;
* **append-fresh**: each seat's append-only chat, every prompt evaluated whole (``fresh``): the draw reference;
* **append**: each seat's append-only chat (`swm.training.transcript`) sent as token ids to the seat's own
  slot (``id_slot``) with ``cache_prompt: true``, the seat's first turn fresh (the ``seat`` draw mode,
  `swm.serving.draws`), so the server evaluates only the tokens after the seat's previous prompt and reply.

Workloads: ``two-seat`` (a negotiation episode, two seats, ``--turns`` turns), ``werewolf`` (a 5-seat game,
``--rounds`` rounds), ``sotopia`` (a shipped SOTOPIA scenario played for ``--turns`` turns with self-play's
prompts; the judge is not called). Reported per workload and path: prompt tokens the server evaluated
(its own ``timings.prompt_n``) over the minimum (each turn's new tokens: its prompt less the longest prefix
it shares with a prompt and reply of the episode before it), generated tokens/s, and the episode's wall seconds;
then the cost of the two-seat workload as the number of turns grows (``--growth``), and the update's seconds
per iteration on the two-seat episodes' seats (``--update``: PPO in torch on the same base, one row per turn
against one row per seat). ``--repeat`` plays the append path twice (the second in another order of episodes)
and counts the moves that are the same: whether the same seed gives the same move under prefix reuse.

``--replay`` compares the paths at the same outputs: each path named plays the episodes again with the
moves the append path drew (its prompts and its cache as before; the server asked for exactly as many tokens
as the recorded reply had decode steps, end-of-text ignored, and the recorded reply handed to the game), so
every path plays the same game, turn for turn, and only the prompts differ. Without it the paths draw their
own moves and, over a whole Werewolf game, play games of different lengths.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench.results import results_page
from swm.envs.seats import SocialEnv
from swm.scenarios import shipped
from swm.selfplay.game_rollout import play_game_rollout
from swm.selfplay.rollout import play
from swm.serving import embedded
from swm.serving.embedded import gguf_path
from swm.tasks import synthesize
from swm.tasks.decisions import Stop, stops
from swm.training.trajectory import Generation, Rollout
from swm.training.transcript import SeatChat, chat_prompt_ids

PATHS = ("rerender", "append-fresh", "append")
WORKLOADS = ("two-seat", "werewolf", "sotopia")
TEMPERATURE = 0.7
MAX_TOKENS = 32
SEATS = {"two-seat": 2, "werewolf": 5, "sotopia": 2}


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def complete(root: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to llama-server's own ``/completion`` at ``root`` (no ``/v1``) and return its JSON."""
    request = urllib.request.Request(f"{root}/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as reply:
        return dict(json.loads(reply.read()))


@dataclass(frozen=True)
class Reply:
    """One recorded move: the text and tokens the game got, and the server's decode steps for it."""

    text: str
    tokens: tuple[int, ...]
    steps: int


@dataclass
class Meter:
    """What one path's episodes cost the server: prompt tokens evaluated, their minimum, tokens generated."""

    evaluated: int = 0
    minimum: int = 0
    generated: int = 0
    turns: int = 0
    moves: list[str] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)


class ServerSeats:
    """A self-play `Sampler` on llama-server's ``/completion``: the prompt as token ids, the reply's own tokens.

    ``append`` takes each seat's chat (a seat is its `SeatChat`) and pins the seat to a slot, with the prompt
    cache on after the seat's first turn; otherwise each prompt is evaluated whole. Seeds come from ``key`` and
    the call's position in its seat, so both paths and both passes draw with the same seeds.
    """

    def __init__(self, url: str, tokenizer: Any, append: bool, slots: int, key: str, meter: Meter,
                 offset: int = 0, script: Sequence[Reply] | None = None) -> None:
        self.url, self.tok, self.append, self.slots, self.key, self.meter = url, tokenizer, append, slots, key, meter
        self.script = script  # replayed moves (`--replay`): the game gets these, the server decodes as many steps
        self.offset = offset  # the first slot of this episode's seats (episodes in flight get their own slots)
        self.seat_of: dict[int, int] = {}
        self.seen: list[list[int]] = []  # every prompt and reply of the episode so far
        self.calls: dict[int, int] = {}

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        return complete(self.url, body)

    def _generate(self, prompt: str, prefill: str, stop: Stop, max_tokens: int | None,
                  chat: SeatChat | None, seat: int) -> Generation:
        ids = chat_prompt_ids(self.tok, chat, prompt, prefill)
        k = self.calls.get(seat, 0)
        self.calls[seat] = k + 1
        seed = int.from_bytes(hashlib.sha256(f"{self.key}/{seat}/{k}".encode()).digest()[:4], "little") & 0x7FFFFFFF
        body: dict[str, Any] = {"prompt": ids, "n_predict": max_tokens or MAX_TOKENS, "temperature": TEMPERATURE,
                                "seed": seed, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0,
                                "return_tokens": True, "cache_prompt": bool(self.append and k > 0)}
        if self.append:
            body["id_slot"] = (self.offset + seat) % self.slots
        replay: Reply | None = None
        if self.script is not None:
            if len(self.meter.replies) >= len(self.script):
                raise RuntimeError(f"the replayed episode asked for move {len(self.meter.replies) + 1}; "
                                   f"the recorded one played {len(self.script)}")
            replay = self.script[len(self.meter.replies)]
            body.update(n_predict=max(1, replay.steps), ignore_eos=True)  # the reference's decode steps, no stop
        elif stops(stop):
            body["stop"] = list(stops(stop))
        reply = self._post(body)
        if replay is not None:
            text, tokens = replay.text, list(replay.tokens)
        else:
            text = str(reply.get("content", ""))
            tokens = [int(t) for t in reply.get("tokens") or []]
            if not tokens:
                tokens = [int(t) for t in self.tok(text, add_special_tokens=False)["input_ids"]]
            if reply.get("stop_type") == "eos":
                tokens.append(int(self.tok.eos_token_id))
            tokens = tokens or [int(self.tok.eos_token_id)]
        steps = int(reply.get("timings", {}).get("predicted_n", len(tokens)))
        self.meter.replies.append(Reply(text, tuple(tokens), steps))
        known = max((_common(before, ids) for before in self.seen), default=0)
        self.seen.append([*ids, *tokens])
        self.meter.evaluated += int(reply.get("timings", {}).get("prompt_n", len(ids)))
        self.meter.minimum += len(ids) - min(known, len(ids) - 1)
        self.meter.generated += len(tokens)
        self.meter.turns += 1
        self.meter.moves.append(text)
        return Generation(text=prefill + text, prompt_ids=ids, token_ids=tokens, logprobs=[0.0] * len(tokens))


class AppendSeats(ServerSeats):
    def generate(self, prompt: str, prefill: str = "", stop: Stop = None, max_tokens: int | None = None,
                 chat: SeatChat | None = None) -> Generation:
        seat = self.seat_of.setdefault(id(chat), len(self.seat_of))
        return self._generate(prompt, prefill, stop, max_tokens, chat, seat)


class RerenderSeats(ServerSeats):
    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None) -> Generation:
        return self._generate(prompt, prefill, stop, max_tokens, None, 0)


def _sampler(path: str, url: str, tok: Any, slots: int, key: str, meter: Meter, offset: int,
             script: Sequence[Reply] | None) -> Any:
    if path == "rerender":
        return RerenderSeats(url, tok, False, slots, key, meter, script=script)
    return AppendSeats(url, tok, path == "append", slots, key, meter, offset, script)


def play_workload(workload: str, path: str, url: str, tok: Any, slots: int, turns: int, rounds: int,
                  episode: int, lane: int = 0, script: Sequence[Reply] | None = None,
                  ) -> tuple[Meter, float, Rollout | None]:
    """Play one episode of ``workload`` on ``path`` (its seats on the slots of ``lane``; with ``script``, those
    moves); return its meter, wall seconds and rollout (None: SOTOPIA)."""
    meter = Meter()
    sampler = _sampler(path, url, tok, slots, f"{workload}/{episode}", meter, lane * SEATS[workload], script)
    transcript = "rerender" if path == "rerender" else "append"
    start = time.perf_counter()
    rollout: Rollout | None = None
    if workload == "two-seat":
        rollout = play(synthesize("negotiation", "easy", 100 + episode), sampler, rollout_id=f"b/{episode}",
                       iteration=0, sample=episode, max_turns=turns, transcript=transcript)  # type: ignore[arg-type]
    elif workload == "werewolf":
        rollout = play_game_rollout("werewolf", sampler, seed=episode, players=5, options={"max_rounds": rounds},
                                    rollout_id=f"w/{episode}", task_id=f"werewolf:{episode}", iteration=0,
                                    sample=episode, transcript=transcript)  # type: ignore[arg-type]
    else:
        scenario = shipped()[episode % len(shipped())]
        env = SocialEnv([], [], max_turns=turns, judge=_NoJudge(), transcript=transcript)  # type: ignore[arg-type]
        try:
            env.run_scenario(scenario, sampler)
        except TypeError:  # the judge's turn, after every move was played and metered
            pass
    return meter, time.perf_counter() - start, rollout


class _NoJudge:
    """The judge is not part of what is measured: it answers nothing, and the episode stays unscored."""

    def with_structured_output(self, *_: Any, **__: Any) -> _NoJudge:
        return self

    def bind_tools(self, *_: Any, **__: Any) -> _NoJudge:
        return self

    def invoke(self, *_: Any, **__: Any) -> Any:
        raise RuntimeError("no judge in this benchmark")


def measure(workload: str, path: str, url: str, tok: Any, slots: int, episodes: int, turns: int, rounds: int,
            in_flight: int, order: Sequence[int] | None = None,
            scripts: Sequence[Sequence[Reply]] | None = None) -> dict[str, Any]:
    """Play ``episodes`` episodes of ``workload`` on ``path``, ``in_flight`` at once (with ``scripts``, episode
    e replays the moves ``scripts[e]``); return the row."""
    order = list(order if order is not None else range(episodes))
    start = time.perf_counter()
    with ThreadPoolExecutor(max(1, in_flight)) as pool:
        done = list(pool.map(lambda e: (e, *play_workload(workload, path, url, tok, slots, turns, rounds, e,
                                                          e % max(1, in_flight),
                                                          scripts[e] if scripts is not None else None)), order))
    wall = time.perf_counter() - start
    done.sort(key=lambda d: d[0])
    meters = [m for _, m, _, _ in done]
    evaluated, minimum = sum(m.evaluated for m in meters), sum(m.minimum for m in meters)
    generated = sum(m.generated for m in meters)
    rollouts = [r for _, _, _, r in done if r is not None]
    ratio = [x for r in rollouts if (x := r.append_ratio()) is not None]
    return {"workload": workload, "path": path, "episodes": episodes, "turns": sum(m.turns for m in meters),
            "evaluated": evaluated, "minimum": minimum, "over_min": evaluated / max(1, minimum),
            "generated": generated, "tokens_per_s": generated / wall, "wall": wall,
            "episode_s": sum(s for _, _, s, _ in done) / len(done),
            "append": min(ratio) if ratio else None, "moves": [mv for m in meters for mv in m.moves],
            "by_episode": [m.moves for m in meters], "replies": [m.replies for m in meters],
            "rollouts": rollouts}


def update_seconds(rollouts: list[Rollout], repeats: int = 1) -> dict[str, float]:
    """Seconds of one PPO update (one epoch, kl 0) over the rollouts' seats: one row per turn, one per seat."""
    import torch

    from swm.training.config import PolicyConfig, PPOConfig
    from swm.training.policy import LoraValueModel
    from swm.training.ppo import make_optimizer, ppo_update, training_samples

    torch.manual_seed(0)
    policy = LoraValueModel.create(PolicyConfig(base="embedded", threads=1))
    for r in rollouts:
        for s in r.seats:
            for t in s.turns:
                t.advantages = [0.1] * len(t.token_ids)
                t.returns = [0.0] * len(t.token_ids)
    out: dict[str, float] = {}
    ppo = PPOConfig(kl_coef=0.0, value_coef=0.0, minibatch=8, micro_batch=2)
    for sequences in ("turn", "seat"):
        samples = training_samples(rollouts, sequences)  # type: ignore[arg-type]
        for sample in samples:
            sample.old_logprobs = [0.0] * len(sample.old_logprobs)
        optimizer = make_optimizer(policy, ppo)
        start = time.perf_counter()
        for _ in range(repeats):
            ppo_update(policy, optimizer, samples, ppo)
        out[sequences] = (time.perf_counter() - start) / repeats
        out[f"{sequences}_rows"] = float(len(samples))
        out[f"{sequences}_tokens"] = float(sum(len(s.sequence) for s in samples))
    return out


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| workload | path | episodes | turns | prompt tokens evaluated | minimum | over the minimum | "
             "generated tok/s | episode s | wall s | append ratio | speed-up |", "|---|" + "---|" * 11]
    old = {r["workload"]: r for r in rows if r["path"] == "rerender"}  # the path before: the speed-up's base
    for r in rows:
        base = old.get(r["workload"])
        speed = f"{base['wall'] / r['wall']:.2f}x" if base and r["path"] != "rerender" else "-"
        ratio = "-" if r["append"] is None else f"{r['append']:.0%}"
        lines.append(f"| {r['workload']} | {r['path']} | {r['episodes']} | {r['turns']} | {r['evaluated']} | "
                     f"{r['minimum']} | {r['over_min']:.2f}x | {r['tokens_per_s']:.1f} | {r['episode_s']:.1f} | "
                     f"{r['wall']:.1f} | {ratio} | {speed} |")
    return lines


def replay_table(args: argparse.Namespace, rows: list[dict[str, Any]], url: str, tok: Any, slots: int) -> None:
    """Replay the append path's moves on each ``--replay`` path and print the table at the same outputs."""
    print("\n## At the same outputs: every path replays the append path's moves\n")
    print("Each path renders its own prompts and uses its own cache; the server decodes as many tokens as the "
          "recorded move had, and the game gets the recorded move, so every path plays the same game.\n")
    print("| workload | path | episodes | moves | prompt tokens evaluated | minimum | over the minimum | "
          "decode steps | wall s | s per move | speed-up |\n|---|" + "---|" * 10)
    for workload in [w for w in args.workloads.split(",") if w]:
        reference = next(r for r in rows if r["workload"] == workload and r["path"] == "append")
        replayed = []
        for path in [p for p in PATHS if p in args.replay.split(",")]:
            r = measure(workload, path, url, tok, slots, args.episodes, args.turns, args.rounds, args.in_flight,
                        scripts=reference["replies"])
            if r["moves"] != reference["moves"]:
                raise RuntimeError(f"{workload} {path}: the replay played other moves than the recorded episode")
            replayed.append(r)
            print(f"{workload} {path} replayed: {r['evaluated']} evaluated, {r['wall']:.1f} s", file=sys.stderr,
                  flush=True)
        base = next((r for r in replayed if r["path"] == "rerender"), None)
        for r in replayed:
            steps = sum(x.steps for episode in r["replies"] for x in episode)
            speed = f"{base['wall'] / r['wall']:.2f}x" if base is not None and r is not base else "-"
            print(f"| {workload} | {r['path']} | {r['episodes']} | {r['turns']} | {r['evaluated']} | {r['minimum']} | "
                  f"{r['over_min']:.2f}x | {steps} | {r['wall']:.1f} | {r['wall'] / max(1, r['turns']):.2f} | "
                  f"{speed} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.engine_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--episodes", type=int, default=2, help="episodes per workload and path")
    parser.add_argument("--turns", type=int, default=8, help="turns of a two-seat or SOTOPIA episode")
    parser.add_argument("--rounds", type=int, default=1, help="Werewolf rounds (max_rounds)")
    parser.add_argument("--in-flight", type=int, default=2, help="episodes played at once")
    parser.add_argument("--growth", default="4,8,16", help="two-seat turn counts for the cost-vs-turns table ('' off)")
    parser.add_argument("--update", action="store_true", help="also time the PPO update per row layout (torch)")
    parser.add_argument("--repeat", action="store_true", help="play the append path again in reverse order and "
                        "count equal moves")
    parser.add_argument("--paths", default=",".join(PATHS), help="paths that draw their own moves (append is needed "
                        "by --replay, --repeat, --update and the same-draw table)")
    parser.add_argument("--replay", default="", help="paths that replay the append path's moves, for the table at "
                        "the same outputs ('' off; e.g. rerender,append)")
    parser.add_argument("--no-page", action="store_true")
    args = parser.parse_args(argv)
    for option in ("paths", "replay"):
        unknown = sorted(set(getattr(args, option).split(",")) - {*PATHS, ""})
        if unknown:
            parser.error(f"--{option}: unknown path {', '.join(unknown)} (paths: {', '.join(PATHS)})")
    if (args.replay or args.repeat or args.update) and "append" not in args.paths.split(","):
        parser.error("--replay, --repeat and --update use the append path's episodes: keep append in --paths")
    with results_page("engine-speed", title(args), "bench.engine_speed", argv, enabled=not args.no_page,
                      markdown=True):
        run(args)


def title(args: argparse.Namespace) -> str:
    """Return the page's title: a run of other workloads (or Werewolf rounds) than the defaults names them, so the
    results index keeps it apart from the default command's pages."""
    base = "Episodes at the engine's speed: re-rendered against append-only seats"
    workloads = args.workloads.split(",")
    if workloads == list(WORKLOADS) and args.rounds == 1:
        return base
    rounds = [f"{args.rounds} rounds"] if "werewolf" in workloads and args.rounds != 1 else []
    return f"{base} ({', '.join([*workloads, *rounds])})"


def run(args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    os.environ["SWM_EMBEDDED_ENGINE"] = "llama-server"
    os.environ.setdefault("SWM_EMBEDDED_SLOTS", "10")  # a slot per seat in flight: two 5-seat games
    os.environ.setdefault("SWM_EMBEDDED_CTX", "4096")
    load = os.getloadavg()
    echo = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    server = embedded.ensure_server()
    url = server.base_url.removesuffix("/v1")
    slots = embedded.slots()
    shipped_gguf = gguf_path()
    tok = AutoTokenizer.from_pretrained(str(shipped_gguf.parent), gguf_file=shipped_gguf.name)
    print(f"Load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores); "
          f"llama-server, {slots} slots, temperature {TEMPERATURE}, replies up to {MAX_TOKENS} tokens, "
          f"{args.in_flight} episodes in flight.\n")
    rows: list[dict[str, Any]] = []
    for workload in [w for w in args.workloads.split(",") if w]:
        for path in [p for p in PATHS if p in args.paths.split(",")]:
            row = measure(workload, path, url, tok, slots, args.episodes, args.turns, args.rounds, args.in_flight)
            echo(f"{workload} {path}: {row['evaluated']} evaluated / {row['minimum']} minimum, {row['wall']:.1f} s")
            rows.append(row)
    print("## Workloads\n")
    print("\n".join(table(rows)))
    if args.replay:
        replay_table(args, rows, url, tok, slots)
    drew = set(args.paths.split(","))
    same_draws = [w for w in args.workloads.split(",") if w and {"append-fresh", "append"} <= drew]
    if same_draws:
        print("\n## Same seed, same move: the append path's moves against append-fresh's (same prompts, same seeds)\n")
        print("| workload | episodes alike | moves alike before the first difference | moves |\n|---|---|---|---|")
    for workload in same_draws:
        fresh = next(r for r in rows if r["workload"] == workload and r["path"] == "append-fresh")
        seat = next(r for r in rows if r["workload"] == workload and r["path"] == "append")
        alike, before = 0, 0
        for a, b in zip(fresh["by_episode"], seat["by_episode"], strict=True):
            k = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            alike += int(a == b)
            before += k
        print(f"| {workload} | {alike} / {len(fresh['by_episode'])} | {before} | {fresh['turns']} |")
    if args.repeat:
        again = {}
        for workload in [w for w in args.workloads.split(",") if w]:
            first = next(r for r in rows if r["workload"] == workload and r["path"] == "append")
            second = measure(workload, "append", url, tok, slots, args.episodes, args.turns, args.rounds,
                             args.in_flight, order=list(range(args.episodes))[::-1])
            same = sum(a == b for a, b in zip(first["moves"], second["moves"], strict=False))
            again[workload] = (same, len(first["moves"]), len(second["moves"]))
        print("\n## Same seed, same move (append path played twice, episodes in reverse order)\n")
        print("| workload | moves equal | moves |\n|---|---|---|")
        for workload, (same, n, m) in again.items():
            print(f"| {workload} | {same} | {n} / {m} |")
    if args.growth:
        print("\n## Cost against turns (two-seat, one episode a row)\n")
        print("| turns | path | prompt tokens evaluated | minimum | over the minimum | wall s |")
        print("|---|---|---|---|---|---|")
        for turns in [int(t) for t in args.growth.split(",") if t]:
            for path in ("rerender", "append"):
                r = measure("two-seat", path, url, tok, slots, 1, turns, args.rounds, 1)
                print(f"| {turns} | {path} | {r['evaluated']} | {r['minimum']} | {r['over_min']:.2f}x | "
                      f"{r['wall']:.1f} |")
    if args.update:
        rollouts = [ro for r in rows if r["workload"] == "two-seat" and r["path"] == "append" for ro in r["rollouts"]]
        if rollouts:
            u = update_seconds(rollouts)
            print("\n## Update per iteration (PPO, torch, the two-seat episodes' seats)\n")
            print("| rows | count | tokens scored | seconds |\n|---|---|---|---|")
            print(f"| one per turn | {u['turn_rows']:.0f} | {u['turn_tokens']:.0f} | {u['turn']:.1f} |")
            print(f"| one per seat | {u['seat_rows']:.0f} | {u['seat_tokens']:.0f} | {u['seat']:.1f} |")
    print(f"\nLoad average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}.")
    embedded.stop_server()


if __name__ == "__main__":
    main()
