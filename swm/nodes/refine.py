"""Refinement: choose the best simulated candidate, then refine it with its foreseen future.

The refine prompt is appendix A.4.3 of the S3AP paper. When the chosen candidate has no
foreseen step (the world model's reply did not fit), refine makes no call and the agent acts
on its intended action; when the refine reply does not fit, the agent also acts on the intended
action. Both fallbacks are recorded in the decision (and so on the turn row), never hidden.
"""

from __future__ import annotations

import json
from typing import Any

from langgraph.runtime import Runtime

from swm import prompts
from swm.context import ActT
from swm.llm import call_model
from swm.nodes.act import format_instructions, history_for, role_of, scenario_of
from swm.nodes.predict import render_future
from swm.social.graph_state import PolicyState
from swm.social.models import AgentAction, action_schema_for


def choose(state: PolicyState) -> dict[str, Any]:
    """Pick the candidate whose future scored best (ties and unscored ones: lowest index first)."""
    candidates = state.get("candidates") or {}
    scores = state.get("scores") or {}

    def rank(key: str) -> tuple[int, int]:
        progress = (scores.get(key) or {}).get("goal_progress")
        foreseen = bool((state.get("futures") or {}).get(key, {}).get("steps"))
        return (progress if progress is not None else -1) + (0 if foreseen else -100), -int(key)

    best = max(candidates, key=rank) if candidates else "0"
    return {"chosen": best}


def _candidates_record(state: PolicyState) -> str | None:
    candidates = state.get("candidates") or {}
    if len(candidates) < 2:
        return None
    record = [{"index": int(k), **candidates[k], "future_error": (state.get("futures") or {}).get(k, {}).get("error"),
               "score": (state.get("scores") or {}).get(k)} for k in sorted(candidates, key=int)]
    return json.dumps(record, ensure_ascii=False)


def refine(state: PolicyState, runtime: Runtime[ActT]) -> dict[str, Any]:
    """Refine the chosen action with its foreseen future (one call; none when there is no future)."""
    ctx = runtime.context
    scenario = scenario_of(ctx, state)
    actor = state["actor"]
    key = state.get("chosen") or "0"
    candidate = (state.get("candidates") or {}).get(key) or {"action": state.get("intended") or {}, "error": None}
    intended = AgentAction.model_validate(candidate["action"])
    future = (state.get("futures") or {}).get(key) or {"steps": [], "error": "no prediction was made"}
    notes = [n for n in (candidate.get("error"),) if n]
    base = {"intended": intended.model_dump(), "candidates": _candidates_record(state)}
    if not future["steps"]:
        skipped = f"{future['error']}; acted on the intended action (refine skipped)"
        decision = {**base, "action": intended.model_dump(), "prediction": None, "fallback": skipped,
                    "notes": "; ".join(notes) or None,
                    "prompts": dict(state.get("prompts") or {}), "models": dict(state.get("models") or {})}
        return {"decision": decision}
    prediction = render_future(future["steps"], scenario.names)
    name = ctx.ordered_prompt("foresee_refine")  # conversation last in act_order "prefix"
    prompt = prompts.load(name, ctx.prompt_version(name))
    fmt, fmt_id = format_instructions(ctx, scenario, actor)
    history = f"{scenario.background_for(actor)}\n\nConversation so far:\n{history_for(ctx, state, actor)}"
    text = prompt.render(agent=actor, history=history, intended_action=intended.to_natural_language(actor),
                         socialized_context_info=prediction, format_instructions=fmt)
    role = role_of(state, actor)
    others = tuple(n for n in scenario.names if n != actor)
    reply = call_model(ctx.model_for(role), text, action_schema_for(others))
    ctx.record_failed_reply("refine", role, reply, key=state.get("episode_id") or "")
    fallback: str | None = None
    if reply.value is not None:
        action = AgentAction.from_model(reply.value, known=[n for n in scenario.names if n != actor])
    else:
        action = intended
        fallback = f"refine: reply did not fit the action schema ({reply.error}); acted on the intended action"
    if future.get("error"):
        notes.append(f"partial foresight: {future['error']}")
    ids = {"refine": prompt.id, "format": fmt_id}
    models = {role: ctx.spec_for(role)}
    decision = {**base, "action": action.model_dump(), "prediction": prediction,
                "fallback": fallback, "notes": "; ".join(notes) or None,
                "prompts": {**(state.get("prompts") or {}), **ids}, "models": {**(state.get("models") or {}), **models}}
    return {"decision": decision, "usage": {"refine": reply.stats}, "prompts": ids, "models": models}
