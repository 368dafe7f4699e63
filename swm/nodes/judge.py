"""Judging: a simulated future against the acting agent's goal, and a finished episode (SOTOPIA-EVAL).

`score` (look-ahead, role ``judge``) rates one candidate's simulated future 0..10 for the acting
agent's goal; it sees only that agent's view (its reply is read leniently: clamped, rounded).
`judge_episode` rates every agent of a finished episode on SOTOPIA-EVAL's seven dimensions, with
full knowledge of goals and secrets, by the state's ``judge_protocol``:

* ``sotopia`` (the default): sotopia's own evaluator (`swm.social.sotopia_eval`): one call for all
  agents, the full rubric, "did nothing" turns filtered out, no end reason; a reply that does not
  validate (a score out of range included) is sent once to be reformatted, then the episode is
  unscored (every judgement rejected, ``overall`` None);
* ``swm``: one call per agent with swm's short rubric and the end reason (`judge_agent`); a score
  that is missing, out of range or not an integer costs one repair call, then is rejected.

Every judgement records the protocol that scored it (``Judgement.protocol``).
"""

from __future__ import annotations

import json
from typing import Any

from langgraph.runtime import Runtime

from swm import prompts
from swm.context import EpisodeContext, PromptContext
from swm.llm import call_model
from swm.nodes.act import history_for, scenario_of
from swm.nodes.predict import render_future
from swm.social.graph_state import EpisodeState, PolicyState
from swm.social.judgement import (
    DIMENSIONS,
    Judgement,
    SotopiaEvaluation,
    missing_schema,
    raw_arguments,
    read_scores,
    rubric_text,
)
from swm.social.models import AgentAction, Scenario
from swm.social.schemas import FutureScore
from swm.social.sotopia_eval import episode_schema, format_instructions, history_text, judgements_from, unscored
from swm.social.store import load_turns
from swm.state import SocialStep
from swm.usage import add_stats, empty_stats


