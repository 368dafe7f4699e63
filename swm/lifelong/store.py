"""The lifelong loop's tables in the experience store, each row written once.

* ``lifelong_tasks`` — every synthesised task with its hidden truth (pk ``task_id``);
* ``lifelong_episodes`` — one row per finished episode (pk ``episode_id``, deterministic from run,
  cycle, phase, policy, task, sample and seat), with provenance (cycle, task, level, seed, seat,
  models, prompt versions, policy version, the embedded engine's draw mode), the checker's verdict
  and the whole `EpisodeRecord`;
  the episode graph's own ``episodes``/``turns`` rows hold the social states and predictions;
* ``lifelong_pairs`` — every pair built, kept or not (duplicates too), with its gate reasons
  (pk ``run_id, cycle, row``; ``pair_id`` names the pair's content);
* ``lifelong_gate`` — per-rule reject counts per cycle and track;
* ``lifelong_policies`` — each policy version (memory, dataset, checkpoint) and whether deployed;
* ``lifelong_deploys`` — each deploy decision with its reasons;
* ``lifelong_splits`` — each evaluation task's split (``dev`` chooses, ``test`` reports) and the
  held-out version (pk ``run_id, task_id``);
* ``lifelong_matrix`` — R[cycle, level] cells (successes, n) per curve (``deployed``, ``candidate``)
  and metric (``completion``, ``pass``), each naming the policy whose test episodes it counts and
  the cycle they were played in;
* ``lifelong_metrics`` — ACC, BWT, FWT, F_k with their intervals, per curve and metric.
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Iterable
from typing import Any

from swm.checkpoints.store import StoreRecords
from swm.errors import InputError
from swm.lifelong.gate import GateResult, degenerate_reason
from swm.lifelong.metrics import Cell
from swm.lifelong.records import EpisodeRecord, PreferencePair
from swm.lifelong.update import PolicyVersion
from swm.tasks.families import Task
from swm.usage import CallStats, add_stats, empty_stats


def put_task(store: StoreRecords, task: Task) -> None:
    store.insert("lifelong_tasks", {"task_id": task.task_id, "family": task.family, "level": task.level,
                                    "seed": task.seed, "split": task.split, "task": task.model_dump(mode="json")},
                 pk="task_id", ignore=True)


_INDEXED: weakref.WeakSet[Any] = weakref.WeakSet()


def episode_done(store: StoreRecords, episode_id: str) -> bool:
    return store.count("lifelong_episodes", "episode_id = ?", [episode_id]) > 0


def put_episode(store: StoreRecords, record: EpisodeRecord, passed: bool, usage: dict[str, Any] | None = None) -> bool:
    """Record a finished episode once, with the model usage it cost; return False if it was already there."""
    if episode_done(store, record.episode_id):
        return False
    v = record.verdict
    store.insert("lifelong_episodes", {
        "usage": usage or {},
        "episode_id": record.episode_id, "run_id": record.run_id, "cycle": record.cycle, "phase": record.phase,
        "task_id": record.task_id, "family": record.family, "level": record.level, "seed": record.seed,
        "seat": record.seat, "policy_version": record.policy_version, "models": record.models,
        "prompts": record.prompts, "draw": record.draw, "completion": int(v.completion), "violations": v.violations,
        "passed": int(passed), "judge_goal": record.judge_goal, "turns": len(record.turns), "error": record.error,
        "record": record.model_dump(mode="json"), "created": time.time()}, pk="episode_id", ignore=True)
    if store not in _INDEXED:  # load_episodes and the rate queries select by run, cycle and phase
        store.create_index("lifelong_episodes", ["run_id", "cycle", "phase"])
        _INDEXED.add(store)
    return True


def episode_usage(store: StoreRecords, episode_id: str) -> dict[str, Any]:
    """Return the usage stored with a finished episode ({} for one stored before usage was kept)."""
    rows = list(store.rows("select usage from lifelong_episodes where episode_id = ?", [episode_id]))
    raw = rows[0].get("usage") if rows else None
    return json.loads(raw) if isinstance(raw, str) and raw else {}


def take_attempt_usage(store: StoreRecords, episode_id: str) -> CallStats:
    """Remove the turn rows of an attempt that did not finish (a kill, a failed call); return what they cost.

    The episode is played again from its first turn, so its old turns must go; their calls were
    made (and billed) all the same, so they are counted, not dropped.
    """
    spent = empty_stats()
    if not store.has_table("turns"):
        return spent
    for row in store.rows("select calls, prompt_tokens, completion_tokens, seconds from turns where episode_id = ?",
                          [episode_id]):
        spent = add_stats(spent, {k: v or 0 for k, v in row.items()})
    store.execute("delete from turns where episode_id = ?", [episode_id])
    return spent


def put_failure(store: StoreRecords, episode_id: str, run_id: str, cycle: int, phase: str, error: str,
                usage: dict[str, Any]) -> None:
    """Record an episode whose model call failed after its retries (the latest error per episode)."""
    store.insert("lifelong_failures", {"episode_id": episode_id, "run_id": run_id, "cycle": cycle, "phase": phase,
                                       "error": error, "usage": usage, "created": time.time()},
                 pk="episode_id", replace=True)


def failures(store: StoreRecords, run_id: str) -> list[dict[str, Any]]:
    """Return the run's episodes that failed and were never finished since, by cycle and phase."""
    if not store.has_table("lifelong_failures"):
        return []
    unfinished = ("and episode_id not in (select episode_id from lifelong_episodes)"
                  if store.has_table("lifelong_episodes") else "")
    return list(store.rows(f"select * from lifelong_failures where run_id = ? {unfinished} "
                           "order by cycle, phase, episode_id", [run_id]))


