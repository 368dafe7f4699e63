"""The lifelong loop's tables in the experience store, each row written once.

* ``lifelong_tasks`` — every synthesised task with its hidden truth (pk ``task_id``);
* ``lifelong_episodes`` — one row per finished episode (pk ``episode_id``, deterministic from run,
  cycle, phase, policy, task, sample and seat), with provenance (cycle, task, level, seed, seat,
  models, prompt versions, policy version), the checker's verdict and the whole `EpisodeRecord`;
  the episode graph's own ``episodes``/``turns`` rows hold the social states and predictions;
* ``lifelong_pairs`` — every pair built, kept or not (duplicates too), with its gate reasons
  (pk ``run_id, cycle, row``; ``pair_id`` names the pair's content);
* ``lifelong_gate`` — per-rule reject counts per cycle and track;
* ``lifelong_policies`` — each policy version (memory, dataset, checkpoint) and whether deployed;
* ``lifelong_deploys`` — each deploy decision with its reasons;
* ``lifelong_matrix`` — R[cycle, level] cells (successes, n) for ``completion`` and ``pass``;
* ``lifelong_metrics`` — ACC, BWT, FWT, F_k with their intervals.
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Iterable
from typing import Any

from swm.lifelong.gate import GateResult, degenerate_reason
from swm.lifelong.metrics import Cell
from swm.lifelong.records import EpisodeRecord, PreferencePair
from swm.lifelong.tasks import Task
from swm.lifelong.update import Policy


def put_task(store: Any, task: Task) -> None:
    store.insert("lifelong_tasks", {"task_id": task.task_id, "family": task.family, "level": task.level,
                                    "seed": task.seed, "split": task.split, "task": task.model_dump(mode="json")},
                 pk="task_id", ignore=True)


_INDEXED: weakref.WeakSet[Any] = weakref.WeakSet()


def episode_done(store: Any, episode_id: str) -> bool:
    return store.count("lifelong_episodes", "episode_id = ?", [episode_id]) > 0


def put_episode(store: Any, record: EpisodeRecord, passed: bool) -> bool:
    """Record a finished episode once; return False if it was already there."""
    if episode_done(store, record.episode_id):
        return False
    v = record.verdict
    store.insert("lifelong_episodes", {
        "episode_id": record.episode_id, "run_id": record.run_id, "cycle": record.cycle, "phase": record.phase,
        "task_id": record.task_id, "family": record.family, "level": record.level, "seed": record.seed,
        "seat": record.seat, "policy_version": record.policy_version, "models": record.models,
        "prompts": record.prompts, "completion": int(v.completion), "violations": v.violations,
        "passed": int(passed), "judge_goal": record.judge_goal, "turns": len(record.turns), "error": record.error,
        "record": record.model_dump(mode="json"), "created": time.time()}, pk="episode_id", ignore=True)
    if store not in _INDEXED:  # load_episodes and the rate queries select by run, cycle and phase
        with store.lock:
            store.db.table("lifelong_episodes").create_index(["run_id", "cycle", "phase"], if_not_exists=True)
        _INDEXED.add(store)
    return True


def load_episodes(store: Any, run_id: str, cycle: int, phase: str, policy: str | None = None) -> list[EpisodeRecord]:
    if not store.has_table("lifelong_episodes"):
        return []
    sql = "select record from lifelong_episodes where run_id = ? and cycle = ? and phase = ?"
    params: list[Any] = [run_id, cycle, phase]
    if policy is not None:
        sql += " and policy_version = ?"
        params.append(policy)
    return [EpisodeRecord.model_validate_json(r["record"]) for r in store.rows(sql + " order by episode_id", params)]


def count_episodes(store: Any, run_id: str, phase: str | None = None) -> int:
    if phase is None:
        return store.count("lifelong_episodes", "run_id = ?", [run_id])
    return store.count("lifelong_episodes", "run_id = ? and phase = ?", [run_id, phase])


def put_pairs(store: Any, run_id: str, cycle: int, results: Iterable[GateResult], gating: bool) -> None:
    """Store every gated pair of a cycle, duplicates included (keyed by their position in the batch)."""
    rows = []
    for i, r in enumerate(results):
        p = r.pair
        rows.append({"run_id": run_id, "row": i, **p.model_dump(mode="json"), "cycle": cycle, "margin": p.margin,
                     "kept": int(r.kept),
                     "reasons": r.reasons, "degenerate": degenerate_reason(p) if "degenerate" in r.reasons else None,
                     "gating": "on" if gating else "off"})
    store.insert_all("lifelong_pairs", rows, pk=("run_id", "cycle", "row"), ignore=True)


def pairs(store: Any, run_id: str, cycles: Iterable[int], kept: bool | None = True) -> list[PreferencePair]:
    cycles = list(cycles)
    if not cycles or not store.has_table("lifelong_pairs"):
        return []
    marks = ",".join("?" * len(cycles))
    sql = f"select * from lifelong_pairs where run_id = ? and cycle in ({marks})"
    params: list[Any] = [run_id, *cycles]
    if kept is not None:
        sql += " and kept = ?"
        params.append(int(kept))
    fields = set(PreferencePair.model_fields)
    out = []
    for row in store.rows(sql + " order by cycle, row", params):
        data = {k: v for k, v in row.items() if k in fields}
        for key in ("context", "judge_scores"):
            if isinstance(data.get(key), str):
                data[key] = json.loads(data[key])
        out.append(PreferencePair.model_validate(data))
    return out


def pair_ids(store: Any, run_id: str, before_cycle: int) -> set[str]:
    if not store.has_table("lifelong_pairs"):
        return set()
    return {r["pair_id"] for r in store.rows("select pair_id from lifelong_pairs where run_id = ? and cycle < ?",
                                             [run_id, before_cycle])}


def put_gate_counts(store: Any, run_id: str, cycle: int, track: str, kept: int, total: int,
                    counts: dict[str, int]) -> None:
    rows = [{"run_id": run_id, "cycle": cycle, "track": track, "reason": reason, "rejects": n}
            for reason, n in counts.items()]
    rows += [{"run_id": run_id, "cycle": cycle, "track": track, "reason": "_kept", "rejects": kept},
             {"run_id": run_id, "cycle": cycle, "track": track, "reason": "_total", "rejects": total}]
    store.insert_all("lifelong_gate", rows, pk=("run_id", "cycle", "track", "reason"), replace=True)


def gate_counts(store: Any, run_id: str, cycle: int | None = None) -> dict[str, int]:
    """Sum the gate table over tracks (and over cycles unless one is given)."""
    if not store.has_table("lifelong_gate"):
        return {}
    sql = "select reason, sum(rejects) as n from lifelong_gate where run_id = ?"
    params: list[Any] = [run_id]
    if cycle is not None:
        sql += " and cycle = ?"
        params.append(cycle)
    return {r["reason"]: int(r["n"]) for r in store.rows(sql + " group by reason", params)}


def put_policy(store: Any, run_id: str, policy: Policy, errors: list[str] | None = None) -> None:
    store.insert("lifelong_policies", {"run_id": run_id, "version": policy.version, "cycle": policy.cycle,
                                       "kind": policy.kind, "parent": policy.parent,
                                       "policy": policy.model_dump(mode="json"), "errors": errors or [],
                                       "deployed": None, "created": time.time()},
                 pk=("run_id", "version"), ignore=True)


def get_policy(store: Any, run_id: str, version: str) -> Policy | None:
    if not store.has_table("lifelong_policies"):
        return None
    rows = list(store.rows("select policy from lifelong_policies where run_id = ? and version = ?", [run_id, version]))
    return Policy.model_validate_json(rows[0]["policy"]) if rows else None


def put_deploy(store: Any, run_id: str, cycle: int, candidate: str, incumbent: str, deployed: bool,
               reasons: list[str], deltas: dict[str, float]) -> None:
    store.insert("lifelong_deploys", {"run_id": run_id, "cycle": cycle, "candidate": candidate,
                                      "incumbent": incumbent, "deployed": int(deployed), "reasons": reasons,
                                      "deltas": deltas, "created": time.time()},
                 pk=("run_id", "cycle"), replace=True)
    with store.lock:
        store.db.execute("update lifelong_policies set deployed = ? where run_id = ? and version = ?",
                         [int(deployed), run_id, candidate])
        store.db.conn.commit()


def eval_cells(store: Any, run_id: str, policy: str, metric: str) -> dict[str, Cell]:
    """Return a policy's held-out cells per level, over its eval episodes (``completion`` or ``passed``)."""
    if not store.has_table("lifelong_episodes"):
        return {}
    column = "completion" if metric == "completion" else "passed"
    sql = (f"select level, sum({column}) as s, count(*) as n from lifelong_episodes where run_id = ? and "
           "phase = 'eval' and policy_version = ? group by level")
    return {r["level"]: Cell(int(r["s"]), int(r["n"])) for r in store.rows(sql, [run_id, policy])}


def put_matrix_row(store: Any, run_id: str, cycle: int, policy: str, metric: str, cells: dict[str, Cell]) -> None:
    store.insert_all("lifelong_matrix", [{"run_id": run_id, "cycle": cycle, "metric": metric, "level": level,
                                          "policy_version": policy, "successes": c.successes, "n": c.n}
                                         for level, c in cells.items()],
                     pk=("run_id", "cycle", "metric", "level"), replace=True)


def matrix(store: Any, run_id: str, metric: str) -> dict[tuple[int, str], Cell]:
    if not store.has_table("lifelong_matrix"):
        return {}
    rows = store.rows("select * from lifelong_matrix where run_id = ? and metric = ?", [run_id, metric])
    return {(int(r["cycle"]), r["level"]): Cell(int(r["successes"]), int(r["n"])) for r in rows}
