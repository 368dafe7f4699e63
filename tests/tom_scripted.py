"""Scripted replies for the theory-of-mind benchmark tests: a valid parse and a deterministic answer."""

from __future__ import annotations

import re
from typing import Any

from swm.schemas import DirectAnswer, ReasonedAnswer, S3APParse, SocializedStructureForModel

_ACTOR_RE = re.compile(r"^([A-Z][a-z]+) (entered|exited|moved|likes|walked|left)")


def story_of(prompt: str) -> str:
    """The narrative inside a parse prompt or a QA prompt: its first story or narrative fence."""
    fenced = re.search(r'<data name="(?:story|narrative)">\n(.*?)\n</data>', prompt, re.S)
    if fenced is None:
        raise AssertionError(f"no story fence in the prompt: {prompt[:200]!r}")
    return fenced.group(1).strip()


def valid_parse(story: str) -> S3APParse:
    """One step per sentence with an actor, which passes every rule check of validate_s3ap."""
    lines = [line.strip() for line in story.splitlines() if line.strip()]
    acts = [(m[1], line) for line in lines if (m := _ACTOR_RE.match(line))]
    agents = list(dict.fromkeys(a for a, _ in acts))
    steps = []
    for index, (actor, line) in enumerate(acts + [("", "")]):
        last = index == len(acts)
        steps.append(SocializedStructureForModel(
            timestep=str(index), state=" ".join(text for _, text in acts[:index]) or "none",
            observations=[f"{a}: {'none' if index == 0 else '<same_as_state />'}" for a in agents],
            actions=[f"{a}: {line.lower() if a == actor and not last else 'none'}" for a in agents]))
    return S3APParse(agents_names=agents, socialized_context=steps)


def answer_for(prompt: str) -> str:
    """The last container named in the story (right for reality and no-ToM questions)."""
    found = re.findall(r"\b[a-z]+_[a-z]+\b", story_of(prompt))
    return found[-1] if found else "unknown"


def respond(prompt: str, tool: str | None) -> Any:
    if tool == "S3APParse":
        return valid_parse(story_of(prompt))
    if tool == "ReasonedAnswer":
        return ReasonedAnswer(reasoning="scripted", answer=answer_for(prompt))
    if tool == "DirectAnswer":
        return DirectAnswer(answer=answer_for(prompt))
    if tool == "JudgeVerdict":
        from swm.tom.parser_score import JudgeVerdict

        return JudgeVerdict(reasoning="scripted", score=0.5)
    raise AssertionError(f"unexpected tool {tool}")
