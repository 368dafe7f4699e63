"""What each page shows, assembled from the store: an episode, a social state, a game, a learning run.

Pure functions of a `ReadOnlyStore` and an id, returning plain dicts the templates render, so
each view is tested without a browser and the same data backs the page and its CSV export.
"""

from __future__ import annotations

import re
from typing import Any

from swm.s3ap import is_none
from swm.social.scenario_store import is_reference, scenario_json
from swm.state import SocialWorld
from swm.stats import token_f1, wilson_interval
from swm.ui.store import PAGE, ReadOnlyStore, decode

DIMENSIONS = ("believability", "relationship", "knowledge", "secret", "social_rules",
              "financial_and_material_benefits", "goal")


def _action_text(action: object) -> str:
    action = decode(action)
    if isinstance(action, dict):
        kind, argument = action.get("action_type", ""), action.get("argument", "")
        return f"{kind}: {argument}" if argument and kind not in ("none", "leave") else str(kind)
    return "" if action is None else str(action)


def foresight(predicted: str, actual: str) -> bool:
    """Tell whether a predicted reaction matches what the partner really did (both idle, or F1 ≥ 0.5)."""
    idle = {"none", "did nothing", ""}
    p = predicted.strip().casefold()
    a = actual.strip().casefold()
    if any(p.endswith(w) for w in idle if w) or is_none(p):
        return a in idle or a.endswith("did nothing") or a.startswith("none")
    return token_f1(p, a) >= 0.5


# SOTOPIA's goals mark what only the model should read as hints: <extra_info>, <strategy_hint>, <clarification_hint>
GOAL_TAGS = re.compile(r"\s*</?(?:extra_info|strategy_hint|clarification_hint)>\s*")


def goal_parts(goal: object) -> list[str]:
    """Split a SOTOPIA goal into its text and each tagged hint, tags removed, for a page to show as prose."""
    return [part for part in GOAL_TAGS.split(str(goal or "")) if part.strip()]


def episode(store: ReadOnlyStore, episode_id: str) -> dict[str, Any] | None:
    """Return an episode: scenario, private goals, turns with predictions and hit/miss, judge, failed replies."""
    found = store.select("episodes", "episode_id = ?", [episode_id],
                         json_columns=["scenario", "judgements", "usage", "models", "prompts", "policies"])
    if not found:
        return None
    ep = found[0]
    if is_reference(ep.get("scenario")):  # episodes name their scenario; its row holds it once
        ep["scenario"] = scenario_json(store, ep["scenario"]["ref"]) or {}
    turns = store.select("turns", "episode_id = ?", [episode_id], order="turn",
                         json_columns=["action", "intended", "prediction", "candidates", "step", "notes"])
    for i, t in enumerate(turns):
        t["state_cells"] = step_cells(t.get("step"))
        t["said"] = _action_text(t["action"])
        t["intended_text"] = _action_text(t["intended"]) if t.get("intended") else ""
        t["refined"] = bool(t["intended_text"]) and t["intended_text"] != t["said"]
        t["predicted"] = []
        nxt = next((u for u in turns[i + 1:] if u["agent"] != t["agent"]), None)
        for step in t.get("prediction") or []:
            for agent, act in (step.get("actions") or {}).items():
                if agent == t["agent"]:
                    continue
                real = (nxt["step"] or {}).get("actions", {}).get(agent, "") if nxt and nxt["agent"] == agent else ""
                t["predicted"].append({"agent": agent, "action": act, "mental": (step.get("mental_states") or {}).get(
                    agent, ""), "actual": real, "hit": foresight(str(act), str(real)) if real else None})
    judgements = ep.get("judgements") or {}
    scores = [{"agent": a, **{d: j.get(d) for d in DIMENSIONS}, "overall": j.get("overall"),
               "reasoning": j.get("reasoning") or {}, "error": j.get("error")}
              for a, j in judgements.items() if isinstance(j, dict)]
    failed = store.select("failed_replies", "key = ?", [episode_id], order="created")
    goals = [{"name": a.get("name"), "goal": goal_parts(a.get("goal"))}
             for a in (ep.get("scenario") or {}).get("agents", []) if isinstance(a, dict)]
    return {"episode": ep, "scenario": ep.get("scenario") or {}, "turns": turns, "scores": scores,
            "dimensions": DIMENSIONS, "failed": failed, "goals": goals}