def load_episodes(store: StoreRecords, run_id: str, cycle: int, phase: str,
                  policy: str | None = None) -> list[EpisodeRecord]:
    if not store.has_table("lifelong_episodes"):
        return []
    sql = "select record from lifelong_episodes where run_id = ? and cycle = ? and phase = ?"
    params: list[Any] = [run_id, cycle, phase]
    if policy is not None:
        sql += " and policy_version = ?"
        params.append(policy)
    return [EpisodeRecord.model_validate_json(r["record"]) for r in store.rows(sql + " order by episode_id", params)]


def count_episodes(store: StoreRecords, run_id: str, phase: str | None = None) -> int:
    if phase is None:
        return store.count("lifelong_episodes", "run_id = ?", [run_id])
    return store.count("lifelong_episodes", "run_id = ? and phase = ?", [run_id, phase])


def put_pairs(store: StoreRecords, run_id: str, cycle: int, results: Iterable[GateResult], gating: bool) -> None:
    """Store every gated pair of a cycle, duplicates included (keyed by their position in the batch)."""
    rows = []
    for i, r in enumerate(results):
        p = r.pair
        rows.append({"run_id": run_id, "row": i, **p.model_dump(mode="json"), "cycle": cycle, "margin": p.margin,
                     "kept": int(r.kept),
                     "reasons": r.reasons, "degenerate": degenerate_reason(p) if "degenerate" in r.reasons else None,
                     "gating": "on" if gating else "off"})
    store.insert_all("lifelong_pairs", rows, pk=("run_id", "cycle", "row"), ignore=True)


def pairs(store: StoreRecords, run_id: str, cycles: Iterable[int], kept: bool | None = True) -> list[PreferencePair]:
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


def pair_ids(store: StoreRecords, run_id: str, before_cycle: int) -> set[str]:
    if not store.has_table("lifelong_pairs"):
        return set()
    return {r["pair_id"] for r in store.rows("select pair_id from lifelong_pairs where run_id = ? and cycle < ?",
                                             [run_id, before_cycle])}


def put_gate_counts(store: StoreRecords, run_id: str, cycle: int, track: str, kept: int, total: int,
                    counts: dict[str, int]) -> None:
    rows = [{"run_id": run_id, "cycle": cycle, "track": track, "reason": reason, "rejects": n}
            for reason, n in counts.items()]
    rows += [{"run_id": run_id, "cycle": cycle, "track": track, "reason": "_kept", "rejects": kept},
             {"run_id": run_id, "cycle": cycle, "track": track, "reason": "_total", "rejects": total}]
    store.insert_all("lifelong_gate", rows, pk=("run_id", "cycle", "track", "reason"), replace=True)


