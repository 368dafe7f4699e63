"""World-model nodes: foresee what follows an intended action, one or k steps ahead.

`predict` (Foresee-and-Act) and `simulate` (one look-ahead candidate) share `simulate_future`: each
simulated step is ONE world-model call that predicts the others' mental states, their
reactions and the resulting state, given the agent's view, the candidate action and the steps
simulated so far. The world model sees only what the acting agent knows (its own goal and
secret, the others' public profiles, what reached it). A failed call ends that future there and
is recorded in it; the refine step then falls back to the intended action.
"""

from __future__ import annotations

import json
from typing import Any

from langgraph.runtime import Runtime

from swm import prompts
from swm.context import ActContext, EpisodeContext
from swm.llm import call_model
from swm.nodes.act import history_for, scenario_of
from swm.social.graph_state import PolicyState
from swm.social.models import AgentAction, Scenario
from swm.social.schemas import Foresight, foresight_for
from swm.state import SocialStep, SocialWorld
from swm.usage import CallStats, add_stats, empty_stats


def foresight_to_step(value: Foresight | Any, scenario: Scenario, turn: int, depth: int) -> SocialStep:
    """Turn the world model's prediction into a predicted S3AP step."""
    def name(raw: str) -> str:
        world = SocialWorld(agents=scenario.names)
        return world.resolve_agent(raw) or raw.strip()

    actions = {name(r.agent): f"{r.action_type}: {r.argument}".strip(": ") for r in value.reactions}
    dialogue = {name(r.agent): r.argument for r in value.reactions if r.action_type == "speak" and r.argument}
    minds = {name(m.agent): m.mental_state for m in value.mental_states if m.mental_state.strip()}
    return SocialStep(timestep=f"{turn}+{depth} (predicted)", scene=value.next_state or "none",
                      mental_states=minds, actions=actions, dialogue=dialogue)


def render_future(steps: list[dict[str, Any]], agents: list[str]) -> str:
    """Render predicted steps as the paper's S3AP JSON (mental states in observations)."""
    world = SocialWorld(agents=agents, steps=[SocialStep.model_validate(s) for s in steps])
    return json.dumps(world.to_s3ap()["socialized_context"], ensure_ascii=False)


def simulate_future(ctx: ActContext, state: PolicyState, action: AgentAction,
                    depth: int) -> tuple[dict[str, Any], CallStats, str]:
    """Simulate ``depth`` steps after ``action`` (one world-model call each).

    Returns ({"steps": [SocialStep dicts], "error": str | None}, summed stats, prompt id).
    """
    scenario = scenario_of(ctx, state)
    actor = state["actor"]
    name = ctx.ordered_prompt("foresee_predict")  # conversation last in act_order "prefix"
    prompt = prompts.load(name, ctx.prompt_version(name))
    history = history_for(ctx, state, actor)
    others = [n for n in state.get("active") or scenario.names if n != actor]
    steps: list[dict[str, Any]] = []
    stats = empty_stats()
    error = None
    for j in range(1, depth + 1):
        text = prompt.render(agent=actor, background=scenario.background_for(actor), history=history,
                             intended_action=action.to_natural_language(actor),
                             simulated_so_far=render_future(steps, scenario.names) if steps else "none",
                             others=", ".join(others) or "none")
        reply = call_model(ctx.model_for("world_model"), text, foresight_for(tuple(others)))
        ctx.record_failed_reply("predict", "world_model", reply, key=state.get("episode_id") or "")
        stats = add_stats(stats, reply.stats)
        if reply.value is None:
            error = f"predict step {j}: {reply.error}"
            break
        steps.append(foresight_to_step(reply.value, scenario, state["turn"], j).model_dump())
    return {"steps": steps, "error": error}, stats, prompt.id


def predict(state: PolicyState, runtime: Runtime[ActContext]) -> dict[str, Any]:
    """Foresee one step after the intended action (one world-model call)."""
    ctx = runtime.context
    intended = AgentAction.model_validate(state["intended"])
    future, stats, prompt_id = simulate_future(ctx, state, intended, 1)
    return {"candidates": {"0": {"action": state["intended"], "error": state.get("sample_error")}},
            "futures": {"0": future}, "chosen": "0", "usage": {"predict": stats},
            "prompts": {"predict": prompt_id}, "models": {"world_model": ctx.spec_for("world_model")}}


def simulate(state: PolicyState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
    """Simulate one look-ahead candidate ``lookahead_depth`` steps ahead (k world-model calls)."""
    ctx = runtime.context
    key = str(state["index"])
    action = AgentAction.model_validate(state["candidates"][key]["action"])
    future, stats, prompt_id = simulate_future(ctx, state, action, max(1, ctx.lookahead_depth))
    return {"futures": {key: future}, "usage": {"simulate": stats}, "prompts": {"predict": prompt_id},
            "models": {"world_model": ctx.spec_for("world_model")}}