def step_cells(step: object) -> list[dict[str, str]]:
    """Return a turn's recorded social state, one row per agent: what it observed and its mental state."""
    if not isinstance(step, dict):
        return []
    observations = step.get("observations") or {}
    minds = step.get("mental_states") or {}
    agents = list(dict.fromkeys([*observations, *minds])) if isinstance(observations, dict) else list(minds)
    return [{"agent": a, "observation": str(observations.get(a, "")) if isinstance(observations, dict) else "",
             "mental": str(minds.get(a, ""))} for a in agents]


def social_state(world: SocialWorld, agent: str = "") -> dict[str, Any]:
    """Return the S3AP timeline as rows, each cell marked as seen or unseen by ``agent`` (all seen if none)."""
    name = world.resolve_agent(agent) if agent else None
    expanded = world.expand_tags()
    seen_steps = {e.timestep for e in world.perspective(name)} if name else None
    rows = []
    for step in expanded.steps:
        observed = seen_steps is None or step.timestep in seen_steps
        rows.append({"timestep": step.timestep, "scene": step.scene, "seen": observed,
                     "cells": {a: {"observation": step.observation_of(a), "mental": step.mental_states.get(a, ""),
                                   "action": step.action_of(a), "dialogue": step.dialogue.get(a, ""),
                                   "visible": seen_steps is None or a == name or observed}
                               for a in world.agents}})
    return {"agents": world.agents, "agent": name or "", "rows": rows}


def parse_state(store: ReadOnlyStore, key: str) -> dict[str, Any] | None:
    """Return a cached parse: its world and its validation report."""
    found = store.select("parses", "key = ?", [key], json_columns=["s3ap", "report"])
    if not found:
        return None
    row = found[0]
    return {"row": row, "world": SocialWorld.from_s3ap(row["s3ap"]), "report": row.get("report") or {}}


def episode_world(ep: dict[str, Any]) -> SocialWorld:
    """Return the social state an episode's turns recorded (one step per turn)."""
    agents = [a.get("name", "") for a in (ep["scenario"].get("agents") or [])]
    steps = [t["step"] for t in ep["turns"] if isinstance(t.get("step"), dict)]
    return SocialWorld.model_validate({"agents": agents, "steps": steps})


def game(store: ReadOnlyStore, game_id: str, seat: str = "") -> dict[str, Any] | None:
    """Return a game: phases and moves, each line marked as seen or not by ``seat`` (everything if none)."""
    found = store.select("games", "game_id = ?", [game_id],
                         json_columns=["players", "roles", "sides", "briefing", "outcome", "policies", "usage"])
    if not found:
        return None
    g = found[0]
    moves = store.select("game_moves", "game_id = ?", [game_id], order="turn", json_columns=["options", "events",
                                                                                             "step"])
    phases: list[dict[str, Any]] = []
    for m in moves:
        step = m.get("step") or {}
        obs = step.get("observations") or {}
        m["public"] = (step.get("actions") or {}).get(m["agent"], "")
        m["view"] = obs.get(seat, "") if seat else "; ".join(f"{p}: {o}" for p, o in obs.items())
        m["visible"] = not seat or seat == m["agent"] or bool(obs.get(seat))
        label = f"Round {m['round']} · {m['phase']}"
        if not phases or phases[-1]["label"] != label:
            phases.append({"label": label, "night": str(m["phase"]).startswith("night"), "moves": []})
        phases[-1]["moves"].append(m)
    votes = [m for m in moves if m["phase"] == "day_vote"]
    return {"game": g, "phases": phases, "seat": seat, "players": g.get("players") or [], "votes": votes,
            "violations": [m for m in moves if m.get("violation")]}


