"""Parse nodes: turn a narrative into a `SocialWorld`, check it, and repair it with feedback.

Wiring (in `graphs/parse.py` and `graphs/ask.py`): ``prepare`` → ``parse`` → ``check`` → back to
``parse`` with the problems as feedback, at most ``max_parse_attempts`` times. A repair is sampled
apart from the attempt it repairs (`ParseContext.repair_sampling`: another temperature and seed), and
a repair whose parse repeats an earlier attempt's ends the loop, as another call would cost as much
for as little. Each call is logged in ``parse_attempts`` (its sampling, tokens, seconds and what the
check found). The best parse so far is kept with its problems listed. Finished parses are cached in
the experience store by the story's hash, the parser model, the prompt version and the task, so a
second question about the same story costs no parse call.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, cast

from langgraph.runtime import Runtime

from swm import prompts, protocols
from swm.context import ParseContext, ParseT
from swm.defaults import MODES as MODES  # re-exported: swm.nodes.parse.MODES
from swm.defaults import NEEDS_PARSE as NEEDS_PARSE  # re-exported
from swm.defaults import PARSE_TASKS
from swm.errors import InputError
from swm.graph_state import ParseAttempt, SocialWorldState, story_hash
from swm.llm import call_model
from swm.schemas import MAX_STEPS, s3ap_parse_schema
from swm.state import Issue, SocialWorld, ValidationReport, agent_key
from swm.validation import validate_s3ap

TASKS = PARSE_TASKS


def check_narrative(narrative: object, max_chars: int) -> str:
    """Return the narrative or raise an `InputError` saying what to do."""
    if not isinstance(narrative, str) or not narrative.strip():
        raise InputError("the narrative is empty", "pass a story with at least one sentence")
    if len(narrative) > max_chars:
        raise InputError(f"the narrative has {len(narrative):,} characters, over the limit of {max_chars:,}",
                         "split it, or raise ParseContext.max_narrative_chars / --max-chars")
    return narrative


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n+")


def sentences_in(narrative: str) -> int:
    """Count the narrative's sentences: pieces ended by ``.``, ``!`` or ``?`` before a space, or by a line break,
    that hold a letter or digit (an abbreviation's period counts one more, which only loosens a bound)."""
    return sum(1 for piece in _SENTENCE_END.split(narrative) if re.search(r"\w", piece))


def max_timesteps(narrative: str, steps_per_sentence: int) -> int:
    """The most timesteps a parse of ``narrative`` may have: ``steps_per_sentence`` a sentence (0: `MAX_STEPS`)."""
    if steps_per_sentence <= 0:
        return MAX_STEPS
    return max(1, min(MAX_STEPS, steps_per_sentence * sentences_in(narrative)))


def _parse_prompt_ids(ctx: ParseContext, task: str) -> dict[str, str]:
    names = protocols.parse_prompt_names(ctx, task)
    ids = {key: protocols.load(ctx, name).id for key, name in names.items()}
    ids["feedback"] = protocols.load(ctx, "parse_feedback").id
    return ids


def problems_of(report: ValidationReport) -> list[str]:
    """List a report's issues as ``severity: message`` lines."""
    return [f"{i.severity}: {i}" for i in report.issues]


def _cache_key(digest: str, parser: str, prompt_ids: dict[str, str], task: str, steps_per_sentence: int) -> str:
    # the default bound keeps the keys of parses cached before it was set (their parses stay valid)
    bound = [steps_per_sentence] if steps_per_sentence != 1 else []
    material = json.dumps([digest, parser, sorted(prompt_ids.values()), task, *bound])
    return hashlib.sha256(material.encode()).hexdigest()


def prepare(state: SocialWorldState, runtime: Runtime[ParseT]) -> dict[str, Any]:
    """Check the input, and load the story's parse from the cache when there is one."""
    ctx = runtime.context
    narrative = check_narrative(state.get("narrative"), ctx.max_narrative_chars)
    if "question" in state and not str(state.get("question") or "").strip():
        raise InputError("the question is empty", "pass --question with the question to answer")
    mode = state.get("mode") or "s3ap"
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}", f"use one of {', '.join(MODES)}")
    task = state.get("task") or ctx.task
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}", f"use one of {', '.join(TASKS)}")
    digest = story_hash(narrative)
    update: dict[str, Any] = {"story_hash": digest, "task": task, "mode": mode}
    if mode not in NEEDS_PARSE and "question" in state:
        return update
    prompt_ids = _parse_prompt_ids(ctx, task)
    key = _cache_key(digest, ctx.spec_for("parser"), prompt_ids, task, ctx.steps_per_sentence)
    cached = ctx.experience_store().get_parse(key)
    if cached is None:
        return {**update, "parse_cached": False, "parse_done": False, "attempts": 0, "world": None,
                "report": None, "feedback": "", "parse_attempts": []}
    report = ValidationReport.model_validate(cached["report"])
    return {**update, "parse_cached": True, "parse_done": True, "attempts": 0, "parse_attempts": [],
            "world": SocialWorld.from_s3ap(cached["s3ap"]), "report": report, "parse_problems": problems_of(report),
            "prompts": {**prompt_ids, "protocol": ctx.prompt_protocol}, "models": {"parser": cached["parser"]}}