def gate_counts(store: StoreRecords, run_id: str, cycle: int | None = None) -> dict[str, int]:
    """Sum the gate table over tracks (and over cycles unless one is given)."""
    if not store.has_table("lifelong_gate"):
        return {}
    sql = "select reason, sum(rejects) as n from lifelong_gate where run_id = ?"
    params: list[Any] = [run_id]
    if cycle is not None:
        sql += " and cycle = ?"
        params.append(cycle)
    return {r["reason"]: int(r["n"]) for r in store.rows(sql + " group by reason", params)}


def put_policy(store: StoreRecords, run_id: str, policy: PolicyVersion, errors: list[str] | None = None) -> None:
    store.insert("lifelong_policies", {"run_id": run_id, "version": policy.version, "cycle": policy.cycle,
                                       "kind": policy.kind, "parent": policy.parent,
                                       "policy": policy.model_dump(mode="json"), "errors": errors or [],
                                       "deployed": None, "created": time.time()},
                 pk=("run_id", "version"), ignore=True)


def get_policy(store: StoreRecords, run_id: str, version: str) -> PolicyVersion | None:
    if not store.has_table("lifelong_policies"):
        return None
    rows = list(store.rows("select policy from lifelong_policies where run_id = ? and version = ?", [run_id, version]))
    return PolicyVersion.model_validate_json(rows[0]["policy"]) if rows else None


def put_deploy(store: StoreRecords, run_id: str, cycle: int, candidate: str, incumbent: str, deployed: bool,
               reasons: list[str], deltas: dict[str, float]) -> None:
    store.insert("lifelong_deploys", {"run_id": run_id, "cycle": cycle, "candidate": candidate,
                                      "incumbent": incumbent, "deployed": int(deployed), "reasons": reasons,
                                      "deltas": deltas, "created": time.time()},
                 pk=("run_id", "cycle"), replace=True)
    store.execute("update lifelong_policies set deployed = ? where run_id = ? and version = ?",
                  [int(deployed), run_id, candidate])


def put_splits(store: StoreRecords, run_id: str, splits: dict[str, list[Task]], version: str) -> None:
    """Record which held-out task is in which evaluation split (written once, at cycle 0)."""
    store.insert_all("lifelong_splits", [{"run_id": run_id, "task_id": t.task_id, "split": split, "family": t.family,
                                          "level": t.level, "version": version}
                                         for split, tasks in splits.items() for t in tasks],
                     pk=("run_id", "task_id"), ignore=True)


def split_ids(store: StoreRecords, run_id: str) -> dict[str, list[str]]:
    """Return the run's evaluation task ids per split (``dev``, ``test``), as recorded."""
    if not store.has_table("lifelong_splits"):
        return {}
    out: dict[str, list[str]] = {}
    for r in store.rows("select split, task_id from lifelong_splits where run_id = ? order by split, task_id",
                        [run_id]):
        out.setdefault(r["split"], []).append(r["task_id"])
    return out


def eval_cells(store: StoreRecords, run_id: str, policy: str, metric: str, split: str) -> dict[str, Cell]:
    """Return a policy's cells per level on one evaluation split (``completion`` or ``passed``).

    Each policy plays each split task once (the episode id has no cycle), so a cell is one
    episode set, named by its ``source``.
    """
    if not store.has_table("lifelong_episodes"):
        return {}
    column = "completion" if metric == "completion" else "passed"
    sql = (f"select level, sum({column}) as s, count(*) as n from lifelong_episodes where run_id = ? and "
           "phase = ? and policy_version = ? group by level")
    return {r["level"]: Cell(int(r["s"]), int(r["n"]), source=f"{policy}/{split}/{r['level']}")
            for r in store.rows(sql, [run_id, split, policy])}


def played_cycle(store: StoreRecords, run_id: str, policy: str, split: str) -> int | None:
    """Return the cycle in which a policy's episodes on a split were played (None: not yet)."""
    if not store.has_table("lifelong_episodes"):
        return None
    rows = list(store.rows("select min(cycle) as c from lifelong_episodes where run_id = ? and phase = ? and "
                           "policy_version = ?", [run_id, split, policy]))
    return None if not rows or rows[0]["c"] is None else int(rows[0]["c"])


def _curves_table(store: StoreRecords, table: str) -> bool:
    """Return whether a per-curve table exists; refuse, in one line, one written before the dev/test split."""
    if not store.has_table(table):
        return False
    if "curve" not in store.columns(table):
        raise InputError(f"{table} in this store was written by a version of swm before the dev/test split",
                         "start the run in a new --db (its episodes cannot be reused: their ids changed)")
    return True


