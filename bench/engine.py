"""``python -m bench.engine``: swm's sampling against the engine's own limit, old serving path beside the new.

First the limit (`bench.engine_limit`): the embedded GGUF's prompt tokens/s and generated tokens/s
with 1, 4 and 8 sequences decoded together, through llama.cpp's batched C API. Then each serving
path runs swm's workloads (`bench.engine_workloads`) in a child process of its own, the embedded
server chosen by ``SWM_EMBEDDED_ENGINE`` (``python``: llama-cpp-python's server, which answers one
request at a time; ``llama-server``: llama.cpp's C++ server with parallel slots): N concurrent plain
and Foresee-and-Act episodes, a lifelong cycle (its collect phase, and the cycle's split between
sampling, training and the rest), a self-play iteration (its rollouts, likewise) and Werewolf games.
Each workload's generated tokens/s is shown as a ratio of the limit at the same number of sequences
in flight, with the prompt-reuse ratio (prompt tokens evaluated / sent). ``--endpoint name@URL``
measures any OpenAI-compatible server instead (one path, no limit: the tests run it on the fake
server). Not a timed test; see bench/README.md, "Sampling at the engine's speed".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import meter
from bench.engine_limit import measure
from bench.engine_workloads import WORKLOADS, Row
from bench.engine_workloads import run as run_workloads
from bench.results import results_page
from swm.context import ACT_ORDERS
from swm.serving.embedded import ensure_server, gguf_path

# each serving path's settings: the embedded engine, and whether a decision's samples may share a request
PATHS = {"old": {"SWM_EMBEDDED_ENGINE": "python"},
         "new": {"SWM_EMBEDDED_ENGINE": "llama-server"},
         "unshared": {"SWM_EMBEDDED_ENGINE": "llama-server", "SWM_EMBEDDED_SHARED_SAMPLES": "0"}}


def sizes(quick: bool, in_flight: int, turns: int | None = None,
          act_orders: tuple[str, ...] = ("sotopia",), cycle: tuple[int, int, int] | None = None,
          ) -> dict[str, dict[str, Any]]:
    """Each workload's size: small enough that both paths finish in about fifteen minutes on two cores.

    Self-play plays as many rollouts at once as `swm selfplay` does by default (the server's slots).
    ``turns`` overrides the episodes' turn limit; plain and Foresee-and-Act episodes are played once per
    acting-prompt order in ``act_orders``. ``cycle`` = (decisions collected, test and dev tasks, trainer
    steps) overrides the lifelong cycle's size.
    """
    n, orders = in_flight, list(act_orders)
    decisions, evaluated, steps = cycle or ((4, 1, 1) if quick else (8, 1, 2))
    return {"plain": {"n": n, "turns": turns or (2 if quick else 8), "act_orders": orders},
            "foresee": {"n": 2 if quick else max(1, n // 2), "turns": turns or (1 if quick else 4),
                        "act_orders": orders},
            "lifelong": {"n": n, "episodes": decisions, "update": "rs-sft", "train_steps": steps, "eval": evaluated},
            "selfplay": {"n": None, "tasks": 1, "group": 2 if quick else 4, "turns": 2, "new_tokens": 16},
            "werewolf": {"n": 1, "players": 5, "rounds": 1}}


def child(args: argparse.Namespace) -> None:
    """Run the workloads on one path (this process's embedded engine, or ``--endpoint``); write rows as JSON."""

    if args.endpoint:
        name, _, url = args.endpoint.partition("@")
        model = f"{name}@{meter.METERS.for_server(url, None).proxied(url)}"
    else:
        meter.wrap_embedded()
        ensure_server()  # from this thread, which outlives every pool (a server dies with the thread that started it)
        model = "embedded"
    names = [w for w in args.workloads.split(",") if w]
    chosen = sizes(args.quick, args.in_flight, args.turns, tuple(o for o in args.act_orders.split(",") if o),
                   _cycle(args.cycle))
    if args.endpoint:  # no trainer behind a plain endpoint: the lifelong cycle's update is the memory one
        chosen["lifelong"]["update"] = "memory"
    rows = run_workloads(names, model, chosen, echo=lambda s: print(s, file=sys.stderr))
    Path(args.child).write_text(json.dumps([asdict(r) for r in rows]))


def run_path(path: str, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Run one serving path's workloads in a child process; return its rows (a failed child: one error row)."""
    # as many slots as sequences in flight (llama-cpp-python's server has one whatever this says)
    env = {**os.environ, **PATHS[path], "SWM_EMBEDDED_SLOTS": str(args.in_flight)}
    cmd = [sys.executable, "-m", "bench.engine", "--child", str(out), *_shared_args(args)]
    print(f"{path} path ({' '.join(f'{k}={v}' for k, v in PATHS[path].items())}):", file=sys.stderr)
    done = subprocess.run(cmd, env=env, cwd=Path(__file__).resolve().parent.parent)
    if done.returncode != 0 or not out.is_file():
        return [asdict(Row(f"{path} path", args.in_flight, error=f"exit {done.returncode}"))]
    return list(json.loads(out.read_text()))


def _shared_args(args: argparse.Namespace) -> list[str]:
    """The options a child run takes from its parent."""
    return (["--workloads", args.workloads, "--in-flight", str(args.in_flight), "--act-orders", args.act_orders]
            + (["--turns", str(args.turns)] if args.turns else []) + (["--quick"] if args.quick else [])
            + (["--cycle", args.cycle] if args.cycle else []))


def _cycle(text: str | None) -> tuple[int, int, int] | None:
    """``--cycle D,E,S``: D decisions collected, E test and E dev tasks, S trainer steps."""
    if not text:
        return None
    d, e, s = (int(x) for x in text.split(","))
    return d, e, s


def _ratio(x: float | None, limit: float | None) -> str:
    return f"{x / limit:.2f}" if x and limit else "-"


def _widths(paths: dict[str, list[dict[str, Any]]]) -> tuple[int, int]:
    """The path and workload columns' widths: the longest name in each, at least 5 and 44."""
    return (max([5, *(len(p) for p in paths)]),
            max([44, *(len(str(r.get("workload", ""))) for rows in paths.values() for r in rows)]))


def table(limit: dict[str, Any] | None, paths: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The limit, then one line per path and workload: tokens/s as a ratio of the limit, reuse, the time split."""
    lines = []
    pw, ww = _widths(paths)
    gen = (limit or {}).get("generate", {})
    if limit:
        lines += [f"Engine limit (llama.cpp batched decode, {limit['threads']} threads): prompt "
                  f"{limit['prompt_tokens_per_s']:.0f} tokens/s; generated "
                  + ", ".join(f"{v:.1f} tokens/s with {k} in flight" for k, v in gen.items())]

    def limit_at(n: int) -> float | None:
        keys = sorted(int(k) for k in gen)
        return gen[str(max([k for k in keys if k <= n] or keys[:1]))] if keys else None

    lines.append(f"  {'path':<{pw}} {'workload':<{ww}} {'in flight':>9} {'peak':>4} {'calls':>5} {'gen tok/s':>9} "
                 f"{'/limit@n':>8} {'/limit@8':>8} {'reuse':>5}  {'total s':>7} {'sample':>6} {'train':>6} "
                 f"{'other':>6} {'train tok/s':>11}")
    for path, rows in paths.items():
        for r in rows:
            if r.get("error"):
                lines.append(f"  {path:<{pw}} {r['workload']:<{ww}} error: {r['error']}")
                continue
            row = Row(**r)
            reuse = f"{row.reuse:.2f}" if row.reuse is not None else "-"
            split = ""
            if row.total_seconds:
                t, s, tr = row.total_seconds, row.sampling_seconds or 0.0, row.training_seconds or 0.0
                split = f"{t:>7.0f} {s / t:>6.2f} {tr / t:>6.2f} {max(0.0, t - s - tr) / t:>6.2f}"
                rate = row.train_tokens / row.train_seconds if row.train_tokens and row.train_seconds else None
                split += f" {rate:>11.0f}" if rate else f" {'-':>11}"
            lines.append(f"  {path:<{pw}} {row.workload:<{ww}} {row.in_flight:>9} {row.peak:>4} {row.calls:>5} "
                         f"{row.tokens_per_s:>9.1f} {_ratio(row.tokens_per_s, limit_at(row.in_flight)):>8} "
                         f"{_ratio(row.tokens_per_s, limit_at(8)):>8} {reuse:>5}  {split}"
                         + (f"  ({row.note.strip('; ')})" if row.note else ""))
    lines += reuse_table(limit, paths, limit_at)
    lines += speedups(paths)
    return lines


def reuse_table(limit: dict[str, Any] | None, paths: dict[str, list[dict[str, Any]]], limit_at: Any) -> list[str]:
    """Where each workload's prompt tokens went, and how busy its tokens alone would keep the engine.

    *bound*: the reuse an unbounded prefix cache could reach with swm's prompts as laid out (1 - the leading part
    a request sent before had sent / the prompt, an earlier workload's requests included: the server's cache
    outlives a workload; in tokens as llama-server renders and tokenizes the
    prompts, in characters sent elsewhere: *unit*); *continued*: the calls that had at least half of their prompt
    sent before (a seat's later turn) with their own reuse and bound; *engine*: the seconds the engine
    needs at its measured limits for the prompt tokens it evaluated and the tokens it generated (at the most
    requests in flight; one for the old path, whose server decodes one at a time), over the phase's wall
    seconds: near 1, the engine was the bottleneck; far below, swm was.
    """
    pw, ww = _widths(paths)
    lines = [f"  {'path':<{pw}} {'workload':<{ww}} {'reuse':>5} {'bound':>5}  {'continued':>9} {'reuse':>5} "
             f"{'bound':>5}  {'engine':>6}  {'unit':<10}"]
    prompt_rate = (limit or {}).get("prompt_tokens_per_s")
    for path, rows in paths.items():
        for r in rows:
            if r.get("error"):
                continue
            row = Row(**r)
            busy = "-"
            together = 1 if path == "old" else max(1, row.peak)  # llama-cpp-python's server decodes one at a time
            if prompt_rate and row.seconds and limit_at(together):
                evaluated = row.prompt_evaluated if row.prompt_evaluated is not None else row.prompt_sent
                need = evaluated / prompt_rate + row.completion / limit_at(together)
                busy = f"{need / row.seconds:.2f}"
            lines.append(f"  {path:<{pw}} {row.workload:<{ww}} {_fmt(row.reuse):>5} {_fmt(row.bound):>5}  "
                         f"{row.continued_calls:>9} {_fmt(row.continued_reuse):>5} {_fmt(row.continued_bound):>5}"
                         f"  {busy:>6}  {row.bound_unit:<10}")
    return lines if len(lines) > 1 else []


def _fmt(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "-"


def speedups(paths: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The new path against each other path, workload by workload: sampling tokens/s and a whole cycle's or
    iteration's time."""
    if "new" not in paths:
        return []
    lines, ww = [], _widths(paths)[1]
    for other in [p for p in paths if p != "new"]:
        before_rows = {r["workload"]: Row(**r) for r in paths[other] if not r.get("error")}
        lines.append(f"  new path / {other} path:")
        for r in paths["new"]:
            if r.get("error") or r["workload"] not in before_rows:
                continue
            new, before = Row(**r), before_rows[r["workload"]]
            text = f"    {new.workload:<{ww}} sampling tokens/s {_ratio(new.tokens_per_s, before.tokens_per_s)}x"
            if new.total_seconds and before.total_seconds:
                text += f"; whole {'cycle' if 'lifelong' in new.workload else 'iteration'} " \
                        f"{before.total_seconds / new.total_seconds:.2f}x faster"
            lines.append(text)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__.splitlines()[0])
    parser.add_argument("--paths", default="old,new",
                        help="serving paths side by side: old (llama-cpp-python's server), new (llama-server), "
                             "unshared (llama-server, a decision's samples never sharing a request)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--in-flight", type=int, default=8, help="episodes, rollouts and cycle episodes at once")
    parser.add_argument("--turns", type=int, default=None,
                        help="turn limit of the plain and Foresee-and-Act episodes [default: 8 and 4; --quick 2 and 1]")
    parser.add_argument("--act-orders", default="sotopia,prefix",
                        help="acting-prompt orders to play the episodes in, a row each (sotopia, prefix)")
    parser.add_argument("--cycle", default=None, metavar="D,E,S",
                        help="the lifelong cycle's size: D decisions collected (two samples a task), E test and E dev "
                             "tasks evaluated per policy, S trainer steps [default: 8,1,2; --quick 4,1,1]")
    parser.add_argument("--no-limit", action="store_true", help="skip the engine's own limit")
    parser.add_argument("--quick", action="store_true", help="smaller workloads (a smoke run)")
    parser.add_argument("--endpoint", default=None, metavar="NAME@URL",
                        help="measure this OpenAI-compatible server instead of the embedded paths")
    parser.add_argument("--json", type=Path, default=None, help="also write every measurement to this file")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-page", action="store_true", help="do not write the run's dated page under docs/results/")
    args = parser.parse_args(argv)
    unknown = {w for w in args.workloads.split(",") if w} - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(sorted(unknown))}; choose from {', '.join(WORKLOADS)}")

    orders = {o for o in args.act_orders.split(",") if o}
    if not orders or orders - set(ACT_ORDERS):
        parser.error(f"--act-orders takes {' or '.join(ACT_ORDERS)}, or both")
    if set(args.paths.split(",")) - set(PATHS) - {""}:
        parser.error(f"--paths takes {', '.join(PATHS)}")
    try:
        _cycle(args.cycle)
    except ValueError:
        parser.error("--cycle takes three whole numbers: decisions,eval tasks,trainer steps (e.g. 200,50,30)")
    if args.child:
        child(args)
        return
    with results_page("engine", "Sampling at the engine's speed", "bench.engine", argv,
                      enabled=not (args.quick or args.no_page)):
        measure_paths(args)


def measure_paths(args: argparse.Namespace) -> None:
    """Measure the engine's limit and each serving path's workloads; print the table."""
    started = time.perf_counter()
    load = os.getloadavg()[0]
    print(f"python -m bench.engine — load average at start {load:.1f}", file=sys.stderr)
    limit = None
    if not args.no_limit and not args.endpoint:
        limit = measure(gguf_path())
    results: dict[str, list[dict[str, Any]]] = {}
    folder = Path(tempfile.gettempdir())
    if args.endpoint:
        out = folder / f"swm-bench-engine-{os.getpid()}-endpoint.json"
        argv_child = ["--child", str(out), *_shared_args(args), "--endpoint", args.endpoint]
        main(argv_child)
        results["endpoint"] = json.loads(out.read_text())
    else:
        for path in [p for p in args.paths.split(",") if p]:
            results[path] = run_path(path, args, folder / f"swm-bench-engine-{os.getpid()}-{path}.json")
    lines = table(limit, results)
    lines.append(f"load average at start {load:.1f}, at end {os.getloadavg()[0]:.1f}; "
                 f"{time.perf_counter() - started:.0f} s in all")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"limit": limit, "paths": results, "load": load}, indent=1))


if __name__ == "__main__":
    main()
