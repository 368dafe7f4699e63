"""Resume cost: time to resume a long run from its SQLite checkpoint after N finished steps.

A loop graph over a tiny node stands for any long run (an episode's turns, a lifelong loop's
cycles): it is killed after N finished steps (the node raises at step N + 1, as a crash would),
then resumed the way the CLI resumes: ``get_state`` and ``invoke(None)`` for one more step.
The ratio of the resume time at 100 and 1,000 steps to that at 10 should stay near 1 (flat);
a state key that grew with the run would make it grow. A second variant keeps a list in the
state that grows by one item per step, the anti-pattern DESIGN.md warns about, to show what
the measurement catches.
"""

from __future__ import annotations

import operator
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from bench.extra_graphs import SCRIPTS
from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.context import SWMContext
from swm.graphs import episode
from swm.nodes.env import MAX_TURNS_LIMIT
from swm.scenarios import shipped
from swm.testing import FakeOpenAIServer


class LoopState(TypedDict, total=False):
    step: int
    last: str
    history: Annotated[list[str], operator.add]


@dataclass
class LoopContext:
    stop_at: int = 10
    crash_at: int = -1
    grow: bool = False


class Crash(RuntimeError):
    """Raised by the loop node to stand for a killed process."""


def _step(state: LoopState, runtime: Runtime[LoopContext]) -> dict[str, Any]:
    n = state.get("step", 0) + 1
    if n == runtime.context.crash_at:
        raise Crash(f"killed at step {n}")
    update: dict[str, Any] = {"step": n, "last": f"turn {n}: speak: a short line of dialogue"}
    if runtime.context.grow:
        update["history"] = [update["last"]]
    return update


def _route(state: LoopState, runtime: Runtime[LoopContext]) -> str:
    return "step" if state.get("step", 0) < runtime.context.stop_at else END


