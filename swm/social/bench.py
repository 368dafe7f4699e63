"""The SOTOPIA benchmark runner: many episodes, several policies, both seats, resumable, then one table.

Each (policy, scenario, seat) is one episode on its own checkpoint thread
``<run id>-<policy>-<scenario id>-seat<k>``: as in SOTOPIA's evaluation, every scenario is played
once with each side as the tested agent (the other side is the partner). On a rerun with the same
run id, episodes whose store row says ``done`` are skipped, and unfinished ones resume from their
last checkpoint, so a killed benchmark loses at most the node in flight of each running episode.
Episodes run on a thread pool (``concurrency``) through the ``play`` function the caller passes in
(the CLI runs the episode graph on its own SQLite connection per episode), so this package never
imports the wiring. An episode whose model call still fails after the client's retries
(`ModelCallFailed`) is marked ``failed`` with its error and the others go on; a rerun resumes it at
the node that failed. ``ctx.failures`` stops the benchmark when episodes keep failing.

The table has one row per policy over every episode, then per tested side (``seat 1``, ``seat
2``) and per setting (`setting_of`: cooperative, competitive, mixed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from swm.checkpoints.environment import BatchRun, item_failure
from swm.checkpoints.store import StoreRecords
from swm.context import SWMContext
from swm.errors import ModelCallFailed
from swm.social.judgement import DIMENSIONS
from swm.social.models import Scenario
from swm.social.scenario_store import put_scenario
from swm.social.store import get_episode, load_turns, write_episode
from swm.stats import format_ci, mean_ci


def spread(scenarios: list[Scenario], n: int | None) -> list[Scenario]:
    """Take ``n`` scenarios spread over environments: every env's first pairing, then the second, ..."""
    groups: dict[str, list[Scenario]] = {}
    for s in scenarios:
        groups.setdefault(str(s.meta.get("env_id") or s.codename or s.id), []).append(s)
    ordered: list[Scenario] = []
    depth = max((len(g) for g in groups.values()), default=0)
    for i in range(depth):
        ordered += [g[i] for g in groups.values() if i < len(g)]
    return ordered[:n] if n is not None else ordered


def episode_id_for(run_id: str, policy: str, scenario: Scenario, seat: int = 0) -> str:
    return f"{run_id}-{policy}-{scenario.id}-seat{seat + 1}"


# SOTOPIA's metadata has no cooperative/competitive field; the source dataset says it: a shared
# goal (mutual friends) is cooperative, a negotiation over price or items is competitive, and the
# social-norm sources (goals in tension, relationship at stake, not zero-sum) are mixed.
COOPERATIVE_SOURCES = ("mutual_friends",)
COMPETITIVE_SOURCES = ("craigslist_bargains", "deal-or-no-deal")


def setting_of(scenario: Scenario) -> str:
    """Return ``cooperative``, ``competitive`` or ``mixed``: ``meta["setting"]`` if given, else by source."""
    explicit = str(scenario.meta.get("setting") or "").strip().lower()
    if explicit in ("cooperative", "competitive", "mixed"):
        return explicit
    source = str(scenario.source or scenario.meta.get("source") or "").lower()
    if source in COOPERATIVE_SOURCES:
        return "cooperative"
    return "competitive" if source in COMPETITIVE_SOURCES else "mixed"


PlayEpisode = Callable[[str, dict[str, Any]], Any]
"""Run (or resume) one episode: ``play(episode_id, episode graph input)``."""
EpisodeJob = tuple[str, Scenario, int, str]  # policy, scenario, tested seat (0-based), episode id


class EpisodesRun(BatchRun):
    """`run_bench`'s result: the batch's counts, and every episode's id (done before or now, or failed)."""

    episodes: list[str]