def learning(store: ReadOnlyStore, run_id: str) -> dict[str, Any]:
    """Return a lifelong run: policies, training runs, deploy decisions, gate counts, R matrix and metrics."""
    policies = store.select("lifelong_policies", "run_id = ?", [run_id], order="cycle", json_columns=["policy",
                                                                                                       "errors"])
    for p in policies:
        train = (p.get("policy") or {}).get("train") or {}
        p["train"] = train
        p["adapter"] = (p.get("policy") or {}).get("adapter") or ""
        p["served_as"] = (p.get("policy") or {}).get("served_as") or ""
    deploys = store.select("lifelong_deploys", "run_id = ?", [run_id], order="cycle",
                           json_columns=["reasons", "deltas"])
    gate = store.select("lifelong_gate", "run_id = ? and rejects > 0", [run_id], order="cycle, track, reason")
    matrix = store.select("lifelong_matrix", "run_id = ?", [run_id], order="curve, metric, cycle, level")
    metrics = store.select("lifelong_metrics", "run_id = ?", [run_id], order="curve, metric, name")
    cycles = sorted({r["cycle"] for r in store.select("lifelong_pairs", "run_id = ?", [run_id])} |
                    {p["cycle"] for p in policies})
    kept = store.rows("select cycle, count(*) as sampled, sum(case when kept then 1 else 0 end) as kept "
                      "from lifelong_pairs where run_id = ? group by cycle order by cycle", [run_id]) \
        if store.has("lifelong_pairs") else []
    return {"run_id": run_id, "policies": policies, "deploys": deploys, "gate": gate, "matrix": matrix,
            "metrics": metrics, "cycles": cycles, "curves": learning_curves(matrix), "heatmaps": heatmaps(matrix),
            "losses": loss_curves(policies), "kept": [{"cycle": r["cycle"], "sampled": int(r["sampled"] or 0),
                                                      "kept": int(r["kept"] or 0)} for r in kept]}


