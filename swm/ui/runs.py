"""The runs a store holds: one per checkpoint thread, with its kind, models, status and cost.

A run's kind, graph, command and options come from the ``swm_runs`` row the command wrote when it
started, whatever its thread id; a run no command recorded (one made before that table, or over
the server) is recognised by the domain tables that name its thread (``episodes``, ``games``,
``tom_results``, ``lifelong_policies``, ``selfplay_runs``, ``swm_asks``), and only then by the
start of its id (``ask-…``, ``play-…``). Dates come from the
checkpoint ids, which are time-ordered UUIDv6 strings, so a date filter is a string comparison
the database can answer from its index, and a page of runs never reads the whole store.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable
from typing import Any

from swm.ui.store import PAGE, ReadOnlyStore, decode
from swm.ui.summaries import games as games_summary
from swm.ui.summaries import like_prefix
from swm.ui.summaries import sotopia as sotopia_summary

KINDS = ("ask", "parse", "play", "sotopia", "tom", "games", "learn", "selfplay")
_GREGORIAN = dt.datetime(1582, 10, 15, tzinfo=dt.UTC)


def uuid6_time(checkpoint_id: str) -> dt.datetime | None:
    """Return the time inside a UUIDv6 checkpoint id (None for another kind of id)."""
    try:
        u = uuid.UUID(checkpoint_id)
    except ValueError:
        return None
    if (u.int >> 76) & 0xF != 6:
        return None
    h = u.int >> 64
    ticks = ((h >> 32) << 28) | (((h >> 16) & 0xFFFF) << 12) | (h & 0x0FFF)
    return _GREGORIAN + dt.timedelta(microseconds=ticks // 10)


def uuid6_floor(when: dt.datetime) -> str:
    """Return the smallest UUIDv6 string of an instant: ids compare as strings in time order."""
    ticks = int((when.astimezone(dt.UTC) - _GREGORIAN).total_seconds() * 10_000_000)
    high, mid, low = ticks >> 28, (ticks >> 12) & 0xFFFF, ticks & 0x0FFF
    return f"{high:08x}-{mid:04x}-6{low:03x}-8000-000000000000"


RUNS = "swm_runs"
# tables that name a thread of a kind: (table, column, kind)
DOMAIN = (("swm_asks", "thread_id", "ask"), ("episodes", "episode_id", "play"), ("games", "game_id", "games"),
          ("tom_results", "run", "tom"), ("lifelong_policies", "run_id", "learn"),
          ("selfplay_runs", "run_id", "selfplay"), ("selfplay_iterations", "run_id", "selfplay"))


def prefix_kind(thread_id: str) -> str:
    """Return the kind the start of a thread id names (``other`` when none)."""
    head = thread_id.split("-", 1)[0]
    return head if head in KINDS else "other"


def recorded(store: ReadOnlyStore, thread_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Return the ``swm_runs`` rows of these threads (kind, graph, command, options and config decoded, the line that
    reruns it, started)."""
    if not thread_ids or not store.has(RUNS):
        return {}
    marks = ", ".join("?" for _ in thread_ids)
    return {r["thread_id"]: r for r in store.select(RUNS, f"thread_id in ({marks})", thread_ids,
                                                    json_columns=["options", "config"])}


def kinds_of(store: ReadOnlyStore, thread_ids: list[str]) -> dict[str, str]:
    """Return each thread's kind: as recorded, else from the domain tables naming it, else from its id."""
    kinds = {t: r["kind"] for t, r in recorded(store, thread_ids).items()}
    rest = [t for t in thread_ids if t not in kinds]
    for table, column, kind in DOMAIN:
        if not rest or not store.has(table):
            continue
        marks = ", ".join("?" for _ in rest)
        for row in store.rows(f'select distinct "{column}" as t from "{table}" where "{column}" in ({marks})', rest):
            kinds.setdefault(row["t"], "sotopia" if kind == "play" and prefix_kind(row["t"]) == "sotopia" else kind)
        rest = [t for t in rest if t not in kinds]
    return {t: kinds.get(t) or prefix_kind(t) for t in thread_ids}


def kind_of(store: ReadOnlyStore, thread_id: str) -> str:
    """Return one thread's kind (see `kinds_of`)."""
    return kinds_of(store, [thread_id])[thread_id]


def kind_filter(store: ReadOnlyStore, kind: str, key: str) -> tuple[str, list[Any]]:
    """Return a SQL condition on a thread id expression ``key`` that holds for the runs of ``kind``."""
    guessed, params = [f"{key} like ?"], list[Any]([f"{kind}-%"])
    for table, column, k in DOMAIN:
        if k == kind and store.has(table):
            guessed.append(f'{key} in (select "{column}" from "{table}")')
    if not store.has(RUNS):
        return "(" + " or ".join(guessed) + ")", params
    return (f"({key} in (select thread_id from {RUNS} where kind = ?) or ({key} not in (select thread_id from {RUNS})"
            f" and ({' or '.join(guessed)})))", [kind, *params])


