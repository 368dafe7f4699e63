"""Export episodes: JSONL rows that ``datasets.load_dataset("json", ...)`` loads, and transcripts.

Every row has the same shape so Arrow infers one schema: per-agent and per-turn data are lists
of uniform records, free-form nested data (profiles, the social world, predictions) are JSON
strings. A row holds the scenario, the agents (goal and secret included: an export is for the
researcher, not for an agent), every turn, the social world in the paper's S3AP JSON, the
judge's scores, the models per role and the prompt versions.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from swm.checkpoints.store import StoreRecords
from swm.social.judgement import DIMENSIONS
from swm.social.models import TurnRecord
from swm.social.scenario_store import scenario_from
from swm.social.store import get_episode, load_turns
from swm.state import SocialStep, SocialWorld
from swm.usage import total_usage


def episode_row(store: StoreRecords, episode_id: str) -> dict[str, Any]:
    """Build the export row of one stored episode."""
    episode = get_episode(store, episode_id)
    if episode is None:
        raise KeyError(f"no episode {episode_id!r} in the store")
    scenario = scenario_from(store, episode["scenario"])
    turns = load_turns(store, episode_id)
    world = SocialWorld(agents=scenario.names, steps=[SocialStep.model_validate_json(t.step) for t in turns])
    judgements = episode.get("judgements") or {}
    policies = episode.get("policies") or {}
    usage = total_usage(episode.get("usage") if isinstance(episode.get("usage"), dict) else {})
    return {
        "episode_id": episode_id,
        "scenario_id": scenario.id,
        "codename": scenario.codename,
        "scenario": scenario.scenario,
        "relationship": scenario.relationship,
        "hard": scenario.hard,
        "status": episode.get("status"),
        "end_reason": episode.get("end_reason") or "",
        "num_turns": len(turns),
        "max_turns": episode.get("max_turns"),
        "tested_agent": episode.get("tested_agent"),
        "lookahead_width": episode.get("lookahead_width", episode.get("rollout_width")),
        "lookahead_depth": episode.get("lookahead_depth", episode.get("rollout_depth")),
        "agents": [{"name": a.name, "goal": a.goal, "secret": a.secret, "policy": policies.get(a.name, "plain"),
                    "profile": a.profile.model_dump_json()} for a in scenario.agents],
        "turns": [_turn_row(t) for t in turns],
        "social_world": json.dumps(world.to_s3ap(), ensure_ascii=False),
        "scores": [_score_row(name, judgements.get(name)) for name in scenario.names],
        "judge_protocol": episode.get("judge_protocol") or "",
        "models": [{"role": k, "model": str(v)} for k, v in sorted((episode.get("models") or {}).items())],
        "prompts": [{"key": k, "id": str(v)} for k, v in sorted((episode.get("prompts") or {}).items())],
        "calls": int(usage["calls"]),
        "prompt_tokens": int(usage["prompt_tokens"]),
        "completion_tokens": int(usage["completion_tokens"]),
        "seconds": float(usage["seconds"]),
    }


def _turn_row(t: TurnRecord) -> dict[str, Any]:
    return {"turn": t.turn, "agent": t.agent, "policy": t.policy, "action_type": t.action.action_type,
            "argument": t.action.argument, "to": list(t.action.to),
            "intended_action_type": t.intended.action_type if t.intended else None,
            "intended_argument": t.intended.argument if t.intended else None,
            "prediction": t.prediction, "candidates": t.candidates, "fallback": t.fallback, "notes": t.notes,
            "step": t.step, "calls": t.calls, "prompt_tokens": t.prompt_tokens,
            "completion_tokens": t.completion_tokens}


def _score_row(agent: str, judgement: dict[str, Any] | None) -> dict[str, Any]:
    judgement = judgement or {}
    row: dict[str, Any] = {"agent": agent}
    for name in DIMENSIONS:
        value = judgement.get(name)
        row[name] = int(value) if value is not None else None
    row["overall"] = float(judgement["overall"]) if judgement.get("overall") is not None else None
    row["repairs"] = [str(r) for r in judgement.get("repairs") or []]
    row["rejected"] = [str(r) for r in judgement.get("rejected") or []]
    return row


def write_jsonl(store: StoreRecords, episode_ids: Iterable[str], path: str | Path) -> int:
    """Write the episodes as JSONL (overwriting ``path``); return how many rows were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for episode_id in episode_ids:
            out.write(json.dumps(episode_row(store, episode_id), ensure_ascii=False) + "\n")
            count += 1
    return count


def transcript(store: StoreRecords, episode_id: str, *, show_predictions: bool = True) -> str:
    """Render a readable transcript: turns, predicted mental states, fallbacks, and the scores."""
    row = episode_row(store, episode_id)
    lines = [f"Episode {episode_id} — scenario {row['scenario_id']} ({row['codename'] or 'no codename'})",
             f"Scenario: {row['scenario']}", f"Relationship: {row['relationship']}"]
    for agent in row["agents"]:
        lines.append(f"- {agent['name']} [{agent['policy']}] goal: {agent['goal']}")
    lines.append("")
    for turn in row["turns"]:
        step = json.loads(turn["step"])
        said = next(iter(step["actions"].values()), "none")
        lines.append(f"Turn #{turn['turn']} {turn['agent']} [{turn['policy']}, {turn['calls']} calls]: {said}")
        if turn["intended_action_type"] and (turn["intended_action_type"], turn["intended_argument"]) != (
                turn["action_type"], turn["argument"]):
            lines.append(f"    intended: {turn['intended_action_type']}: {turn['intended_argument']}")
        if show_predictions:
            for agent, mind in (step.get("mental_states") or {}).items():
                lines.append(f"    predicted mental state of {agent}: {mind}")
            if turn["prediction"]:
                for pred in json.loads(turn["prediction"]):
                    for agent, act in (pred.get("actions") or {}).items():
                        if act and act != "none":
                            lines.append(f"    predicted reaction of {agent} at {pred.get('timestep')}: {act}")
        if turn["fallback"]:
            lines.append(f"    FALLBACK: {turn['fallback']}")
        if turn["notes"]:
            lines.append(f"    note: {turn['notes']}")
    lines.append(f"\nEnded: {row['end_reason']} after {row['num_turns']} turns.")
    for score in row["scores"]:
        values = ", ".join(f"{d} {score[d] if score[d] is not None else 'REJECTED'}" for d in DIMENSIONS)
        overall = f"{score['overall']:.2f}" if score["overall"] is not None else "n/a"
        lines.append(f"Judge — {score['agent']}: {values}; overall {overall}")
        for repair in score["repairs"]:
            lines.append(f"    repaired: {repair}")
        if score["rejected"]:
            lines.append(f"    rejected (no valid score after a repair call): {', '.join(score['rejected'])}")
    lines.append(f"Calls {row['calls']} ({row['calls'] / max(1, row['num_turns']):.1f} per turn incl. judge), "
                 f"tokens {row['prompt_tokens']}+{row['completion_tokens']}, model time {row['seconds']:.1f} s")
    return "\n".join(lines)