def build_loop() -> StateGraph[LoopState, LoopContext, LoopState, LoopState]:
    g = StateGraph(LoopState, context_schema=LoopContext)
    g.add_node("step", _step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", _route, ["step", END])
    return g


@dataclass
class ResumeRow:
    variant: str
    steps: int
    resume_ms: float  # get_state + one resumed step
    db_kb: float
    get_state_ms: float = float("nan")
    uninterrupted_ms: float = float("nan")  # the same last step in a run that was never killed


def _crash_at(graph: Any, config: dict[str, Any], step: int, grow: bool) -> None:
    """Run the thread on from ``step`` and kill it as it starts step + 1."""
    try:
        graph.invoke({"step": step}, config, context=LoopContext(stop_at=step + 2, crash_at=step + 1, grow=grow),
                     durability="sync")
    except Crash:
        return
    raise AssertionError("the loop did not crash")


def _timed_resume(graph: Any, config: dict[str, Any], step: int, grow: bool) -> tuple[float, float]:
    start = time.perf_counter()
    snapshot = graph.get_state(config)
    got = time.perf_counter() - start
    graph.invoke(None, config, context=LoopContext(stop_at=step + 1, grow=grow), durability="sync")
    elapsed = time.perf_counter() - start
    assert snapshot.next == ("step",) and graph.get_state(config).values["step"] == step + 1
    return elapsed, got


def measure(sizes: tuple[int, ...] = (10, 100, 1000), repeats: int = 15) -> list[ResumeRow]:
    """Build each run to N finished steps, kill it, and time the resume (best of ``repeats``)."""

    rows: list[ResumeRow] = []
    with tempfile.TemporaryDirectory(prefix="swm-resume-") as tmp:
        for grow in (False, True):
            variant = "loop, list grows in state" if grow else "loop, ids only in state"
            for n in sizes:
                db = Path(tmp) / f"{int(grow)}-{n}.db"
                with sqlite_saver(db) as saver:
                    graph: Any = build_loop().compile(checkpointer=saver)
                    config = {"configurable": {"thread_id": f"run-{n}"}, "recursion_limit": 2 * n + 100}
                    try:
                        graph.invoke({"step": 0}, config, context=LoopContext(stop_at=n + 2, crash_at=n + 1,
                                                                              grow=grow))
                    except Crash:
                        pass
                    best = _timed_resume(graph, config, n, grow)
                    for r in range(1, repeats):
                        _crash_at(graph, config, n + r, grow)
                        best = min(best, _timed_resume(graph, config, n + r, grow))
                size = sum(p.stat().st_size for p in Path(tmp).glob(f"{db.name}*"))  # the file and its WAL
                rows.append(ResumeRow(variant, n, best[0] * 1000, size / 1024, best[1] * 1000))
    return rows


def format_rows(rows: list[ResumeRow]) -> list[str]:
    lines = ["Resume cost after N finished steps: get_state + one resumed step, and get_state alone "
             "(target: flat, ratio to the smallest N ~ 1);",
             "  episode: 'resumed/whole' = the resumed last turn / the same last turn in a run never killed",
             f"  {'variant':<28} {'N':>6} {'resume vs first':>16} {'get_state vs first':>19} {'resumed/whole':>14} "
             f"{'db KB':>9}"]
    base: dict[str, ResumeRow] = {}
    for r in rows:
        first = base.setdefault(r.variant, r)
        known = r.uninterrupted_ms == r.uninterrupted_ms  # not NaN
        whole = f"{r.resume_ms / r.uninterrupted_ms:>13.2f}x" if known else f"{'':>14}"
        lines.append(f"  {r.variant:<28} {r.steps:>6} {r.resume_ms / first.resume_ms:>15.2f}x "
                     f"{r.get_state_ms / first.get_state_ms:>18.2f}x {whole} {r.db_kb:>9.0f}"
                     f"   ({r.resume_ms:.1f} ms, get_state {r.get_state_ms:.1f} ms)")
    return lines


def _last_turn_uninterrupted(graph: Any, inp: dict[str, Any], config: Any, ctx: Any, n: int) -> float:
    """Run a whole episode of n + 1 turns and return the seconds from the n-th commit to the end."""
    commits, mark = 0, 0.0
    for chunk in graph.stream(inp, config, context=ctx, durability="sync", stream_mode="updates"):
        if "commit" in chunk:
            commits += 1
            if commits == n:
                mark = time.perf_counter()
    return time.perf_counter() - mark


def measure_episode(sizes: tuple[int, ...] = (10, 100), repeats: int = 3) -> list[ResumeRow]:
    """Kill a plain-policy episode after N finished turns and time the resume of one more turn.

    The fake model answers at once; the kill is an HTTP 400 on the (N+1)-th call. The episode
    graph allows at most 100 turns, so larger N are capped there.
    """

    scenario = shipped()[0]
    rows: list[ResumeRow] = []
    with tempfile.TemporaryDirectory(prefix="swm-resume-ep-") as tmp, \
            FakeOpenAIServer(latency=0.0, scripts=SCRIPTS) as server:
        for n in sorted({min(s, MAX_TURNS_LIMIT - 1) for s in sizes}):
            db = Path(tmp) / f"episode-{n}.db"
            best = best_get = uninterrupted = float("inf")
            with sqlite_saver(db) as saver:
                ctx = SWMContext(model=server.model_spec)
                ctx.store = ExperienceStore(db)
                graph: Any = episode.build().compile(checkpointer=saver)
                for r in range(repeats):
                    config: Any = {"configurable": {"thread_id": f"ep-{n}-{r}"}, "recursion_limit": 10 * n + 100}
                    inp = {"scenario": scenario.model_dump(mode="json"), "episode_id": f"bench-resume-{n}-{r}",
                           "policies": {a: "plain" for a in scenario.names}, "max_turns": n + 1, "judge": False}
                    server.reset()
                    server.configure(fail_at=n)
                    try:
                        graph.invoke(inp, config, context=ctx, durability="sync")
                    except Exception:  # noqa: BLE001 - the stand-in crash
                        pass
                    server.configure(fail_at=-1)
                    start = time.perf_counter()
                    snapshot = graph.get_state(config)
                    got = time.perf_counter() - start
                    out = graph.invoke(None, config, context=ctx, durability="sync")
                    if time.perf_counter() - start < best:
                        best, best_get = time.perf_counter() - start, got
                    assert snapshot.next and out.get("turn") == n + 1, (snapshot.next, out.get("turn"))
                    same = _last_turn_uninterrupted(graph, {**inp, "episode_id": f"bench-whole-{n}-{r}"},
                                                    {**config, "configurable": {"thread_id": f"whole-{n}-{r}"}},
                                                    ctx, n)
                    uninterrupted = min(uninterrupted, same)
                ctx.store.close()
            size = sum(p.stat().st_size for p in Path(tmp).glob(f"{db.name}*"))
            rows.append(ResumeRow("episode graph (plain)", n, best * 1000, size / 1024, best_get * 1000,
                                  uninterrupted * 1000))
    return rows
