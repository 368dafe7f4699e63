"""Acting nodes: what an agent sees (its own goal and what reached it) and the call that acts.

`act` is the whole `plain` policy (one call). `sample` is the first node of Foresee-and-Act and
of look-aheads: the same call, kept as the *intended* action for the world model to foresee.
An agent's prompt holds its own background, goal and secret, the others' public profiles, and
the observations that reached it — never another agent's goal, secret or predicted mind.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from swm import prompts
from swm.context import ActContext, EpisodeContext, ModelContext, PromptContext
from swm.llm import ModelReply, call_model
from swm.social.graph_state import EpisodeState, PolicyState
from swm.social.models import ACTION_TYPES, AgentAction, Scenario, action_schema_for
from swm.social.scenario_store import scenario_from
from swm.social.store import load_turns
from swm.state import SocialStep, is_none


def scenario_of(ctx: ModelContext, state: PolicyState | EpisodeState) -> Scenario:
    """Return the episode's scenario: the state holds it inline or by reference to the store."""
    return scenario_from(ctx.experience_store(), state["scenario"])


def role_of(state: PolicyState, agent: str) -> str:
    """Return the model role of a seat: the tested seat is ``agent``, every other ``partner``."""
    return "agent" if agent == state.get("tested_agent") else "partner"


def history_for(ctx: ModelContext, state: PolicyState, agent: str) -> str:
    """Render what reached ``agent`` turn by turn (observations only, never predictions)."""
    lines = []
    for record in load_turns(ctx.experience_store(), state["episode_id"]):
        seen = SocialStep.model_validate_json(record.step).observation_of(agent)
        if not is_none(seen):
            lines.append(f"Turn #{record.turn}: {seen}")
    return "\n".join(lines) or "(nothing yet: the conversation starts now)"


def format_instructions(ctx: PromptContext, scenario: Scenario, agent: str) -> tuple[str, str]:
    """Render the action format block; return (text, prompt id)."""
    prompt = prompts.load("episode_format", ctx.prompt_version("episode_format"))
    others = [n for n in scenario.names if n != agent]
    text = prompt.render(action_types=", ".join(ACTION_TYPES), participants=", ".join(others))
    return text, prompt.id


def salvage(reply: ModelReply, stage: str) -> tuple[AgentAction, str]:
    """Turn a reply that did not fit the action schema into a recorded action, never a silent none."""
    text = reply.raw.content if reply.raw is not None and isinstance(reply.raw.content, str) else ""
    text = text.strip()
    if text:
        return (AgentAction(action_type="speak", argument=text[:1000]),
                f"{stage}: reply did not fit the action schema ({reply.error}); its text was used as speech")
    return AgentAction(), f"{stage}: reply did not fit the action schema ({reply.error}); acted none"


def call_act(ctx: ActContext, state: PolicyState, stage: str, variation: str = "") -> dict[str, Any]:
    """Ask the acting agent for its action (one call); return the action, fallback and costs."""
    scenario = scenario_of(ctx, state)
    actor = state["actor"]
    role = role_of(state, actor)
    name = ctx.act_prompt_name()
    prompt = prompts.load(name, ctx.prompt_version(name))
    fmt, fmt_id = format_instructions(ctx, scenario, actor)
    text = prompt.render(agent=actor, background=scenario.background_for(actor),
                         history=history_for(ctx, state, actor), turn=state["turn"],
                         action_types=", ".join(ACTION_TYPES), format_instructions=fmt, variation=variation)
    others = tuple(n for n in scenario.names if n != actor)
    reply = call_model(ctx.model_for(role), text, action_schema_for(others))
    ctx.record_failed_reply(stage, role, reply, key=state.get("episode_id") or "")
    fallback = None
    if reply.value is not None:
        action = AgentAction.from_model(reply.value, known=[n for n in scenario.names if n != actor])
    else:
        action, fallback = salvage(reply, stage)
    return {"action": action, "fallback": fallback, "stats": reply.stats,
            "prompts": {"act": prompt.id, "format": fmt_id}, "models": {role: ctx.spec_for(role)}}


def act(state: PolicyState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
    """The plain policy: act in one call."""
    out = call_act(runtime.context, state, "act")
    decision = {"policy": "plain", "action": out["action"].model_dump(), "intended": None,
                "prediction": None, "candidates": None, "fallback": out["fallback"],
                "prompts": out["prompts"], "models": out["models"]}
    return {"decision": decision, "usage": {"act": out["stats"]}, "prompts": out["prompts"],
            "models": out["models"]}


def sample(state: PolicyState, runtime: Runtime[ActContext]) -> dict[str, Any]:
    """Sample the intended action (one call); a failed sample is recorded and refined anyway."""
    out = call_act(runtime.context, state, "sample")
    return {"intended": out["action"].model_dump(), "sample_error": out["fallback"],
            "usage": {"sample": out["stats"]}, "prompts": out["prompts"], "models": out["models"]}
