"""Score a parser's S3AP against a gold S3AP with no LLM: structure and observation fidelity.

``overall = 0.3 × structural + 0.7 × observation`` (the paper's appendix A.3 weights).

* **structural** is `swm.state.validate_s3ap`'s score (appendix A.3 step 1), with the gold
  agents as the expected agents.
* **observation** is exact and deterministic. For every gold event e (an entry, an exit, a move
  of the object, the statement of where the object is) and every gold agent a, the gold says
  whether a witnessed e (`swm.tom.simulator` defines who does). The parse *says a observed e*
  when a's observation, with tags expanded (`SocialWorld.expand_tags`) and its mental state
  left out, at e's observation step in the parse is not ``none`` and mentions one of e's key
  terms (normalised: case, ``_``/``-`` and articles ignored): for an entry or exit the room or
  the actor's name, for a move the destination container, for a ``place`` statement its
  container; an actor's own entry or exit needs only a non-``none`` observation. The score is
  the fraction of (agent, event) pairs where the parse agrees with the gold.

  e's observation step in the parse: an action event is *anchored* at the first parse step, at
  or after the previous action's anchor, where the actor's action (name matched by
  `SocialWorld.resolve_agent`) mentions the key term (entries and exits also match a verb of
  entering or leaving); it is observed at the next step, as in S3AP every step's observations
  come before its actions. A ``place`` statement is observed where the action before it is.
  An event the parse never represents is observed by nobody, so it costs one point per
  witness. Different numbers of steps, paraphrased actions and either S3AP form are all fine.

`judge_observation` is the paper's LLM-judge variant (A.3 step 2), for data with no gold events.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swm import prompts
from swm.context import SWMContext
from swm.llm import call_model
from swm.schemas import Reasoning
from swm.state import SocialWorld, is_none
from swm.tom.scoring import normalise
from swm.tom.simulator import Event, SimStory
from swm.validation import validate_s3ap

STRUCTURAL_WEIGHT = 0.3
OBSERVATION_WEIGHT = 0.7
_ENTER_WORDS = re.compile(r"\b(enter|enters|entered|entering|come|comes|came|arrive|arrives|arrived|step|steps"
                          r"|stepped|walk|walks|walked)\b")
_EXIT_WORDS = re.compile(r"\b(exit|exits|exited|exiting|leave|leaves|left|leaving|out|goes|went)\b")


@dataclass
class ParseScore:
    """One parse's scores and the (agent, event) pairs it got wrong."""

    structural: float
    observation: float
    overall: float
    pairs: int
    wrong: list[str] = field(default_factory=list)
    unanchored: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"structural": round(self.structural, 6), "observation": round(self.observation, 6),
                "overall": round(self.overall, 6), "pairs": self.pairs, "wrong": self.wrong,
                "unanchored": self.unanchored}


def _mentions(text: str, terms: list[str]) -> bool:
    haystack = f" {normalise(text)} "
    return any(t and f" {normalise(t)} " in haystack for t in terms)


def _describe(e: Event) -> str:
    if e.kind == "move":
        return f"{e.actor} moves it to the {e.container}"
    if e.kind == "place":
        return f"it is in the {e.container}"
    return f"{e.actor} {e.kind}s the {e.room}"


def _anchor(world: SocialWorld, event: Event, start: int) -> int | None:
    actor = world.resolve_agent(event.actor or "")
    if actor is None:
        return None
    for index in range(start, len(world.steps)):
        action = world.steps[index].actions.get(actor, "none")
        if is_none(action):
            continue
        text = normalise(action)
        if event.kind == "move" and _mentions(action, [event.container or ""]):
            return index
        if event.kind == "enter" and (_mentions(action, [event.room or ""]) or _ENTER_WORDS.search(text)) \
                and not _EXIT_WORDS.search(text):
            return index
        if event.kind == "exit" and (_EXIT_WORDS.search(text) or
                                     (_mentions(action, [event.room or ""]) and not _ENTER_WORDS.search(text))):
            return index
    return None


def observation_fidelity(parse: object, events: list[Event], agents: list[str]
                         ) -> tuple[float, int, list[str], list[str]]:
    """Return (score, pairs, wrong pairs, unanchored events) of a parse against gold events."""
    try:
        world = SocialWorld.from_s3ap(parse, agents=agents).expand_tags()
    except (ValueError, TypeError):
        world = SocialWorld(agents=list(agents), steps=[])
    wrong: list[str] = []
    unanchored: list[str] = []
    agree = pairs = 0
    last_anchor = 0
    last_obs_step: int | None = 0  # a place statement before any action is seen at step 0
    for event in events:
        if event.kind == "place":
            obs_step = last_obs_step
        else:
            anchor = _anchor(world, event, last_anchor)
            if anchor is None:
                unanchored.append(_describe(event))
                obs_step = None
            else:
                last_anchor = anchor
                obs_step = anchor + 1
            last_obs_step = obs_step
        for agent in agents:
            said = False
            if obs_step is not None and obs_step < len(world.steps):
                text = world.steps[obs_step].observations.get(agent, "none")
                if not is_none(text):
                    own = event.kind in ("enter", "exit") and agent == event.actor
                    said = own or _mentions(text, event.key_terms())
            truth = agent in event.witnesses
            pairs += 1
            if said == truth:
                agree += 1
            else:
                wrong.append(f"{agent} {'should' if truth else 'should not'} observe: {_describe(event)}")
    return (agree / pairs if pairs else 0.0), pairs, wrong, unanchored


