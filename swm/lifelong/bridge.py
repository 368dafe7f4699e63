"""The bridge to the episode graph: tasks become `Scenario`s, finished episodes become records.

`to_scenario` maps a task onto the episode graph's SOTOPIA-style scenario: the public text is
the scenario, each agent's private goal is its task goal plus its private facts (and, for the
learner's seats, the policy's memory), and a secret goes into the profile's ``secret`` so the
episode's own rules keep it from the others. The hidden truth stays in the task; the checker
reads the transcript afterwards.

`episode_inputs` is the episode graph's input for a task; the lifelong nodes
(`nodes.lifelong`) play it through the graph they are given, then `to_record` reads its turn
rows back, rebuilds the exact prompt each agent acted on (the ``episode_act`` template, the
input of the plain policy and of Foresee-and-Act's sample step), and runs the task's checker.
This module never runs a graph: it stays below the wiring.
"""

from __future__ import annotations

import json
from typing import Any

from swm import prompts
from swm.lifelong.records import ActedTurn, EpisodeRecord, Prediction, checked_record, digest
from swm.social.models import ACTION_TYPES, AgentAction, AgentProfile, Scenario, ScenarioAgent, TurnRecord
from swm.state import SocialStep, SocialWorld, is_none
from swm.tasks.families import Task


def to_scenario(task: Task, memory: dict[str, str] | None = None, scenario_id: str | None = None) -> Scenario:
    """Map a task onto the episode graph's `Scenario`; ``memory`` maps a seat to its injected notes."""
    seats = []
    for brief in task.agents:
        first, _, last = brief.name.partition(" ")
        secret = brief.private if task.family == "secret" and brief.role == "keeper" else ""
        goal = brief.goal if secret else " ".join(x for x in (brief.goal, brief.private) if x)
        notes = (memory or {}).get(brief.name, "")
        if notes:
            goal = f"{goal}\n{notes}"
        seats.append(ScenarioAgent(name=brief.name, goal=goal,
                                   profile=AgentProfile(first_name=first, last_name=last, secret=secret)))
    return Scenario(id=scenario_id or task.task_id, scenario=task.scenario, agents=seats, relationship="acquaintance",
                    codename=f"{task.family}-{task.level}", source="swm.lifelong",
                    meta={"family": task.family, "level": task.level, "seed": task.seed})


def _history(steps: list[SocialStep], agent: str) -> str:
    lines = [f"Turn #{i}: {seen}" for i, step in enumerate(steps)
             if not is_none(seen := step.observation_of(agent))]
    return "\n".join(lines) or "(nothing yet: the conversation starts now)"


def agent_prompt(scenario: Scenario, agent: str, steps: list[SocialStep], turn: int,
                 used: dict[str, str] | None = None) -> str:
    """Render the prompt the episode graph's act step shows ``agent`` at ``turn`` (history = ``steps``).

    ``used``: the turn's recorded prompt ids (``{"act": "episode_act@v3", "format": ...}``): the same
    templates are rendered again, whichever order (`SWMContext.act_order`) or versions the run chose;
    without them, the newest ``episode_act`` and ``episode_format``.
    """
    prompt = _template((used or {}).get("act"), "episode_act")
    fmt = _template((used or {}).get("format"), "episode_format").render(
        action_types=", ".join(ACTION_TYPES), participants=", ".join(n for n in scenario.names if n != agent))
    return prompt.render(agent=agent, background=scenario.background_for(agent), history=_history(steps, agent),
                         turn=turn, action_types=", ".join(ACTION_TYPES), format_instructions=fmt, variation="")


def _template(prompt_id: str | None, default: str) -> prompts.Prompt:
    name, _, version = (prompt_id or default).partition("@")
    return prompts.load(name, version or None)


def _predictions(turn: TurnRecord, names: list[str]) -> list[Prediction]:
    if not turn.prediction:
        return []
    try:
        steps = json.loads(turn.prediction)
        world = SocialWorld.from_s3ap({"agents_names": names, "socialized_context": steps[:1]})
    except (ValueError, TypeError):
        return []
    if not world.steps:
        return []
    minds = world.steps[0].mental_states
    return [Prediction(about=a, mental_state=m) for a, m in minds.items() if a != turn.agent and m.strip()]


def _alternatives(turn: TurnRecord) -> list[str]:
    out: list[str] = []
    if turn.intended is not None and turn.intended.argument.strip():
        out.append(turn.intended.argument.strip())
    if turn.candidates:
        try:
            for cand in json.loads(turn.candidates):
                arg = AgentAction.model_validate(cand.get("action") or {}).argument.strip()
                if arg:
                    out.append(arg)
        except (ValueError, TypeError, AttributeError):
            pass
    executed = turn.action.argument.strip()
    return [a for a in dict.fromkeys(out) if a != executed]


def to_record(task: Task, scenario: Scenario, turns: list[TurnRecord], judgements: dict[str, Any] | None,
              judged: str | None = None, **provenance: Any) -> EpisodeRecord:
    """Build the checked `EpisodeRecord` of a finished episode from its turn rows.

    ``judge_goal`` is the judge's goal score (0..10) of seat ``judged`` (default: the first seat).
    """
    steps = [SocialStep.model_validate_json(t.step) for t in turns]
    records = []
    for i, t in enumerate(turns):
        prompt = agent_prompt(scenario, t.agent, steps[:i], t.turn, t.prompts)
        records.append(ActedTurn(index=i, agent=t.agent, action_type=t.action.action_type,
                                  text=t.action.argument, state_key=digest(task.task_id, t.agent, prompt),
                                  prompt=prompt, alternatives=_alternatives(t),
                                  predictions=_predictions(t, scenario.names)))
    record = checked_record(task, records, **provenance)
    goal = ((judgements or {}).get(judged or task.agents[0].name) or {}).get("goal")
    if isinstance(goal, int | float):
        record.judge_goal = float(goal)
    return record


def episode_inputs(scenario: Scenario, *, episode_id: str, policy: str, max_turns: int, judge: bool,
                   tested_agent: str | None = None) -> dict[str, Any]:
    """Return the episode graph's input for ``scenario``: every seat plays ``policy``.

    The loop's judge stays swm's per-agent protocol (its pass gate reads one agent's goal); the
    SOTOPIA benchmark's default is sotopia's own evaluator (`nodes.judge`).
    """
    return {"scenario": scenario.model_dump(mode="json"), "episode_id": episode_id,
            "policies": {n: policy for n in scenario.names}, "max_turns": max_turns, "judge": judge,
            "judge_protocol": "swm", "tested_agent": tested_agent or scenario.names[0]}