def _usage_total(usages: Iterable[object]) -> dict[str, float]:
    total = {"calls": 0.0, "prompt_tokens": 0.0, "completion_tokens": 0.0, "seconds": 0.0}
    for usage in usages:
        for stats in (decode(usage) or {}).values():
            if isinstance(stats, dict):
                for key in total:
                    total[key] += float(stats.get(key) or 0)
    return total


def _sums(store: ReadOnlyStore, table: str, where: str, params: list[Any]) -> dict[str, float]:
    if not store.has(table):
        return {}
    (row,) = store.rows(f"select count(*) as n, sum(calls) as calls, sum(prompt_tokens) as prompt_tokens, "
                        f"sum(completion_tokens) as completion_tokens, sum(model_seconds) as seconds from {table} "
                        f"where {where}", params)
    return {k: float(v or 0) for k, v in row.items() if k != "n"} if row["n"] else {}


def summarise(store: ReadOnlyStore, thread_id: str, kind: str) -> dict[str, Any]:
    """Return what a run did: status, models, protocol, cost and failures, from the domain tables."""
    out: dict[str, Any] = {"status": "", "models": "", "protocol": "", "failed": 0, "cost": {}, "items": 0}
    if kind == "play" or kind == "sotopia":
        where, params = "episode_id = ?", [thread_id]
        first = store.select("episodes", limit=1)
        if first and "bench_run" in first[0]:  # a bench run's episodes are threads of their own, named by it
            where, params = "episode_id = ? or bench_run = ?", [thread_id, thread_id]
        eps = store.select("episodes", where, params, json_columns=["models"])
        out["items"] = len(eps)
        out["cost"] = _usage_total(e.get("usage") for e in eps)
        out["models"] = ", ".join(sorted({m for e in eps for m in (e.get("models") or {}).values()}))
        done = sum(e.get("status") == "done" for e in eps)
        out["failed"] = sum(e.get("status") == "failed" for e in eps)
        out["status"] = "finished" if eps and done == len(eps) else f"{done} of {len(eps)} finished"
        out["protocol"] = ", ".join(sorted({str(e.get("judge_protocol")) for e in eps if e.get("judge_protocol")}))
    elif kind == "learn":
        eps = store.select("lifelong_episodes", "run_id = ?", [thread_id])
        out["items"] = len(eps)
        out["cost"] = _usage_total(e.get("usage") for e in eps)
        out["failed"] = sum(bool(e.get("error")) for e in eps) + len(store.select("lifelong_failures", "run_id = ?",
                                                                                  [thread_id]))
        out["models"] = ", ".join(sorted({m for e in eps for m in (decode(e.get("models")) or {}).values()}))
        cycles = store.select("lifelong_policies", "run_id = ?", [thread_id])
        out["status"] = f"{len(cycles) - 1} cycle(s)" if cycles else "started"
    elif kind == "games":
        games = store.select("games", "game_id = ? or game_id like ? escape '\\'", [thread_id, like_prefix(thread_id)],
                             json_columns=["models"])
        out["items"] = len(games)
        out["cost"] = _usage_total(g.get("usage") for g in games)
        out["models"] = ", ".join(sorted({m for g in games for m in (g.get("models") or {}).values()}))
        finished = sum(g.get("status") == "done" for g in games)
        out["failed"] = sum(g.get("status") == "failed" for g in games)
        out["status"] = f"{finished} of {len(games)} finished"
    elif kind == "tom":
        rows = store.select("tom_results", "run = ?", [thread_id])
        out["items"] = len(rows)
        out["failed"] = sum(bool(r.get("error")) for r in rows)
        out["models"] = ", ".join(sorted({m for r in rows for m in (decode(r.get("models")) or {}).values()}))
        out["cost"] = _sums(store, "tom_results", "run = ?", [thread_id])
        out["protocol"] = ", ".join(sorted({str(r["rule"]) for r in rows if r.get("rule")}))
        out["status"] = f"{len(rows) - out['failed']} answered"
    elif kind == "selfplay":
        its = store.select("selfplay_iterations", "run_id = ?", [thread_id])
        out["items"] = len(its)
        out["status"] = f"{len(its)} iteration(s)"
    elif kind == "ask":
        asks = store.select("swm_asks", "thread_id = ?", [thread_id], json_columns=["models", "usage"])
        out["items"] = len(asks)
        if asks:
            ask = asks[0]
            out["status"] = "answered" if ask.get("answer") else "not answered"
            out["failed"] = int(not ask.get("answer"))
            out["models"] = ", ".join(sorted({str(m) for m in (ask.get("models") or {}).values()}))
            usage = ask.get("usage") or {}
            out["cost"] = {k: float(usage.get(k) or 0) for k in ("calls", "prompt_tokens", "completion_tokens",
                                                                  "seconds")} if usage else {}
            out["protocol"] = f"mode {ask.get('mode')}, social state {ask.get('social_state')}"
    return out


