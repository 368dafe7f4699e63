"""The environment: set an episode up, commit each turn, route to the next agent, finish.

Turn taking is round-robin over the agents still present, in the scenario's order. An action
with recipients (``to``) reaches only them and the actor; any other action reaches everyone
present. A ``leave`` removes the actor. The episode ends (SOTOPIA's rules) at the turn limit,
when fewer than two agents remain, or after more than two consecutive idle (``none``) turns.
Each committed turn is one `SocialStep` in the experience store's ``turns`` table.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from langgraph.runtime import Runtime

from swm.context import EpisodeContext
from swm.defaults import EPISODE_POLICIES
from swm.errors import InputError
from swm.nodes.act import scenario_of
from swm.scenarios import resolve
from swm.social.graph_state import RENAMED_STRATEGIES, EpisodeState
from swm.social.models import AgentAction, Scenario, TurnRecord
from swm.social.scenario_store import is_durable, put_scenario, reference, scenario_from
from swm.social.store import get_episode, load_world, write_episode, write_turn
from swm.state import NONE, SocialStep, split_mental_state
from swm.usage import add_stats, empty_stats, total_usage

POLICIES = EPISODE_POLICIES
MAX_TURNS_LIMIT = 100
MAX_IDLE = 2  # the episode ends when the idle streak exceeds this
SCENE_CHARS = 4_000  # SOTOPIA's scenario texts are a few hundred characters


def observers_of(action: AgentAction, actor: str, active: list[str]) -> list[str]:
    """Return who perceives an action: the recipients and the actor, or everyone present."""
    if action.to:
        return [a for a in active if a == actor or a in action.to]
    return list(active)


def next_actor(agents: list[str], active: list[str], actor: str) -> str:
    """Return the next agent present after ``actor`` in seat order (round-robin)."""
    start = agents.index(actor)
    for offset in range(1, len(agents) + 1):
        candidate = agents[(start + offset) % len(agents)]
        if candidate in active:
            return candidate
    return actor


def opening_scene(scenario: Scenario) -> str:
    """Return the first step's scene: the scenario text, cut where it is bulk (the store keeps it whole).

    The scene is stored with the turn and again in the finished world, so a scenario of megabytes
    would be copied twice more; past `SCENE_CHARS` the scene names the stored scenario instead.
    """
    text = scenario.scenario
    if len(text) <= SCENE_CHARS:
        return text
    ref = reference(scenario)["ref"]
    return f"{text[:SCENE_CHARS]} … (cut at {SCENE_CHARS} of {len(text)} characters; scenario {ref})"


def end_reason(turns_done: int, max_turns: int, active: list[str], idle: int) -> str | None:
    """Return why the episode ends after this many turns, or None to go on."""
    if len(active) < 2:
        return "fewer than two agents remain"
    if idle > MAX_IDLE:
        return f"more than {MAX_IDLE} consecutive idle turns"
    if turns_done >= max_turns:
        return f"turn limit ({max_turns})"
    return None


def setup(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
    """Check the input, start the episode row, and seat the first agent."""
    ctx = runtime.context
    store = ctx.experience_store()
    given_scenario = state.get("scenario")
    try:
        scenario = resolve(given_scenario) if isinstance(given_scenario, str) else scenario_from(store, given_scenario)
    except ValueError as exc:
        raise InputError(f"the scenario is not valid: {str(exc).splitlines()[0]}",
                         "give an id, the scenario text and two or more agents with name and goal") from exc
    names = scenario.names
    tested = state.get("tested_agent") or names[0]
    if tested not in names:
        raise InputError(f"tested agent {tested!r} is not in the scenario", f"use one of {', '.join(names)}")
    given = {name: RENAMED_STRATEGIES.get(p, p) for name, p in (state.get("policies") or {}).items()}
    policies = {name: "plain" for name in names} | given
    for name, policy in policies.items():
        if policy not in POLICIES:
            raise InputError(f"unknown policy {policy!r} for {name}", f"use one of {', '.join(POLICIES)}")
        if name not in names:
            raise InputError(f"policy given for {name!r}, who is not in the scenario", f"agents: {', '.join(names)}")
    max_turns = int(state["max_turns"]) if state.get("max_turns") is not None else 20
    if not 1 <= max_turns <= MAX_TURNS_LIMIT:
        raise InputError(f"max_turns must be between 1 and {MAX_TURNS_LIMIT}, got {max_turns}")
    episode_id = state.get("episode_id") or f"{scenario.id}-{uuid.uuid4().hex[:10]}"
    ref = put_scenario(store, scenario)  # once; the episode row and the state carry its reference
    # without a store that outlives the process, a resumed thread could not read it back: keep it inline
    carried = ref if is_durable(store) else scenario.model_dump(mode="json")
    write_episode(store, {
        "episode_id": episode_id, "scenario_id": scenario.id, "scenario": ref,
        "agents": names, "tested_agent": tested, "policies": policies, "max_turns": max_turns,
        "lookahead_width": ctx.lookahead_width, "lookahead_depth": ctx.lookahead_depth,
        "status": "running", "started": time.time()})
    return {"scenario": carried, "episode_id": episode_id, "tested_agent": tested,
            "policies": policies, "max_turns": max_turns, "turn": 0, "actor": names[0], "active": list(names),
            "idle": 0, "done": False, "end_reason": "", "usage_mark": total_usage(state.get("usage")),
            "decision": {}}


def route(state: EpisodeState) -> str:
    """Send the acting agent to its policy subgraph, or the finished episode to the judge."""
    if state.get("done"):
        return "judge"
    return state["policies"][state["actor"]]


def commit(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
    """Apply the decided action: route observations, store the turn, and decide what comes next."""
    ctx = runtime.context
    scenario = scenario_of(ctx, state)
    actor, turn = state["actor"], state["turn"]
    decision = state.get("decision") or {}
    action = AgentAction.model_validate(decision.get("action") or {})
    active = list(state["active"])
    seen = observers_of(action, actor, active)
    text = action.to_natural_language(actor)
    minds = {}
    if decision.get("prediction"):
        for step in json.loads(decision["prediction"])[:1]:
            for agent, observation in (step.get("observations") or {}).items():
                _, mental = split_mental_state(observation)
                if mental and agent != actor:
                    minds[agent] = mental
    step = SocialStep(
        timestep=str(turn),
        scene=opening_scene(scenario) if turn == 0 else f"turn {turn}; present: {', '.join(active)}",
        observations={a: (text if a in seen else NONE) for a in scenario.names},
        mental_states=minds,
        actions={actor: text},
        dialogue={actor: action.argument} if action.action_type == "speak" and action.argument else {},
    )
    total = total_usage(state.get("usage"))
    mark = state.get("usage_mark") or empty_stats()
    spent = add_stats(total, {k: -float(v) for k, v in mark.items()})  # type: ignore[arg-type]
    write_turn(ctx.experience_store(), TurnRecord(
        episode_id=state["episode_id"], turn=turn, agent=actor, policy=state["policies"][actor], action=action,
        intended=AgentAction.model_validate(decision["intended"]) if decision.get("intended") else None,
        prediction=decision.get("prediction"), candidates=decision.get("candidates"),
        fallback=decision.get("fallback"), notes=decision.get("notes"), step=step.model_dump_json(),
        calls=int(spent["calls"]), prompt_tokens=int(spent["prompt_tokens"]),
        completion_tokens=int(spent["completion_tokens"]), seconds=round(float(spent["seconds"]), 3),
        prompts=decision.get("prompts") or {}, models=decision.get("models") or {}))
    if action.action_type == "leave":
        active = [a for a in active if a != actor]
    idle = state.get("idle", 0) + 1 if action.idle else 0
    reason = end_reason(turn + 1, state["max_turns"], active, idle)
    following = next_actor(scenario.names, active, actor) if active else actor
    # per-turn progress for `stream_mode="custom"` (Studio, the SDK): what the CLI's progress shows
    runtime.stream_writer({"event": "turn", "episode_id": state["episode_id"], "turn": turn, "agent": actor,
                           "action": text[:200], "calls": int(spent["calls"]), "max_turns": state["max_turns"],
                           "end_reason": reason})
    return {"turn": turn + 1, "active": active, "idle": idle, "actor": following, "done": reason is not None,
            "end_reason": reason or "", "usage_mark": total, "decision": {}}


def finish(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
    """Put the whole `SocialWorld` in the state once, and mark the episode finished in the store."""
    ctx = runtime.context
    store = ctx.experience_store()
    scenario = scenario_of(ctx, state)
    world = load_world(store, state["episode_id"], scenario.names)
    row = get_episode(store, state["episode_id"]) or {}
    write_episode(store, {
        **row,
        "episode_id": state["episode_id"], "scenario_id": scenario.id, "scenario": put_scenario(store, scenario),
        "agents": scenario.names, "tested_agent": state["tested_agent"], "policies": state["policies"],
        "max_turns": state["max_turns"], "lookahead_width": ctx.lookahead_width, "lookahead_depth": ctx.lookahead_depth,
        "status": "done", "turns": state["turn"], "end_reason": state.get("end_reason", ""),
        "judgements": state.get("judgements") or {}, "judge_protocol": state.get("judge_protocol"),
        "usage": dict(state.get("usage") or {}),
        "models": dict(state.get("models") or {}), "prompts": dict(state.get("prompts") or {}),
        "finished": time.time()})
    return {"world": world}
