"""A run's summary as the browser shows it: ToM accuracy, SOTOPIA scores, game win rates, an ask's answer.

Each is a pure function of a `ReadOnlyStore` and a run id returning plain rows (the page's tables
and their CSV), with 95% intervals: Wilson's for a proportion (accuracy, win rate, legal-move
rate), Student's t for a mean (a judge dimension), both from `swm.stats`, the same functions the
commands' reports use. `compare` sets two runs' summaries side by side with a test per difference, from
`swm.stats` too: two ToM runs (or modes) that answered the same questions are compared paired (exact
McNemar), different questions unpaired (the z-test) with a note saying so, each difference with its 95%
Newcombe interval (paired or not as the test) and each p beside its Holm adjustment over the page's tests
(`with_holm`: a page of 16 p-values finds one under 0.05 by chance more often than not); a SOTOPIA run's
policies, and two SOTOPIA runs, paired by scenario and seat where they played the same ones (t on the
differences), else Welch's interval, named.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from swm.games.metrics import summarise_games
from swm.games.store import load_record
from swm.stats import (
    compare_outcomes,
    holm,
    mean_ci,
    paired_interval,
    rate_difference,
    two_proportion_test,
    welch_interval,
    wilson_interval,
)
from swm.ui.store import ReadOnlyStore, RecordsView, decode
from swm.ui.views import DIMENSIONS

ALL = "all"


def like_prefix(prefix: str) -> str:
    """Return a LIKE pattern matching ids that start with ``prefix-`` (its own % and _ escaped)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "-%"


def rate(successes: int, n: int) -> dict[str, Any]:
    """Return a proportion with its 95% Wilson interval: ``{"rate", "low", "high", "successes", "n"}``."""
    low, high = wilson_interval(successes, n)
    return {"rate": successes / n if n else None, "low": low, "high": high, "successes": successes, "n": n}


def mean(values: Iterable[object]) -> dict[str, Any]:
    """Return a mean with its 95% t interval: ``{"mean", "low", "high", "n"}`` (None when no value).

    One value has no spread to estimate (`mean_ci` gives no half-width): its bounds are None, which the pages
    show as no interval, never as the zero-width ``[m, m]``.
    """
    m, half, n = mean_ci([float(v) for v in values if isinstance(v, int | float)])
    if m is None or half is None:
        return {"mean": m, "low": None, "high": None, "n": n}
    return {"mean": m, "low": m - half, "high": m + half, "n": n}


# ---- theory of mind --------------------------------------------------------------------------
def tom(store: ReadOnlyStore, run: str) -> dict[str, Any]:
    """Return a ToM run: its settings (benchmark, data, split, scorer, protocol) and accuracy by
    benchmark × question type × mode with Wilson intervals, failed items left out and counted.
    """
    meta = (store.select("tom_runs", "run = ?", [run]) or [{}])[0]
    rows = store.select("tom_results", "run = ?", [run], order="key")
    modes = list(dict.fromkeys(str(m) for m in (meta.get("modes") or "").split(",") if m)) or sorted(
        {str(r["mode"]) for r in rows})
    counts: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    outcomes: dict[tuple[str, str, str], dict[str, bool]] = defaultdict(dict)
    for r in rows:
        failed = r.get("status") == "failed"
        for qtype in (ALL, str(r.get("qtype") or "")):
            key = (str(r.get("benchmark") or ""), qtype, str(r["mode"]))
            cell = counts[key]
            cell[2 if failed else 0] += 1
            cell[1] += 0 if failed else int(r.get("correct") or 0)
            if not failed:
                outcomes[key][str(r.get("item_id") or r["key"])] = bool(int(r.get("correct") or 0))
    cells = [{"benchmark": b, "qtype": q, "mode": m, **rate(c[1], c[0]), "failed": c[2]}
             for (b, q, m), c in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] != ALL, kv[0][1],
                                                                          kv[0][2]))]
    groups = list(dict.fromkeys((c["benchmark"], c["qtype"]) for c in cells))
    by = {(c["benchmark"], c["qtype"], c["mode"]): c for c in cells}
    table = [{"benchmark": b, "qtype": q, **{m: by.get((b, q, m)) for m in modes}} for b, q in groups]
    differences = []
    for i, first in enumerate(modes):
        for second in modes[i + 1:]:
            for b, q in groups:
                one, two = by.get((b, q, first)), by.get((b, q, second))
                if one and two and one["n"] and two["n"]:
                    differences.append(difference(f"{second} − {first}", b, q, one, two, outcomes[(b, q, first)],
                                                  outcomes[(b, q, second)]))
    differences = with_holm(differences)
    settings = {k: meta.get(k) for k in ("benchmark", "data", "paper_split", "scorer", "prompt_protocol", "modes",
                                         "n", "seed", "samples", "fantom_context") if meta.get(k) not in (None, "")}
    return {"settings": settings, "modes": modes, "cells": cells, "table": table, "differences": differences,
            "answers": len(rows), "outcomes": dict(outcomes)}