def bench_score(store: ReadOnlyStore, run: str, kind: str) -> str:
    """Return a benchmark run's headline in one line: each policy's mean goal (SOTOPIA), each setting's win rates
    (games)."""
    if kind == "sotopia":
        return "; ".join(f"{p['policy']}: goal {p['goal']['mean']:.2f} (n={p['goal']['n']})"
                         for p in sotopia_summary(store, run)["policies"] if p.get("goal", {}).get("mean") is not None)
    if kind == "games":
        return "; ".join(f"{s['setting']}: " + ", ".join(f"{k} {v['rate']:.2f}" for k, v in s.items()
                                                        if k.endswith(" wins") and v.get("rate") is not None)
                         for s in games_summary(store, run)["settings"])
    return ""


def list_runs(store: ReadOnlyStore, *, kind: str = "", since: str = "", until: str = "",
              page: int = 0) -> tuple[list[dict[str, Any]], bool]:
    """Return one page of runs, newest first, filtered by kind and date (``YYYY-MM-DD``, UTC), and if more follow."""
    if not store.has("checkpoints"):
        return [], False
    where, params = ["checkpoint_ns = ?"], [""]
    # threads of one run (bench tom's ``<run>/<mode>/<item>``) are listed as their run; a run recorded under its
    # whole id (``team/run-1``, a learn run) is listed as itself
    first = ("split_part(thread_id, '/', 1)" if store.postgres else "case when instr(thread_id, '/') > 0 "
             "then substr(thread_id, 1, instr(thread_id, '/') - 1) else thread_id end")
    key = (f"case when thread_id in (select thread_id from {RUNS}) then thread_id else {first} end"
           if store.has(RUNS) else first)
    having, hparams = [], list[Any]()
    if kind and kind in KINDS:
        condition, more = kind_filter(store, kind, key)
        having.append(condition)
        hparams.extend(more)
    if since:
        having.append("max(checkpoint_id) >= ?")
        hparams.append(uuid6_floor(dt.datetime.fromisoformat(since).replace(tzinfo=dt.UTC)))
    if until:
        having.append("min(checkpoint_id) < ?")
        hparams.append(uuid6_floor(dt.datetime.fromisoformat(until).replace(tzinfo=dt.UTC) + dt.timedelta(days=1)))
    sql = (f"select {key} as thread_id, count(distinct thread_id) as threads, count(*) as checkpoints, "
           f"min(checkpoint_id) as first, max(checkpoint_id) as last from checkpoints where {' and '.join(where)} "
           f"group by {key}" + (f" having {' and '.join(having)}" if having else "")
           + f" order by last desc limit {PAGE + 1} offset {int(page) * PAGE}")
    runs = []
    found = store.rows(sql, params + hparams)
    ids = [r["thread_id"] for r in found[:PAGE]]
    kinds, records, folded = kinds_of(store, ids), recorded(store, ids), bench_members(store, ids)
    for row in found[:PAGE]:
        if row["thread_id"] in folded:  # listed once, as its benchmark run (`bench_runs`)
            continue
        k = kinds[row["thread_id"]]
        started, updated = uuid6_time(row["first"]), uuid6_time(row["last"])
        runs.append({"thread_id": row["thread_id"], "kind": k, "checkpoints": row["checkpoints"],
                     "threads": row["threads"], "graph": (records.get(row["thread_id"]) or {}).get("graph", ""),
                     "started": started.strftime("%Y-%m-%d %H:%M:%S") if started else "",
                     "updated": updated.strftime("%Y-%m-%d %H:%M:%S") if updated else "",
                     **summarise(store, row["thread_id"], k)})
    return runs, len(found) > PAGE


def bench_members(store: ReadOnlyStore, thread_ids: list[str]) -> set[str]:
    """Return which of these threads are items of a recorded benchmark run (an episode of ``bench sotopia``, a
    game of ``bench games``): the runs page lists each such run once, not each of its threads."""
    if not thread_ids or not store.has(RUNS):
        return set()
    marks = ", ".join("?" for _ in thread_ids)
    first = store.select("episodes", limit=1)
    found = {r["episode_id"] for r in store.select("episodes", f"episode_id in ({marks}) and bench_run is not null "
                                                               "and bench_run != episode_id", thread_ids)} \
        if first and "bench_run" in first[0] else set()
    games = [r["thread_id"] for r in store.select(RUNS, "kind = 'games'")]
    return found | {t for t in thread_ids if any(t.startswith(run + "-") and t != run for run in games)}


def bench_runs(store: ReadOnlyStore, kind: str = "") -> list[dict[str, Any]]:
    """Return the recorded benchmark runs whose items are threads of their own (``bench sotopia``, ``bench games``),
    newest first: the run id names no thread, so the thread list alone would show only its items.
    """
    if not store.has(RUNS):
        return []
    kinds = [k for k in ("sotopia", "games") if not kind or kind == k or (kind == "play" and k == "sotopia")]
    if not kinds:
        return []
    marks = ", ".join("?" for _ in kinds)
    rows = store.select(RUNS, f"kind in ({marks})", kinds, order="started desc", limit=PAGE, json_columns=["options"])
    return [{**row, **summarise(store, row["thread_id"], row["kind"]), "score": bench_score(store, row["thread_id"],
                                                                                          row["kind"])}
            for row in rows]
