"""swm's own sampling on the engine: episodes, Foresee-and-Act, a lifelong cycle, a self-play iteration, Werewolf.

Each workload runs the real graph in this process on one model (the embedded server, or any
``name@URL`` endpoint) with every completion going through a metering proxy (`bench.meter`). A
`Window` marks the phase that samples (all of a batch of episodes; a lifelong cycle's collect
phase; a self-play iteration's rollouts) and the whole cycle or iteration around it, and turns the
proxy's records into a `Row`: generated tokens per second of the phase, prompt tokens sent and
evaluated, the most requests in flight, and for a cycle or iteration the seconds spent sampling
(the union of the calls' intervals), training (the update node) and on everything else.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.meter import METERS, Call, by_tokens, sent_size, shared_prefixes
from swm.checkpoints import open_saver, open_store, run_thread
from swm.context import SWMContext
from swm.games.graph_state import GameInput
from swm.graphs import episode, game, lifelong
from swm.graphs.selfplay import train
from swm.lifelong import store as ls
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.samples import Sample, sample_rows
from swm.lifelong.update import training_rows
from swm.scenarios import shipped
from swm.selfplay import store as sps
from swm.selfplay.served import default_concurrency
from swm.social.graph_state import ActStrategy, EpisodeInput
from swm.tasks.decisions import decision_prompt, decision_task
from swm.training.config import PolicyConfig
from swm.training.trl_update import TrainSettings, train_adapter

WORKLOADS = ("plain", "foresee", "lifelong", "selfplay", "werewolf")


@dataclass
class Row:
    """One workload's sampling phase (and, for a cycle or iteration, where its whole time went)."""

    workload: str
    in_flight: int  # requests swm was allowed to keep in flight
    seconds: float = 0.0
    calls: int = 0
    prompt_sent: int = 0
    prompt_evaluated: int | None = None
    completion: int = 0
    peak: int = 0  # most completions the proxy saw in flight at once
    total_seconds: float | None = None
    sampling_seconds: float | None = None
    training_seconds: float | None = None
    train_tokens: int | None = None
    train_seconds: float | None = None  # the trainer's own seconds (tokens/s = train_tokens / this)
    # the prompts' sizes and leading parts an earlier call of the phase had already sent (`shared_prefixes`),
    # in `bound_unit`: tokens as the engine renders them where it says (llama-server), else characters sent
    bound_unit: str = "characters"
    bound_sent: int = 0
    bound_shared: int = 0
    # "continued" calls: at least half of what they sent an earlier call had sent (a seat's later turn, not
    # its first): how many, their prompt tokens sent and evaluated, their sizes and shared parts (`bound_unit`)
    continued_calls: int = 0
    continued_sent: int = 0
    continued_evaluated: int | None = None
    continued_size: int = 0
    continued_shared: int = 0
    note: str = ""
    error: str | None = None

    @property
    def bound(self) -> float | None:
        """The reuse an unbounded prefix cache could reach with these prompts (1 - shared / sent, in `bound_unit`)."""
        return 1 - self.bound_shared / self.bound_sent if self.bound_sent else None

    @property
    def continued_reuse(self) -> float | None:
        return self.continued_evaluated / self.continued_sent \
            if self.continued_evaluated is not None and self.continued_sent else None

    @property
    def continued_bound(self) -> float | None:
        return 1 - self.continued_shared / self.continued_size if self.continued_size else None

    @property
    def tokens_per_s(self) -> float:
        return self.completion / self.seconds if self.seconds else 0.0

    @property
    def reuse(self) -> float | None:
        """Prompt tokens the engine evaluated / prompt tokens sent (1: no prompt served from a cache)."""
        return self.prompt_evaluated / self.prompt_sent if self.prompt_evaluated is not None and self.prompt_sent \
            else None


@dataclass
class Window:
    """A span of the run: the calls answered inside it and the Python servers' log lines written meanwhile."""

    start: float = 0.0
    end: float = 0.0
    offsets: dict[str, int] = field(default_factory=dict)
    logged_evaluated: int = 0  # prompt tokens llama-cpp-python's servers logged as evaluated meanwhile
    logged: int = 0

    def open(self) -> None:
        self.start, self.offsets = time.time(), METERS.log_offsets()

    def close(self) -> None:
        self.end = time.time()
        self.logged_evaluated, self.logged = METERS.evaluated_since(self.offsets)

    def calls(self) -> list[Call]:
        return [c for c in METERS.calls() if self.start < c.end <= self.end]


