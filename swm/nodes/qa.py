"""The theory-of-mind QA node: vanilla, chain-of-thought, S3AP as extra information, S3AP only."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from swm import prompts, protocols
from swm.context import AskContext, ParseContext
from swm.errors import InputError
from swm.graph_state import SocialStateUse, SocialWorldState
from swm.llm import call_model
from swm.schemas import DirectAnswer, DirectResponse, ReasonedAnswer, ReasonedResponse

# tasks whose answer is a full text (a meeting summary), not a word or an option
FULL_TEXT_TASKS = ("confaide",)


def extra_info(state: SocialWorldState, ctx: ParseContext | None = None) -> str:
    """Render the parsed social state for the QA prompt, or say why there is none.

    Under the paper and repo protocols it is the repository's rendering (indented S3AP JSON, then
    the context manual: the schema that explains the tags and the task instructions, in the
    protocol's wording); under swm's, the compact S3AP JSON.
    """
    world = state.get("world")
    if world is None:
        problems = "; ".join(state.get("parse_problems") or []) or "unknown"
        return f"(no social state could be parsed: {problems})"
    if ctx is None or not protocols.from_repository(ctx.prompt_protocol):
        return str(world.to_text())
    task = state.get("task") or ctx.task
    manual, schema = protocols.manual_prompts(ctx)
    return protocols.paper_social_state(world.to_s3ap(), protocols.load(ctx, f"task_{task}").render().strip(),
                                        manual, schema)


def _values(prompt: prompts.Prompt, state: SocialWorldState, ctx: ParseContext, mode: str,
            question: str) -> dict[str, str]:
    """Fill a QA template; the paper's templates put the S3AP in the story's place in s3ap_only mode."""
    values: dict[str, str] = {"question": question}
    paper = prompt.name.startswith("qa_paper")
    social = extra_info(state, ctx) if mode in ("s3ap", "s3ap_only") else ""
    if "context" in prompt.placeholders:
        values["context"] = social if paper and mode == "s3ap_only" else state["narrative"]
    if "extra_info" in prompt.placeholders:
        values["extra_info"] = "" if paper and mode != "s3ap" else social
    if "instruction" in prompt.placeholders:
        values["instruction"] = str(state.get("instruction") or "")
    return values


def _manual_ids(ctx: ParseContext, prompt: prompts.Prompt, mode: str) -> dict[str, str]:
    if (not protocols.from_repository(ctx.prompt_protocol) or mode not in ("s3ap", "s3ap_only")
            or not prompt.name.startswith("qa_paper")):
        return {}
    manual, schema = protocols.manual_prompts(ctx)
    return {"qa_manual": manual.id, "qa_schema": schema.id}


def state_use(state: SocialWorldState, mode: str) -> SocialStateUse:
    """Say what the answer stands on (`SocialStateUse`): ``parsed`` or ``cached`` (a parse that passed its
    check), ``failed check`` (the best of the attempts, each of which failed it), ``none`` (no usable parse)
    or ``not used``."""
    if mode not in ("s3ap", "s3ap_only"):
        return "not used"
    if state.get("world") is None:
        return "none"
    report = state.get("report")
    if report is not None and not report.ok:
        return "failed check"
    return "cached" if state.get("parse_cached") else "parsed"


def answer(state: SocialWorldState, runtime: Runtime[AskContext]) -> dict[str, Any]:
    """Answer the question in the state's mode (one call).

    The template is the protocol's (`swm.protocols.qa_prompt_name`): under ``paper`` the S3AP
    repository's per benchmark, under ``swm`` a task's own (``qa_<mode>_<task>``, e.g. ConfAIde's)
    or the generic one. The state's ``instruction`` (the benchmark's own instruction) stands outside
    the data fences; a full-text task answers with a response schema instead of a short answer.

    An S3AP mode whose story could not be parsed answers from the story alone only when the context
    allows it (``allow_without_state``); otherwise no call is made and the answer stays empty. A parse
    that failed its check on every attempt is used as it is, and said: the output's ``social_state``
    says which (`state_use`).
    """
    ctx = runtime.context
    # kept as given: a benchmark's answer cue ends the question, trailing space included (ConfAIde's "Summary: ")
    question = str(state.get("question") or "")
    if not question.strip():
        raise InputError("the question is empty", "pass the question to answer")
    mode = state.get("mode") or "s3ap"
    used = state_use(state, mode)
    if used == "none" and not ctx.allow_without_state:
        problems = "; ".join(state.get("parse_problems") or []) or "no reply could be read"
        return {"answer": "", "reasoning": "", "social_state": used,
                "answer_error": f"not answered: no social state could be parsed ({problems})"}
    task = state.get("task") or ctx.task
    prompt = protocols.load(ctx, protocols.qa_prompt_name(ctx, mode, task))
    values = _values(prompt, state, ctx, mode, question)
    if task in FULL_TEXT_TASKS:
        schema: type[DirectAnswer | ReasonedAnswer | DirectResponse | ReasonedResponse] = (
            DirectResponse if mode == "vanilla" else ReasonedResponse)
    else:
        schema = DirectAnswer if mode == "vanilla" else ReasonedAnswer
    reply = call_model(ctx.model_for("qa"), prompt.render(**values), schema)
    ctx.record_failed_reply("answer", "qa", reply, key=state.get("story_hash") or "")
    value = reply.value
    return {
        # the reply as the model gave it: FANToM's official reader parses unstripped text ("  yes" is unparsable)
        "answer": (value.answer if value is not None else ""),
        "reasoning": getattr(value, "reasoning", "") if value is not None else "",
        "answer_error": reply.error,
        "social_state": used,
        "usage": {"answer": reply.stats},
        "prompts": {"qa": prompt.id, "protocol": ctx.prompt_protocol, **_manual_ids(ctx, prompt, mode)},
        "models": {"qa": ctx.spec_for("qa")},
    }