def run_bench(scenarios: list[Scenario], policies: list[str], ctx: SWMContext, play: PlayEpisode, run_id: str, *,
              partner_policy: str = "plain", max_turns: int = 20, concurrency: int = 1,
              seats: tuple[int, ...] = (0, 1), on_done: Callable[[], None] | None = None,
              judge_protocol: str = "sotopia",
              planned: tuple[list[str], list[EpisodeJob]] | None = None) -> EpisodesRun:
    """Run every (policy, scenario, seat) episode not yet done; return {"episodes", "ran", "skipped", "failed", "wall"}.

    ``seats`` are the tested sides (0-based); a scenario with fewer seats skips the missing ones.
    ``planned``: what `bench_episodes` returned for these, when the caller looked already (its done episodes
    already counted by ``on_done``); looked up here when None.
    """
    store = ctx.experience_store()
    self_judged = ctx.judge_is_agent()
    ids, jobs = planned if planned is not None else bench_episodes(store, run_id, policies, scenarios, seats, on_done)
    skipped = len(ids) - len(jobs)
    failed: dict[str, str] = {}
    lock = threading.Lock()
    start = time.perf_counter()

    def one(policy: str, scenario: Scenario, seat: int, eid: str) -> None:
        tested = scenario.names[seat]
        inputs = {"scenario": put_scenario(store, scenario), "episode_id": eid, "tested_agent": tested,
                  "policies": {n: (policy if n == tested else partner_policy) for n in scenario.names},
                  "max_turns": max_turns, "judge": True, "judge_protocol": judge_protocol}
        began = time.perf_counter()
        try:
            play(eid, inputs)
        except ModelCallFailed as exc:
            row = get_episode(store, eid) or {"episode_id": eid}
            spent = time.perf_counter() - began + float(row.get("wall_seconds") or 0)
            write_episode(store, {**row, "bench_run": run_id, "policy": policy, "seat": seat + 1,
                                  "setting": setting_of(scenario), "self_judged": int(self_judged),
                                  "status": "failed", "error": exc.one_line(), "wall_seconds": round(spent, 3)})
            ctx.failures.failure(exc.one_line())
            raise
        ctx.failures.success()
        row = get_episode(store, eid) or {"episode_id": eid}  # the same keys as the failure path's row
        spent = time.perf_counter() - began + float(row.get("wall_seconds") or 0)  # earlier attempts count too
        write_episode(store, {**row, "bench_run": run_id, "policy": policy, "seat": seat + 1,
                              "setting": setting_of(scenario), "self_judged": int(self_judged),
                              "wall_seconds": round(spent, 3), "error": None})

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = {pool.submit(one, p, s, k, e): e for p, s, k, e in jobs}
        for future in as_completed(futures):
            try:
                future.result()
            except Exception as exc:  # noqa: BLE001 - one broken episode must not lose the others
                reason = item_failure(exc)
                with lock:
                    failed[futures[future]] = reason
            if on_done:
                on_done()
    return EpisodesRun(episodes=ids, ran=len(jobs) - len(failed), skipped=skipped, failed=failed,
                       wall=time.perf_counter() - start)


def bench_episodes(store: StoreRecords, run_id: str, policies: list[str], scenarios: list[Scenario],
                   seats: tuple[int, ...], on_done: Callable[[], None] | None = None
                   ) -> tuple[list[str], list[EpisodeJob]]:
    """Every (policy, scenario, seat) episode's id, and those not yet done to play (``on_done`` called per done one):
    what `run_bench` plays."""
    jobs: list[EpisodeJob] = []
    ids: list[str] = []
    for policy in policies:
        for scenario in scenarios:
            for seat in seats:
                if seat >= len(scenario.names):
                    continue
                eid = episode_id_for(run_id, policy, scenario, seat)
                ids.append(eid)
                row = get_episode(store, eid)
                if row is not None and row.get("status") == "done":
                    if on_done:
                        on_done()
                    continue
                jobs.append((policy, scenario, seat, eid))
    return ids, jobs