def fill(row: Row, window: Window) -> Row:
    """Fill ``row``'s sampling figures from the calls of ``window``."""
    calls = window.calls()
    row.seconds = window.end - window.start
    row.calls = len(calls)
    row.prompt_sent = sum(c.prompt_tokens for c in calls)
    row.completion = sum(c.completion_tokens for c in calls)
    row.peak = peak(calls)
    # against every prompt this process sent before, an earlier workload's too: the server keeps its cache
    # from one workload to the next, so what it could serve includes theirs
    everything = METERS.calls()
    shared = dict(zip(map(id, everything), shared_prefixes(everything), strict=True))
    tokens = by_tokens(calls)
    row.bound_unit = "tokens" if tokens else "characters"
    row.bound_sent = sum(sent_size(c, tokens) for c in calls)
    row.bound_shared = sum(shared[id(c)] for c in calls)
    continued = [c for c in calls if sent_size(c, tokens) and shared[id(c)] >= sent_size(c, tokens) / 2]
    row.continued_calls, row.continued_sent = len(continued), sum(c.prompt_tokens for c in continued)
    row.continued_size = sum(sent_size(c, tokens) for c in continued)
    row.continued_shared = sum(shared[id(c)] for c in continued)
    if continued and all(c.evaluated is not None for c in continued):
        row.continued_evaluated = sum(int(c.evaluated or 0) for c in continued)
    if calls and all(c.evaluated is not None for c in calls):
        row.prompt_evaluated = sum(int(c.evaluated or 0) for c in calls)
    elif window.logged:  # llama-cpp-python's server: its log says what each completion evaluated
        row.prompt_evaluated = window.logged_evaluated
        if window.logged != len(calls):
            row.note += f"{window.logged} completions logged for {len(calls)} answered; "
    return row