def difference(label: str, benchmark: str, qtype: str, one: dict[str, Any], two: dict[str, Any],
               first_items: dict[str, bool] | None = None,
               second_items: dict[str, bool] | None = None) -> dict[str, Any]:
    """Return two rates' difference (second − first) with its 95% interval (``low``, ``high``) and its test:
    given each side's outcome per question, exact McNemar and Newcombe's paired interval when they are the same
    questions, else the pooled two-proportion z-test and Newcombe's interval for different items; ``test`` says
    which ran (and, unpaired on questions, that the two answered different ones)."""
    if first_items is not None and second_items is not None:
        c = compare_outcomes(first_items, second_items)
        found = {"p": c.p, "z": c.z, "low": c.low, "high": c.high, "test": c.note, "paired": c.paired}
    else:  # rates without their items (games): no pairing to find
        z, p = two_proportion_test(one["successes"], one["n"], two["successes"], two["n"])
        _, low, high = rate_difference(one["successes"], one["n"], two["successes"], two["n"])
        found = {"p": p, "z": z, "low": low, "high": high, "test": "unpaired two-proportion z-test", "paired": False}
    return {"comparison": label, "benchmark": benchmark, "qtype": qtype, "first": one["rate"], "second": two["rate"],
            "difference": two["rate"] - one["rate"], **found, "n_first": one["n"], "n_second": two["n"]}