def put_matrix_row(store: StoreRecords, run_id: str, curve: str, cycle: int, policy: str, metric: str,
                   cells: dict[str, Cell], played: int | None) -> None:
    """Write R[cycle, ·] of a curve (``deployed`` or ``candidate``): the test cells of ``policy``."""
    _curves_table(store, "lifelong_matrix")
    store.insert_all("lifelong_matrix", [{"run_id": run_id, "curve": curve, "cycle": cycle, "metric": metric,
                                          "level": level, "policy_version": policy, "played_cycle": played,
                                          "successes": c.successes, "n": c.n}
                                         for level, c in cells.items()],
                     pk=("run_id", "curve", "cycle", "metric", "level"), replace=True)


def matrix(store: StoreRecords, run_id: str, metric: str, curve: str = "deployed") -> dict[tuple[int, str], Cell]:
    """Return a curve's R matrix; each cell's ``source`` names the policy's episode set it counts."""
    if not _curves_table(store, "lifelong_matrix"):
        return {}
    rows = store.rows("select * from lifelong_matrix where run_id = ? and metric = ? and curve = ?",
                      [run_id, metric, curve])
    return {(int(r["cycle"]), r["level"]): Cell(int(r["successes"]), int(r["n"]),
                                                source=f"{r['policy_version']}/test/{r['level']}") for r in rows}


def matrix_policies(store: StoreRecords, run_id: str, curve: str) -> dict[int, tuple[str, int | None]]:
    """Return, per cycle, the policy a curve's row counts and the cycle its episodes were played in."""
    if not _curves_table(store, "lifelong_matrix"):
        return {}
    rows = store.rows("select distinct cycle, policy_version, played_cycle from lifelong_matrix where run_id = ? "
                      "and curve = ?", [run_id, curve])
    return {int(r["cycle"]): (r["policy_version"], r["played_cycle"]) for r in rows}


def policies(store: StoreRecords, run_id: str) -> list[dict[str, Any]]:
    """Return every policy version of a run (oldest first) with whether it was deployed."""
    if not store.has_table("lifelong_policies"):
        return []
    rows = store.rows("select policy, deployed, errors from lifelong_policies where run_id = ? order by cycle, version",
                      [run_id])
    # the column was created holding NULL, so SQLite may give the flag back as text ('0', '1')
    return [{**json.loads(r["policy"]), "deployed": None if r["deployed"] is None else bool(int(r["deployed"])),
             "errors": json.loads(r["errors"]) if isinstance(r["errors"], str) else r["errors"]} for r in rows]


def agent_specs(store: StoreRecords, run_id: str) -> dict[str, list[str]]:
    """Return, per policy version, the agent model specs its episodes recorded (what actually played)."""
    if not store.has_table("lifelong_episodes"):
        return {}
    out: dict[str, list[str]] = {}
    for r in store.rows("select distinct policy_version, models from lifelong_episodes where run_id = ?", [run_id]):
        models = json.loads(r["models"]) if isinstance(r["models"], str) else (r["models"] or {})
        spec = models.get("agent")
        if spec and spec not in out.setdefault(r["policy_version"], []):
            out[r["policy_version"]].append(spec)
    return out


def episodes_played(store: StoreRecords, run_id: str) -> dict[tuple[int, str], tuple[int, int | None]]:
    """Return, per (cycle, phase), how many episodes were played and the model calls they made.

    Calls are None for a store written before usage was kept with each episode.
    """
    if not store.has_table("lifelong_episodes"):
        return {}
    kept = "usage" in store.columns("lifelong_episodes")
    out: dict[tuple[int, str], tuple[int, int | None]] = {}
    for r in store.rows(f"select cycle, phase, {'usage' if kept else 'null as usage'} from lifelong_episodes "
                        "where run_id = ?", [run_id]):
        usage = json.loads(r["usage"]) if isinstance(r["usage"], str) and r["usage"] else {}
        key = (int(r["cycle"]), r["phase"])
        episodes, calls = out.get(key, (0, 0 if kept else None))
        if calls is not None:
            calls += sum(int(v.get("calls", 0)) for v in usage.values())
        out[key] = (episodes + 1, calls)
    return out