def heatmaps(matrix: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return one heat map per (curve, metric): R[cycle, level] as success rates, n and the interval per cell."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for cell in matrix:
        h = out.setdefault((cell["curve"], cell["metric"]), {"name": f"{cell['curve']} · {cell['metric']}",
                                                             "cells": {}, "levels": [], "cycles": []})
        if cell["level"] not in h["levels"]:
            h["levels"].append(cell["level"])
        if cell["cycle"] not in h["cycles"]:
            h["cycles"].append(cell["cycle"])
        h["cells"][(cell["cycle"], cell["level"])] = cell
    maps = []
    for h in out.values():
        z, text = [], []
        for c in sorted(h["cycles"]):
            zr, tr = [], []
            for level in h["levels"]:
                cell = h["cells"].get((c, level))
                n = int(cell["n"] or 0) if cell else 0
                wins = float(cell["successes"] or 0) if cell else 0.0
                low, high = wilson_interval(wins, n)
                zr.append(wins / n if n else None)
                tr.append(f"n = {n}, 95% [{low:.2f}, {high:.2f}]" if n else "no task")
            z.append(zr)
            text.append(tr)
        maps.append({"name": h["name"], "x": h["levels"], "y": sorted(h["cycles"]), "z": z, "text": text})
    return maps


def loss_curves(policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return one plot series per trained policy: its logged training loss by step."""
    out = []
    for p in policies:
        losses = p["train"].get("loss") or []
        values = [x.get("loss") if isinstance(x, dict) else x for x in losses]
        steps = [x.get("step", i + 1) if isinstance(x, dict) else i + 1 for i, x in enumerate(losses)]
        if values:
            out.append({"name": f"{p['version']} ({p['train'].get('method', p['kind'])})", "x": steps, "y": values,
                        "n": [p["train"].get("examples")] * len(values)})
    return out


def learning_curves(matrix: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return one plot series per (curve, metric, level): success rate by cycle, with n and the 95% Wilson
    interval on every point."""
    series: dict[tuple[str, str, str], dict[str, Any]] = {}
    for cell in matrix:
        key = (cell["curve"], cell["metric"], cell["level"])
        s = series.setdefault(key, {"name": f"{key[0]} · {key[1]} · {key[2]}", "x": [], "y": [], "n": [], "low": [],
                                    "high": []})
        n = int(cell["n"] or 0)
        low, high = wilson_interval(float(cell["successes"] or 0), n)
        s["x"].append(cell["cycle"])
        s["y"].append((cell["successes"] or 0) / n if n else None)
        s["n"].append(n)
        s["low"].append(low if n else None)
        s["high"].append(high if n else None)
    return list(series.values())


def pairs(store: ReadOnlyStore, run_id: str, cycle: int | None = None, page: int = 0,
          size: int = 50) -> list[dict[str, Any]]:
    """Return one page of a run's pairs (a cycle's, when given) with their gate verdicts."""
    where, params = "run_id = ?", list[Any]([run_id])
    if cycle is not None:
        where, params = where + " and cycle = ?", [run_id, cycle]
    return store.select("lifelong_pairs", where, params, order="cycle, row", limit=size, offset=page * size,
                        json_columns=["reasons", "context", "judge_scores"])


def pair(store: ReadOnlyStore, run_id: str, cycle: int, row: int) -> dict[str, Any] | None:
    found = store.select("lifelong_pairs", "run_id = ? and cycle = ? and row = ?", [run_id, cycle, row],
                         json_columns=["reasons", "context", "judge_scores"])
    return found[0] if found else None


def selfplay(store: ReadOnlyStore, run_id: str) -> dict[str, Any]:
    """Return a self-play run: its plan and each iteration's rewards per role, KL and filtered turns."""
    runs = store.select("selfplay_runs", "run_id = ?", [run_id], json_columns=["plan"])
    its = store.select("selfplay_iterations", "run_id = ?", [run_id], order="iteration",
                       json_columns=["reward", "filtered", "eval_reward"])
    roles = sorted({r for it in its for r in (it.get("reward") or {}) if isinstance(it.get("reward"), dict)})
    series = [{"name": f"reward · {role}", "x": [it["iteration"] for it in its],
               "y": [(it.get("reward") or {}).get(role) for it in its], "n": [None] * len(its)} for role in roles]
    kl = [{"name": "KL to the reference", "x": [it["iteration"] for it in its], "y": [it.get("kl") for it in its],
           "n": [None] * len(its)}]  # its own axis: a KL is not a reward
    rollouts = store.select("selfplay_rollouts", "run_id = ?", [run_id], order="iteration, phase, rollout_id",
                            limit=PAGE) if store.has("selfplay_rollouts") else []
    listed = [{k: r.get(k) for k in ("rollout_id", "iteration", "phase", "task_id", "sample", "failed", "tokens")}
              for r in rollouts]
    plan = runs[0]["plan"] if runs else {}
    return {"run_id": run_id, "plan": plan, "plan_rows": flat_settings(plan), "iterations": its, "series": series,
            "kl_series": kl, "rollouts": listed}


def flat_settings(value: object, prefix: str = "") -> list[dict[str, Any]]:
    """Return a nested plan as ``{"setting": "ppo.lr", "value": …}`` rows, one per leaf, in the plan's order."""
    if isinstance(value, dict) and value:
        return [row for k, v in value.items() for row in flat_settings(v, f"{prefix}{k}.")]
    return [{"setting": prefix.rstrip("."), "value": value}] if prefix else []


def rollout(store: ReadOnlyStore, rollout_id: str) -> dict[str, Any] | None:
    """Return a self-play rollout as a transcript: every seat's turns in episode order, each with its reward,
    judge score, filter verdict and its tokens' advantages (mean, first, last); the seats' outcomes and verdict."""
    found = store.select("selfplay_rollouts", "rollout_id = ?", [rollout_id], json_columns=["rollout"])
    if not found:
        return None
    row = found[0]
    data = row.get("rollout") or {}
    turns = []
    for seat in data.get("seats") or []:
        for t in seat.get("turns") or []:
            adv = [float(a) for a in t.get("advantages") or []]
            turns.append({"turn": t.get("turn"), "seat": seat.get("seat"), "role": seat.get("role"),
                          "text": t.get("text"), "reward": t.get("reward"), "judge": t.get("judge"),
                          "filtered": t.get("filtered"), "tokens": len(t.get("token_ids") or []),
                          "advantage_mean": sum(adv) / len(adv) if adv else None,
                          "advantage_first": adv[0] if adv else None, "advantage_last": adv[-1] if adv else None})
    turns.sort(key=lambda t: int(t["turn"] if t["turn"] is not None else -1))
    seats = [{"seat": s.get("seat"), "role": s.get("role"), "outcome": s.get("outcome"),
              "violations": ", ".join(s.get("violations") or []), "turns": len(s.get("turns") or [])}
             for s in data.get("seats") or []]
    return {"rollout": {k: row.get(k) for k in ("rollout_id", "run_id", "iteration", "phase", "task_id", "sample",
                                                 "failed", "tokens", "seconds")},
            "family": data.get("family"), "end_reason": data.get("end_reason"), "verdict": data.get("verdict"),
            "replayed": data.get("journal_turns") or 0, "reseeded": data.get("reseeded_turns") or 0,
            "turns": turns, "seats": seats}