def with_holm(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the tests with ``p_holm``, each p adjusted by Holm's method over all of them (`swm.stats.holm`)."""
    return [{**t, "p_holm": adjusted} for t, adjusted in zip(tests, holm([t["p"] for t in tests]), strict=True)]


# ---- SOTOPIA ------------------------------------------------------------------------------------
def _judged(ep: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Return (agent, policy, judgement) for the tested agent, or every judged agent of a lone episode."""
    judgements = decode(ep.get("judgements")) or {}
    policies = decode(ep.get("policies")) or {}
    tested = ep.get("tested_agent")
    agents = [tested] if tested else list(judgements)
    return [(a, str(ep.get("policy") or policies.get(a) or "?"), judgements.get(a) or {}) for a in agents
            if isinstance(judgements.get(a), dict)]


def sotopia(store: ReadOnlyStore, run: str) -> dict[str, Any]:
    """Return a SOTOPIA run (a bench run or one episode): per policy each dimension's mean with its 95%
    t interval over the tested agent's judged episodes, and the episode list with its scores.
    """
    where, params = "episode_id = ?", [run]
    first = store.select("episodes", limit=1)
    columns = set(first[0]) if first else set()
    if "bench_run" in columns:
        where, params = "episode_id = ? or bench_run = ?", [run, run]
    eps = store.select("episodes", where, params, order="episode_id")
    scores: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    episodes = []
    for ep in eps:
        for agent, policy, j in _judged(ep):
            for d in (*DIMENSIONS, "overall"):
                scores[policy][d].append(j.get(d))
            episodes.append({"episode_id": ep["episode_id"], "policy": policy, "agent": agent,
                             "seat": ep.get("seat"), "setting": ep.get("setting") or "", "status": ep.get("status"),
                             "scenario_id": ep.get("scenario_id") or "",
                             **{d: j.get(d) for d in (*DIMENSIONS, "overall")}})
    policies = [{"policy": p, **{d: mean(v) for d, v in dims.items()}} for p, dims in sorted(scores.items())]
    protocol = ", ".join(sorted({str(e.get("judge_protocol")) for e in eps if e.get("judge_protocol")}))
    return {"policies": policies, "episodes": episodes, "dimensions": [*DIMENSIONS, "overall"],
            "protocol": protocol, "n": len(eps), "tests": policy_tests(episodes)}


def _scores(episodes: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Return policy -> dimension -> {scenario and tested agent: score}: what pairs two policies' episodes."""
    per: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for e in episodes:
        key = f"{e.get('scenario_id') or e['episode_id']} / {e.get('agent')}"
        for d in (*DIMENSIONS, "overall"):
            if isinstance(e.get(d), int | float):
                per[e["policy"]][d][key] = float(e[d])
    return per


def policy_tests(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Test each policy of a run against its baseline (``plain`` where it played, else the first), dimension by
    dimension: paired by scenario and tested agent where both played the same ones (`mean_difference`)."""
    per = _scores(episodes)
    names = sorted(per)
    base = "plain" if "plain" in per else (names[0] if names else "")
    tests = []
    for other in [n for n in names if n != base]:
        for d in (*DIMENSIONS, "overall"):
            a, b = per[base][d], per[other][d]
            tests.append({"comparison": f"{other} − {base}", "dimension": d, **mean_difference(a, b),
                          "n_first": len(a), "n_second": len(b)})
    return tests


# ---- games ---------------------------------------------------------------------------------------
def _setting(run: str, game_id: str) -> str:
    rest = game_id[len(run) + 1:] if game_id.startswith(run + "-") else game_id
    return rest.rsplit("-", 1)[0] if "-" in rest else rest


def games(store: ReadOnlyStore, run: str) -> dict[str, Any]:
    """Return a games run (a bench run or one game): per setting the win rate of each side and of each
    role (the role's side won), draws and the legal-move rate of model moves, with Wilson intervals.
    """
    ids = [r["game_id"] for r in store.select("games", "game_id = ? or game_id like ? escape '\\'",
                                              [run, like_prefix(run)], order="game_id")]
    view = RecordsView(store)
    by_setting: dict[str, list[Any]] = defaultdict(list)
    for gid in ids:
        by_setting[_setting(run, gid) if gid != run else "this game"].append(load_record(view, gid))
    settings, roles_table = [], []
    for setting, records in sorted(by_setting.items()):
        done = [r for r in records if r.outcome is not None]
        sides = sorted({s for r in records for s in r.sides.values()})
        m = summarise_games(records, sides)
        illegal = m["illegal_rate"]
        legal = rate(int(illegal["n"] - illegal["hits"]), int(illegal["n"]))
        settings.append({"setting": setting, "games": m["games"], "unfinished": len(records) - len(done),
                         **{f"{side} wins": rate(int(m["wins"][side]["hits"]), m["games"]) for side in sides},
                         "draws": rate(int(m["draws"]["hits"]), m["games"]), "legal moves": legal,
                         "violations": ", ".join(f"{k} {v}" for k, v in sorted(illegal["codes"].items()))})
        wins: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in done:
            for seat, role in r.roles.items():
                wins[role][1] += 1
                wins[role][0] += int(r.outcome is not None and r.outcome.winner == r.sides[seat])
        roles_table += [{"setting": setting, "role": role, "seats played": n, **rate(w, n)}
                        for role, (w, n) in sorted(wins.items())]
    columns = list(dict.fromkeys(k for s in settings for k in s if k not in ("setting", "games", "unfinished",
                                                                               "violations")))
    return {"settings": settings, "columns": columns, "roles": roles_table, "games": ids}


# ---- an ask ----------------------------------------------------------------------------------------
def ask(store: ReadOnlyStore, thread_id: str) -> dict[str, Any] | None:
    """Return an ask: question, mode, answer and reasoning, and the social state it stood on (its parses)."""
    found = store.select("swm_asks", "thread_id = ?", [thread_id], json_columns=["models", "usage",
                                                                                   "parse_problems"])
    if not found:
        return None
    row = found[0]
    parses = store.select("parses", "story_hash = ?", [row["story_hash"]], order="created desc") \
        if row.get("story_hash") and row.get("social_state") in ("parsed", "cached", "failed check") else []
    return {"ask": row, "parses": parses}


# ---- comparing runs ------------------------------------------------------------------------------
def compare_tom(store: ReadOnlyStore, runs: list[str]) -> dict[str, Any]:
    """Set ToM runs side by side (accuracy per benchmark × question type × mode) and test each later run
    against the first, cell by cell: paired (exact McNemar) where the two answered the same questions, else
    unpaired (the z-test), which each row's ``test`` says.
    """
    summaries = {run: tom(store, run) for run in runs}
    outcomes = {run: s["outcomes"] for run, s in summaries.items()}
    keys = list(dict.fromkeys((c["benchmark"], c["qtype"], c["mode"]) for s in summaries.values()
                              for c in s["cells"]))
    cells = {run: {(c["benchmark"], c["qtype"], c["mode"]): c for c in s["cells"]} for run, s in summaries.items()}
    table, tests = [], []
    for key in keys:
        table.append({"benchmark": key[0], "qtype": key[1], "mode": key[2],
                      **{run: cells[run].get(key) for run in runs}})
        base = cells[runs[0]].get(key)
        for other in runs[1:]:
            cell = cells[other].get(key)
            if base and cell and base["n"] and cell["n"]:
                tests.append({**difference(f"{other} − {runs[0]}", key[0], key[1], base, cell,
                                           outcomes[runs[0]].get(key, {}), outcomes[other].get(key, {})),
                              "mode": key[2]})
    return {"runs": runs, "settings": {r: s["settings"] for r, s in summaries.items()}, "table": table,
            "tests": with_holm(tests)}


def mean_difference(first: dict[str, float], second: dict[str, float]) -> dict[str, Any]:
    """Return mean(second) − mean(first) with its 95% interval, from each side's value per paired key: the t
    interval of the differences when the two hold the same keys (same scenario and seat), else Welch's; the
    difference is significant at 5% when the interval leaves out 0. ``test`` names which ran."""
    paired = bool(first) and first.keys() == second.keys()
    if paired:
        found = paired_interval([(first[k], second[k]) for k in sorted(first)])
        test = f"paired t on {len(first)} shared episodes"
    else:
        found = welch_interval(list(first.values()), list(second.values()))
        shared = len(first.keys() & second.keys())
        test = f"unpaired Welch: different episodes ({shared} shared of {len(first)} and {len(second)})"
    if found is None:
        return {"difference": None, "low": None, "high": None, "significant": None, "test": test}
    diff, low, high = found
    return {"difference": diff, "low": low, "high": high, "significant": not low <= 0 <= high, "test": test}


def compare_sotopia(store: ReadOnlyStore, runs: list[str]) -> dict[str, Any]:
    """Set SOTOPIA runs side by side (each policy's dimension means) and test each later run against the
    first per policy and dimension: paired by scenario and tested agent where the two played the same ones,
    else Welch's interval (`mean_difference`; each row's ``test`` says which).
    """
    raw = {run: _scores(sotopia(store, run)["episodes"]) for run in runs}
    policies = sorted({p for per in raw.values() for p in per})
    table, tests = [], []
    for policy in policies:
        for d in (*DIMENSIONS, "overall"):
            table.append({"policy": policy, "dimension": d,
                          **{run: mean(raw[run][policy][d].values()) for run in runs}})
            for other in runs[1:]:
                a, b = raw[runs[0]][policy][d], raw[other][policy][d]
                tests.append({"comparison": f"{other} − {runs[0]}", "policy": policy, "dimension": d,
                              **mean_difference(a, b), "n_first": len(a), "n_second": len(b)})
    return {"runs": runs, "table": table, "tests": tests}


def compare_games(store: ReadOnlyStore, runs: list[str]) -> dict[str, Any]:
    """Set games runs side by side (each setting's win rates, draws and legal-move rate) and test each later
    run against the first, rate by rate (pooled two-proportion z-test)."""
    summaries = {run: {s["setting"]: s for s in games(store, run)["settings"]} for run in runs}
    keys = list(dict.fromkeys((setting, column) for per in summaries.values() for setting, s in per.items()
                              for column, v in s.items() if isinstance(v, dict) and "rate" in v))
    table, tests = [], []
    for setting, column in keys:
        cells = {run: (summaries[run].get(setting) or {}).get(column) for run in runs}
        table.append({"setting": setting, "rate": column, **cells})
        base = cells[runs[0]]
        for other in runs[1:]:
            cell = cells[other]
            if base and cell and base["n"] and cell["n"]:
                tests.append({**difference(f"{other} − {runs[0]}", setting, column, base, cell)})
    return {"runs": runs, "table": table, "tests": with_holm(tests)}