def peak(calls: list[Call]) -> int:
    edges = sorted([(c.start, 1) for c in calls] + [(c.end, -1) for c in calls], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def busy_seconds(calls: list[Call]) -> float:
    """Seconds during which at least one call was in flight (the union of their intervals)."""
    total, end = 0.0, float("-inf")
    for c in sorted(calls, key=lambda c: c.start):
        if c.end > end:
            total += c.end - max(c.start, end)
            end = c.end
    return total


class Phases:
    """Node start and end times from `checkpoints.run_thread`'s ``on_event``, and windows opened on them.

    The sampling window opens when the ``nth`` run of node ``after`` finishes (the step before the
    fan-out) and closes when node ``until`` starts (the step after it); the cycle window opens when
    ``after`` starts its ``nth`` run and is closed by the caller at the end.
    """

    def __init__(self, after: str, nth: int, until: str) -> None:
        self.after, self.nth, self.until = after, nth, until
        self.window, self.cycle = Window(), Window()
        self.started: dict[str, list[float]] = {}
        self.done: dict[str, list[float]] = {}

    def __call__(self, kind: str, payload: Any) -> None:
        if kind == "node":
            self.started.setdefault(str(payload), []).append(time.time())
            if payload == self.after and len(self.started[payload]) == self.nth:
                self.cycle.open()
            if payload == self.until and self.window.start and not self.window.end:
                self.window.close()
        elif kind == "done":
            self.done.setdefault(str(payload[0]), []).append(time.time())
            if payload[0] == self.after and len(self.done[payload[0]]) == self.nth:
                self.window.open()

    def span(self, node: str) -> float:
        """Wall seconds of ``node``'s last run (0 when it did not run)."""
        if not self.done.get(node) or not self.started.get(node):
            return 0.0
        return self.done[node][-1] - self.started[node][-1]


def whole(row: Row, cycle: Window, training: float) -> Row:
    row.total_seconds = cycle.end - cycle.start
    row.sampling_seconds = busy_seconds(cycle.calls())
    row.training_seconds = training
    return row


def _store(folder: Path) -> Any:
    return open_store(folder / "bench.db")


def episodes(model: str, policy: ActStrategy, n: int, turns: int, folder: Path, act_order: str = "sotopia") -> Row:
    """``n`` SOTOPIA episodes (the shipped scenarios in turn) of ``turns`` turns, all at once; no judge.

    ``act_order``: the acting prompt's order (`SWMContext.act_order`).
    """

    graph = episode.build().compile()
    scenarios = shipped()
    ctx = SWMContext(model=model, temperature=0.7, store=_store(folder), act_order=act_order)  # type: ignore[arg-type]
    inputs: list[EpisodeInput] = []
    for i in range(n):
        scenario = scenarios[i % len(scenarios)]
        inputs.append({"scenario": scenario.id, "episode_id": f"bench-engine-{policy}-{i}",
                       "policies": dict.fromkeys(scenario.names, policy), "max_turns": turns, "judge": False})
    label = f"{policy} episodes ({n} x {turns} turns{'' if act_order == 'sotopia' else ', ' + act_order + ' order'})"
    row, window = Row(label, n), Window()
    window.open()
    graph.batch(inputs, {"max_concurrency": n}, context=ctx)
    window.close()
    return fill(row, window)


def lifelong_cycle(model: str, n: int, episodes_per_cycle: int, update: str, train_steps: int,
                   folder: Path, eval_per_cell: int = 1) -> Row:
    """One `swm learn` cycle on decisions (baseline first): its collect phase, and where the cycle's time went.

    ``eval_per_cell``: test and dev tasks of the baseline's and the candidate's evaluations.
    """

    plan = LifelongPlan.model_validate({
        "run_id": "bench-engine", "cycles": 1, "levels": ["decision"], "families": ["mutual_friend"],
        "episodes_per_level": episodes_per_cycle, "samples_per_task": 2, "heldout_per_cell": eval_per_cell,
        "dev_per_cell": eval_per_cell, "update": update, "out_dir": str(folder / "learn"),
        "train": {"max_steps": train_steps, "batch_size": 2, "progress": False}})
    ctx = SWMContext(model=model, temperature=0.7, store=_store(folder))
    ctx.out_dir = plan.out_dir
    phases = Phases("synthesize", 2, "convert")
    config: Any = {"configurable": {"thread_id": "bench-engine"}, "max_concurrency": n, "recursion_limit": 10_000}
    with open_saver(folder / "bench.db") as saver:
        run_thread(lifelong.build().compile(checkpointer=saver), {"plan": plan}, config, ctx, on_event=phases)
    phases.cycle.close()
    size = f"{episodes_per_cycle} decisions" + (f", eval {eval_per_cell}+{eval_per_cell}" if eval_per_cell > 1 else "")
    row = fill(Row(f"lifelong cycle: collect ({size})", n), phases.window)
    whole(row, phases.cycle, phases.span("update"))
    policy = ls.get_policy(ctx.experience_store(), "bench-engine", "p1")
    if policy is not None and policy.train is not None:
        row.train_tokens, row.train_seconds = int(policy.train.tokens), float(policy.train.seconds)
        row.note += f"update {update}"
    elif update != "memory":
        row.train_tokens, row.train_seconds = trainer_rate(episodes_per_cycle, train_steps, folder)
        row.note += (f"update {update}: no collected sample passed, so the cycle trained nothing; train tok/s is "
                     f"the same trainer on {episodes_per_cycle} gold answers to the same prompts")
    return row


def trainer_rate(rows: int, steps: int, folder: Path) -> tuple[int, float]:
    """Train the rs-sft LoRA as a cycle does, on gold answers to ``rows`` decision prompts; (tokens, seconds)."""

    samples = []
    for i in range(rows):
        task = decision_task("mutual_friend", i)
        samples.append(Sample(episode_id=f"gold-{i}", run_id="bench", cycle=1, task_id=task.task_id,
                              family=task.family, level=task.level, sample=0, policy_version="p0",
                              prompt=decision_prompt(task).text, completion=f"ANSWER: {task.truth['friend']}",
                              passed=True, formatted=True))
    stats = train_adapter("sft", training_rows("sft", sample_rows("sft", samples)), None, folder / "gold-adapter",
                          settings=TrainSettings(max_steps=steps, batch_size=2, progress=False))
    return int(stats.tokens), float(stats.seconds)


def selfplay_iteration(n: int | None, tasks: int, group: int, turns: int, new_tokens: int, folder: Path) -> Row:
    """One `swm selfplay` iteration on the served embedded model: its rollouts, and where its time went.

    ``n`` None: as many rollouts at once as `swm selfplay` plays by default (the server's slots).
    """
    from swm.training.ppo import training_samples

    plan = {"run_id": "bench-engine", "iterations": 1, "family": "negotiation", "level": "easy",
            "tasks_per_iteration": tasks, "group_size": group, "max_turns": turns, "eval_tasks": 1,
            "out_dir": str(folder / "selfplay"), "advantage": {"estimator": "group"},
            "policy": {"sampler": "served", "max_new_tokens": new_tokens, "threads": 1}}
    phases = Phases("start", 1, "score")
    out = train(plan, db=folder / "selfplay.db", thread_id="bench-engine", on_event=phases, max_concurrency=n)
    phases.cycle.close()
    in_flight = n or default_concurrency(PolicyConfig.model_validate(plan["policy"]))
    row = fill(Row(f"self-play iteration: rollouts ({tasks * group} x {turns} turns)", in_flight), phases.window)
    whole(row, phases.cycle, phases.span("update"))
    update = (out.get("current") or {}).get("update") or {}

    rollouts = [r for r in sps.load_rollouts(open_store(folder / "selfplay.db"), "bench-engine", 0, "train")
                if not r.failed]
    samples = training_samples(rollouts)
    row.train_tokens = sum(len(s.prompt_ids) + len(s.token_ids) for s in samples)  # one epoch (the default)
    row.train_seconds = float(update.get("seconds") or 0.0) or None
    row.note += "PPO (group estimator)"
    return row


def werewolf(model: str, games: int, players: int, rounds: int, folder: Path) -> Row:
    """``games`` Werewolf games at once (one move at a time within a game), every seat the model."""

    graph = game.build().compile()
    ctx = SWMContext(model=model, temperature=0.7, store=_store(folder))
    # as `swm bench games --policies plain` plays them: the model in every seat
    inputs: list[GameInput] = [{"game": "werewolf", "game_id": f"bench-engine-ww-{i}", "seed": i, "n_players": players,
               "options": {"max_rounds": rounds}, "policies": {"village": "plain", "werewolves": "plain"},
               "tested_side": None} for i in range(games)]
    row, window = Row(f"werewolf ({games} games x {players} seats, {rounds} round)", games), Window()
    window.open()
    graph.batch(inputs, {"max_concurrency": games}, context=ctx)
    window.close()
    return fill(row, window)


def run(names: list[str], model: str, sizes: dict[str, Any], echo: Any = print) -> list[Row]:
    """Run the named workloads one after the other; a failing one is reported in its row, the rest go on."""
    rows = []
    for name in names:
        folder = Path(tempfile.mkdtemp(prefix=f"swm-bench-engine-{name}-"))
        s = sizes[name]
        started = time.perf_counter()
        try:
            if name in ("plain", "foresee"):
                policy: ActStrategy = "plain" if name == "plain" else "foresee"
                for order in s.get("act_orders", ["sotopia"])[:-1]:  # every order but the last: a row each
                    (folder / order).mkdir()
                    rows.append(episodes(model, policy, s["n"], s["turns"], folder / order, order))
                row = episodes(model, policy, s["n"], s["turns"], folder, s.get("act_orders", ["sotopia"])[-1])
            elif name == "lifelong":
                row = lifelong_cycle(model, s["n"], s["episodes"], s["update"], s["train_steps"], folder,
                                     s.get("eval", 1))
            elif name == "selfplay":
                row = selfplay_iteration(s["n"], s["tasks"], s["group"], s["turns"], s["new_tokens"], folder)
            else:
                row = werewolf(model, s["n"], s["players"], s["rounds"], folder)
        except Exception as exc:  # noqa: BLE001 - one workload's failure is a row, not the end of the run
            row = Row(name, int(s.get("n") or 1), error=f"{type(exc).__name__}: {str(exc)[:300]}")
        echo(f"  {name}: {time.perf_counter() - started:.0f} s" + (f" — {row.error}" if row.error else ""))
        rows.append(row)
    return rows
