"""The theory-of-mind QA node: vanilla, chain-of-thought, S3AP as extra information, S3AP only."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

import prompts
from swm.context import SWMContext
from swm.errors import InputError
from swm.graph_state import SocialWorldState
from swm.llm import call_model
from swm.schemas import DirectAnswer, DirectResponse, ReasonedAnswer, ReasonedResponse

# tasks whose answer is a full text (a meeting summary), not a word or an option
FULL_TEXT_TASKS = ("confaide",)


def extra_info(state: SocialWorldState) -> str:
    """Render the parsed social state for the QA prompt, or say why there is none."""
    world = state.get("world")
    if world is not None:
        return world.to_text()
    problems = "; ".join(state.get("parse_problems") or []) or "unknown"
    return f"(no social state could be parsed: {problems})"


def answer(state: SocialWorldState, runtime: Runtime[SWMContext]) -> dict[str, Any]:
    """Answer the question in the state's mode (one call).

    A task with its own prompt (``qa_<mode>_<task>``, e.g. ConfAIde's) uses it, with the state's
    ``instruction`` (the benchmark's own instruction, outside the data fences); a full-text task
    answers with a response schema instead of a short answer.
    """
    ctx = runtime.context
    question = str(state.get("question") or "").strip()
    if not question:
        raise InputError("the question is empty", "pass the question to answer")
    mode = state.get("mode") or "s3ap"
    task = state.get("task") or ctx.task
    name = f"qa_{mode}_{task}" if f"qa_{mode}_{task}" in prompts.available() else f"qa_{mode}"
    prompt = prompts.load(name, ctx.prompt_version(name))
    values: dict[str, str] = {"question": question}
    if "context" in prompt.placeholders:
        values["context"] = state["narrative"]
    if "extra_info" in prompt.placeholders:
        values["extra_info"] = extra_info(state)
    if "instruction" in prompt.placeholders:
        values["instruction"] = str(state.get("instruction") or "")
    if task in FULL_TEXT_TASKS:
        schema: type[DirectAnswer | ReasonedAnswer | DirectResponse | ReasonedResponse] = (
            DirectResponse if mode == "vanilla" else ReasonedResponse)
    else:
        schema = DirectAnswer if mode == "vanilla" else ReasonedAnswer
    reply = call_model(ctx.model_for("qa"), prompt.render(**values), schema)
    ctx.record_failed_reply("answer", "qa", reply, key=state.get("story_hash") or "")
    value = reply.value
    return {
        "answer": (value.answer.strip() if value is not None else ""),
        "reasoning": getattr(value, "reasoning", "") if value is not None else "",
        "answer_error": reply.error,
        "usage": {"answer": reply.stats},
        "prompts": {"qa": prompt.id},
        "models": {"qa": ctx.spec_for("qa")},
    }