def parse(state: SocialWorldState, runtime: Runtime[ParseT]) -> dict[str, Any]:
    """Ask the parser model for the story's S3AP (one call)."""
    ctx = runtime.context
    task = state.get("task") or ctx.task
    ids = _parse_prompt_ids(ctx, task)
    loaded = {k: prompts.load(*v.split("@")) for k, v in ids.items()}
    feedback = state.get("feedback") or ""
    # as the S3AP repository does, a first attempt carries no feedback block at all
    text = loaded["parse"].render(
        context=state["narrative"],
        task_specific_instructions=loaded["task"].render().strip(),
        example_analysis=loaded["example"].render().strip(),
        feedback=loaded["feedback"].render(feedback=feedback) if feedback else "",
        format_instructions=loaded["s3ap_format"].render(),
    )
    schema = s3ap_parse_schema(max_timesteps(state["narrative"], ctx.steps_per_sentence))
    model = ctx.model_for("parser")
    attempt = state.get("attempts", 0) + 1
    settings = ctx.repair_sampling(model, attempt - 1)
    reply = call_model(model, text, schema, settings)
    ctx.record_failed_reply("parse", "parser", reply, key=state.get("story_hash") or "")
    candidate = reply.value.model_dump() if reply.value is not None else None
    own = getattr(model, "temperature", None)
    logged = ParseAttempt(attempt=attempt, temperature=settings.get("temperature", own if isinstance(
        own, int | float) else None), seed=settings.get("seed"), prompt_tokens=reply.stats["prompt_tokens"],
        completion_tokens=reply.stats["completion_tokens"], seconds=round(reply.stats["seconds"], 3))
    return {"candidate": candidate, "candidate_error": reply.error, "attempts": attempt,
            "parse_attempts": [*(state.get("parse_attempts") or []), logged],
            "usage": {"parse": reply.stats}, "prompts": {**ids, "protocol": ctx.prompt_protocol},
            "models": {"parser": ctx.spec_for("parser")}}


def _folded(value: object) -> object:
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, dict):
        return {str(k): _folded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_folded(v) for v in value]
    return value


def parse_digest(candidate: dict[str, Any] | None) -> str:
    """Return a short digest of a reply's S3AP with its whitespace folded ("" when there is none): equal
    digests are the same parse, however the model spaced it."""
    if candidate is None:
        return ""
    text = json.dumps(_folded(candidate), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _agents_not_in(narrative: str, names: list[str]) -> list[str]:
    flat = agent_key(narrative)
    words = {agent_key(w) for w in re.findall(r"[\w'-]+", narrative)}
    return [n for n in names if agent_key(n) not in words and agent_key(n) not in flat]


def _rank(world: SocialWorld | None, report: ValidationReport | None) -> tuple[int, int, float]:
    if world is None or report is None:
        return (0, 0, 0.0)
    return (1, -len(report.errors), report.structural_score)


def check(state: SocialWorldState, runtime: Runtime[ParseT]) -> dict[str, Any]:
    """Validate the latest candidate, keep the best parse so far, and write the feedback."""
    ctx = runtime.context
    candidate = state.get("candidate")
    world: SocialWorld | None = None
    if candidate is None:
        report = ValidationReport(structural_score=0.0, issues=[Issue(
            code="malformed", message=f"the reply was not valid S3AP JSON: {state.get('candidate_error')}")])
    else:
        report = validate_s3ap(candidate)
        stray = _agents_not_in(state["narrative"], candidate.get("agents_names", []))
        report.issues += [Issue(code="agent_not_in_narrative", agent=n,
                                message=f"agent {n!r} does not appear in the narrative") for n in stray]
        try:
            world = SocialWorld.from_s3ap(candidate)
        except ValueError as exc:
            report.issues.append(Issue(code="malformed", message=str(exc)))
    update: dict[str, Any] = {}
    if _rank(world, report) > _rank(state.get("world"), state.get("report")) or state.get("report") is None:
        update.update(world=world, report=report)
    best_world = update.get("world", state.get("world"))
    best_report: ValidationReport = update.get("report", state.get("report")) or report
    *earlier, last = state.get("parse_attempts") or [ParseAttempt(attempt=state.get("attempts", 0))]
    digest = parse_digest(candidate)
    repeats = next((a.get("attempt") for a in earlier if digest and a.get("digest") == digest), None)
    checked = ParseAttempt(digest=digest, errors=len(report.errors), repeats=repeats,
                           first_problem=str(report.errors[0]) if report.errors else "")
    update["parse_attempts"] = [*earlier, cast(ParseAttempt, {**last, **checked})]
    done = report.ok or repeats is not None or state.get("attempts", 0) >= ctx.max_parse_attempts
    if not done:
        previous = json.dumps(candidate, ensure_ascii=False)[:4000] if candidate else "(no valid JSON)"
        update["feedback"] = f"Previous attempt:\n{previous}\nIssues:\n{report.feedback()}"
        update["parse_done"] = False
        return update
    update["parse_problems"] = problems_of(best_report)
    if best_world is not None:
        ids = _parse_prompt_ids(ctx, state.get("task") or ctx.task)
        ctx.experience_store().put_parse(
            _cache_key(state["story_hash"], ctx.spec_for("parser"), ids, state.get("task") or ctx.task,
                       ctx.steps_per_sentence),
            story_hash=state["story_hash"], parser=ctx.spec_for("parser"), prompt=ids["parse"],
            task=state.get("task") or ctx.task, s3ap=best_world.to_s3ap(), report=best_report.model_dump(),
            attempts=state.get("attempts", 0))
    update.update(candidate=None, parse_done=True)
    return update


def after_check(state: SocialWorldState) -> str:
    """Route: back to ``parse`` with the feedback until the parse is done."""
    return "done" if state.get("parse_done") else "parse"


def after_prepare(state: SocialWorldState) -> str:
    """Route: to ``parse`` unless the mode needs no parse or the parse came from the cache."""
    if state.get("mode") not in NEEDS_PARSE and "question" in state:
        return "skip"
    return "skip" if state.get("parse_done") else "parse"