def score_parse(parse: object, story: SimStory) -> ParseScore:
    """Score a parse (either S3AP form, a `SocialWorld`, or None) against a simulated story's gold."""
    if parse is None:
        return ParseScore(structural=0.0, observation=0.0, overall=0.0, pairs=0, wrong=["no parse"])
    if isinstance(parse, SocialWorld):
        parse = parse.to_s3ap()
    structural = validate_s3ap(parse, expected_agents=story.agents).structural_score
    observation, pairs, wrong, unanchored = observation_fidelity(parse, story.events, story.agents)
    overall = STRUCTURAL_WEIGHT * structural + OBSERVATION_WEIGHT * observation
    return ParseScore(structural=structural, observation=observation, overall=overall, pairs=pairs, wrong=wrong,
                      unanchored=unanchored)


# ---- corruptions: what a bad parser does ------------------------------------------------------
CORRUPTIONS = ("leak", "blind", "merge", "drop_actions")


def corrupt(story: SimStory, how: str, seed: int = 0) -> dict[str, Any] | None:
    """Return the story's gold S3AP with one kind of mistake (None where it cannot have it).

    ``leak``: an agent absent for an event observes it anyway (it is shown the scene after it
    left); ``blind``: a witness observes ``none``; ``merge``: two consecutive steps are fused
    (the second's actions lost); ``drop_actions``: one step loses its ``actions`` field.
    """

    rng = random.Random(seed)
    raw = json.loads(json.dumps(story.gold_s3ap()))
    steps = raw["socialized_context"]
    if how == "leak":
        candidates = [(e, a) for e in story.events for a in story.agents
                      if a not in e.witnesses and e.kind in ("move", "place", "enter") and e.step < len(steps)]
        if not candidates:
            candidates = [(e, a) for e in story.events for a in story.agents if a not in e.witnesses]
        if not candidates:
            return None  # every agent saw every event: there is nothing to leak
        for event, agent in rng.sample(candidates, min(2, len(candidates))):
            obs = steps[event.step]["observations"]
            obs[agent] = f"<same_as_state /> {obs.get(agent, 'none') if obs.get(agent) != 'none' else ''}".strip()
    elif how == "blind":
        witnessed = [(e, a) for e in story.events for a in e.witnesses if e.step < len(steps)]
        for event, agent in rng.sample(witnessed, min(2, len(witnessed))):
            steps[event.step]["observations"][agent] = "none"
    elif how == "merge":
        index = rng.randrange(1, len(steps) - 1) if len(steps) > 2 else 0
        del steps[index]
    elif how == "drop_actions":
        steps[rng.randrange(0, max(1, len(steps) - 1))].pop("actions", None)
    else:
        raise ValueError(f"unknown corruption {how!r}; use one of {', '.join(CORRUPTIONS)}")
    return raw


# ---- the LLM-judge variant (appendix A.3 step 2) -----------------------------------------------
class JudgeVerdict(BaseModel):
    """The judge's rating of a parse's observation accuracy."""

    model_config = ConfigDict(extra="forbid")

    reasoning: Reasoning = Field(description="A brief rationale.")
    score: float = Field(ge=0.0, le=1.0, description="Observation accuracy in [0, 1].")


def judge_observation(ctx: SWMContext, story: str, generated: object, reference: object = None,
                      question: str = "") -> dict[str, Any]:
    """Ask the judge model to rate observation accuracy (one call); returns score, reasoning, usage.

    With a ``reference`` (a gold S3AP) the judge compares against it, as in the paper; without
    one it rates the parse against the story alone. A reply that does not fit the schema gives
    ``score`` None and the error, never a silent zero.
    """

    prompt = prompts.load("parse_judge", ctx.prompt_version("parse_judge"))
    text = prompt.render(story=story, question=question or "(none given)",
                         reference=json.dumps(reference, ensure_ascii=False) if reference is not None else
                         "(no reference: judge against the story alone)",
                         generated=json.dumps(generated, ensure_ascii=False))
    reply = call_model(ctx.model_for("judge"), text, JudgeVerdict)
    value = reply.value
    return {"score": value.score if value is not None else None,
            "reasoning": value.reasoning if value is not None else "", "error": reply.error,
            "usage": reply.stats, "prompt": prompt.id}


def combined(structural: float, observation: float) -> float:
    """Return 0.3 × structural + 0.7 × observation."""
    return STRUCTURAL_WEIGHT * structural + OBSERVATION_WEIGHT * observation