def summarise(store: StoreRecords, episode_ids: Iterable[str], policies: list[str]) -> list[dict[str, Any]]:
    """Rows per policy: over ``all`` episodes, then per tested side and per setting (``group``).

    Each row: each dimension's mean ± 95% CI for the tested agent over its scored episodes, cost per
    turn, throughput; ``unscored`` counts the episodes whose judge gave the tested agent no overall
    score (sotopia's protocol leaves an episode unscored when its reply fails twice), and
    ``judge_protocols`` names the protocol(s) that scored them (episodes from before the protocol
    was recorded count as ``swm``).
    ``calls_per_turn`` and ``tokens_per_turn`` count every turn of the episodes (both seats, judge
    excluded); ``agent_calls_per_turn`` only the tested seat's turns (1 plain, 3 foresee).
    ``episodes_per_hour`` is 3600 · episodes / their summed wall time (one stream).
    """
    by_policy: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    for eid in episode_ids:
        row = get_episode(store, eid)
        if row is None or row.get("status") != "done":
            continue
        by_policy.setdefault(str(row.get("policy") or (row.get("policies") or {}).get(row.get("tested_agent"))),
                             []).append(row)
    table = []
    for policy in policies:
        rows = by_policy.get(policy, [])
        groups: dict[str, list[dict[str, Any]]] = {"all": rows}
        for key, label in (("seat", "seat {}"), ("setting", "{}")):
            for value in sorted({str(r.get(key)) for r in rows if r.get(key) is not None}):
                groups[label.format(value)] = [r for r in rows if str(r.get(key)) == value]
        table += [_summarise_rows(store, policy, group, members) for group, members in groups.items()]
    return table


def _summarise_rows(store: StoreRecords, policy: str, group: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row: the tested agent's scores and the cost of these episodes."""
    scores = [(r.get("judgements") or {}).get(r.get("tested_agent")) or {} for r in rows]
    out: dict[str, Any] = {"policy": policy, "group": group, "n": len(rows)}
    for name in [*DIMENSIONS, "overall"]:
        mean, half, n = mean_ci(s.get(name) for s in scores)
        out[name] = {"mean": mean, "ci95": half, "n": n}
    turns = calls = tokens = fallbacks = own_turns = own_calls = 0
    for r in rows:
        for t in load_turns(store, r["episode_id"]):
            turns += 1
            calls += t.calls
            tokens += t.prompt_tokens + t.completion_tokens
            fallbacks += bool(t.fallback)
            if t.agent == r.get("tested_agent"):
                own_turns += 1
                own_calls += t.calls
    wall = sum(float(r.get("wall_seconds") or 0) for r in rows)
    judge_calls = sum(int(((r.get("usage") or {}).get("judge") or {}).get("calls", 0)) for r in rows)
    out.update(turns=turns, calls_per_turn=calls / turns if turns else None,
               agent_calls_per_turn=own_calls / own_turns if own_turns else None,
               tokens_per_turn=tokens / turns if turns else None, fallbacks=fallbacks,
               judge_calls_per_episode=judge_calls / len(rows) if rows else None,
               episodes_per_hour=3600 * len(rows) / wall if wall else None,
               rejected_scores=sum(len(s.get("rejected") or []) for s in scores),
               unscored=sum(1 for s in scores if s.get("overall") is None),
               judge_protocols=",".join(sorted({str(r.get("judge_protocol") or "swm") for r in rows})),
               repaired_scores=sum(len(s.get("repairs") or []) for s in scores))
    return out


SHORT = {"financial_and_material_benefits": "financial", "social_rules": "social rules",
         "believability": "believab."}


def markdown(table: list[dict[str, Any]]) -> str:
    """Render the summary as a Markdown table."""
    dims = ["goal", *[d for d in DIMENSIONS if d != "goal"], "overall"]
    head = ["policy", "episodes", "n", *[SHORT.get(d, d) for d in dims], "calls/turn", "agent calls/turn",
            "tokens/turn", "episodes/hour", "fallbacks", "repaired/rejected scores", "unscored", "judge protocol"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table:
        cells = [row["policy"], row.get("group", "all"), str(row["n"])]
        cells += [format_ci(row[d]["mean"], row[d]["ci95"]) for d in dims]
        cells += [f"{row['calls_per_turn']:.2f}" if row["calls_per_turn"] is not None else "n/a",
                  f"{row['agent_calls_per_turn']:.2f}" if row["agent_calls_per_turn"] is not None else "n/a",
                  f"{row['tokens_per_turn']:.0f}" if row["tokens_per_turn"] is not None else "n/a",
                  f"{row['episodes_per_hour']:.1f}" if row["episodes_per_hour"] is not None else "n/a",
                  str(row["fallbacks"]), f"{row['repaired_scores']}/{row['rejected_scores']}",
                  str(row.get("unscored", 0)), row.get("judge_protocols") or "n/a"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