def score(state: PolicyState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
    """Rate one candidate's simulated future against the acting agent's goal (one call)."""
    ctx = runtime.context
    key = str(state["index"])
    scenario = scenario_of(ctx, state)
    actor = state["actor"]
    future = (state.get("futures") or {}).get(key) or {"steps": [], "error": "no future"}
    action = AgentAction.model_validate(state["candidates"][key]["action"])
    prompt = prompts.load("foresee_score", ctx.prompt_version("foresee_score"))
    text = prompt.render(agent=actor, background=scenario.background_for(actor),
                         history=history_for(ctx, state, actor), candidate=action.to_natural_language(actor),
                         future=render_future(future["steps"], scenario.names) if future["steps"] else
                         f"(no future could be simulated: {future.get('error')})")
    reply = call_model(ctx.model_for("judge"), text, FutureScore)
    ctx.record_failed_reply("score", "judge", reply, key=state.get("episode_id") or "")
    result: dict[str, Any] = {"goal_progress": None, "reasoning": "", "note": None}
    if reply.value is not None:
        result.update(goal_progress=reply.value.goal_progress, reasoning=reply.value.reasoning)
    else:
        args = raw_arguments(reply.raw) or {}
        scores, reasons, repairs, missing = read_scores({"goal": args.get("goal_progress"),
                                                         "goal_reasoning": args.get("reasoning")})
        if "goal" in missing:
            result["note"] = f"score rejected: {reply.error}"
        else:
            result.update(goal_progress=scores["goal"], reasoning=reasons["goal"],
                          note="; ".join(repairs) or f"repaired: {reply.error}")
    return {"scores": {key: result}, "usage": {"score": reply.stats}, "prompts": {"score": prompt.id},
            "models": {"judge": ctx.spec_for("judge")}}


def transcript_text(scenario: Scenario, steps: list[SocialStep], names: list[str]) -> str:
    """Render the whole episode as the judge sees it: every action, private ones marked."""
    lines = []
    for step in steps:
        for text in step.actions.values():
            lines.append(f"Turn #{step.timestep}: {text}")
    return "\n".join(lines) or "(no turns were played)"


def participants_text(scenario: Scenario) -> str:
    return "\n".join(f"- {a.profile.private_text(a.name)} Goal: {a.goal}" for a in scenario.agents)


def judge_agent(ctx: PromptContext, scenario: Scenario, agent: str, transcript: str,
                end_reason: str, key: str = "") -> tuple[Judgement, Any, list[str]]:
    """Judge one agent: one call, plus one repair call when dimensions are missing.

    A reply that does not fit its schema is kept in the store's ``failed_replies`` (node
    ``judge`` or ``judge_repair``, ``key`` = the episode), as the other nodes keep theirs.
    """
    prompt = prompts.load("judge_sotopia", ctx.prompt_version("judge_sotopia"))
    text = prompt.render(agent=agent, scenario=scenario.scenario, participants=participants_text(scenario),
                         transcript=transcript, end_reason=end_reason or "unknown", rubric=rubric_text())
    model = ctx.model_for("judge")
    reply = call_model(model, text, SotopiaEvaluation)
    ctx.record_failed_reply("judge", "judge", reply, key=key)
    stats = reply.stats
    ids = [prompt.id]
    args = reply.value.model_dump() if reply.value is not None else raw_arguments(reply.raw)
    scores, reasons, repairs, missing = read_scores(args, strict=True)
    error = reply.error
    if missing:
        repair_prompt = prompts.load("judge_repair", ctx.prompt_version("judge_repair"))
        ids.append(repair_prompt.id)
        repair_text = repair_prompt.render(evaluation_prompt=text, missing=", ".join(missing),
                                           rubric=rubric_text(missing))
        second = call_model(model, repair_text, missing_schema(missing))
        ctx.record_failed_reply("judge_repair", "judge", second, key=key)
        stats = add_stats(stats, second.stats)
        more = second.value.model_dump() if second.value is not None else raw_arguments(second.raw)
        got, got_reasons, got_repairs, still = read_scores({k: v for k, v in (more or {}).items()}, strict=True)
        for name in missing:
            if name not in still:
                scores[name] = got[name]
                reasons[name] = got_reasons[name]
                repairs.append(f"{name}: supplied by the repair call")
        repairs += [r for r in got_repairs if r.split(":")[0] in missing]
        missing = [m for m in missing if m in still]
        error = "; ".join(e for e in (error, second.error) if e) or None
    judgement = Judgement(agent=agent, **scores, reasoning=reasons, repairs=repairs, rejected=missing,
                          error=error, protocol="swm")
    return judgement, stats, ids


def judge_all_agents(ctx: PromptContext, scenario: Scenario, steps: list[SocialStep],
                     key: str = "") -> tuple[dict[str, Judgement], Any, list[str]]:
    """Judge every agent in one call as sotopia does (`swm.social.sotopia_eval`); reformat once, else unscored.

    Replies that do not fit are kept in ``failed_replies`` (nodes ``judge`` and ``judge_reformat``).
    """
    prompt = prompts.load("judge_sotopia_eval", ctx.prompt_version("judge_sotopia_eval"))
    schema = episode_schema(len(scenario.names))
    instructions = format_instructions(schema)
    values = {"history": history_text(scenario, steps), "format_instructions": instructions}
    if "participants" in prompt.placeholders:  # judge_sotopia_eval@v1 named the seats in a block of its own
        values["participants"] = "\n".join(f"agent_{i + 1}_evaluation: {n}" for i, n in enumerate(scenario.names))
    text = prompt.render(**values)
    model = ctx.model_for("judge")
    reply = call_model(model, text, schema)
    ctx.record_failed_reply("judge", "judge", reply, key=key)
    stats, ids = reply.stats, [prompt.id]
    if reply.value is None:  # sotopia: format_bad_output once, then the evaluator gives up
        reformat = prompts.load("judge_sotopia_reformat", ctx.prompt_version("judge_sotopia_reformat"))
        ids.append(reformat.id)
        bad = raw_arguments(reply.raw)
        second = call_model(model, reformat.render(
            ill_formed_output=json.dumps(bad) if bad is not None else str(getattr(reply.raw, "content", "") or ""),
            format_instructions=instructions), schema)
        ctx.record_failed_reply("judge_reformat", "judge", second, key=key)
        stats = add_stats(stats, second.stats)
        if second.value is None:
            return unscored(scenario.names, f"{reply.error}; after reformatting: {second.error}", "sotopia"), stats, ids
        reply = second
    return judgements_from(reply.value, scenario.names, "sotopia"), stats, ids


JUDGE_PROTOCOLS = ("sotopia", "swm")


def judge_episode(state: EpisodeState, runtime: Runtime[EpisodeContext]) -> dict[str, Any]:
    """Judge every agent of the finished episode on SOTOPIA-EVAL's seven dimensions, by ``judge_protocol``."""
    ctx = runtime.context
    if state.get("judge") is False:
        return {"judgements": {}}
    scenario = scenario_of(ctx, state)
    steps = [SocialStep.model_validate_json(t.step) for t in load_turns(ctx.experience_store(), state["episode_id"])]
    protocol = state.get("judge_protocol") or "sotopia"
    if protocol == "sotopia":
        found, used, prompt_ids = judge_all_agents(ctx, scenario, steps, key=state.get("episode_id") or "")
        return {"judgements": {n: j.model_dump() for n, j in found.items()}, "usage": {"judge": used},
                "prompts": {("judge" if i == 0 else "judge_reformat"): pid for i, pid in enumerate(prompt_ids)},
                "models": {"judge": ctx.spec_for("judge")}, "judge_protocol": protocol}
    transcript = transcript_text(scenario, steps, scenario.names)
    judgements: dict[str, Any] = {}
    stats = empty_stats()
    ids: dict[str, str] = {}
    for agent in scenario.names:
        judgement, used, prompt_ids = judge_agent(ctx, scenario, agent, transcript, state.get("end_reason", ""),
                                                   key=state.get("episode_id") or "")
        judgements[agent] = judgement.model_dump()
        stats = add_stats(stats, used)
        ids.update({("judge" if i == 0 else "judge_repair"): pid for i, pid in enumerate(prompt_ids)})
    return {"judgements": judgements, "usage": {"judge": stats}, "prompts": ids,
            "models": {"judge": ctx.spec_for("judge")}, "judge_protocol": protocol}


__all__ = ["DIMENSIONS", "JUDGE_PROTOCOLS", "judge_agent", "judge_all_agents", "judge_episode", "score",
           "transcript_text"]
