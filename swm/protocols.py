"""Prompt protocols: which templates the parser and the QA model see.

``paper`` (the default) is the S3AP authors' repository (``XuhuiZhou/social-world-model``) task by
task: its parser prompt (no feedback block on a first attempt, the JSON schema as format
instructions), its QA prompt per benchmark (ToMi's possible answers and "most detailed position",
Hi-ToM's assumptions (1)-(4), FANToM's "characters do not know any other information"), the S3AP
handed to the QA model as indented JSON with its context manual, and ConfAIde's official input
layout with its answer cues. ``swm`` is swm's own task-generic wording, kept as a named variant.
Both fence user-written text against injection. `docs/protocols.md` lists every difference from
the repository's wording and why; `tests/test_paper_prompts.py` holds the snapshot.
"""

from __future__ import annotations

import json
from typing import Any, get_args

from swm import prompts
from swm.context import PromptProtocol, SWMContext

PROTOCOLS: tuple[str, ...] = get_args(PromptProtocol)
# tasks the repository has its own QA template for; others fall back to swm's generic prompts
PAPER_QA_TASKS = ("tomi", "hitom", "mmtom", "fantom", "confaide")
# the swm protocol keeps the task instructions it always sent where the paper's differ
_SWM_PINNED = {"task_mmtom": "v1", "task_confaide": "v1"}
# ConfAIde's official answer cues (skywalker023/confaide eval.py): a question that carries no
# "label: " cue of its own gets "\nAnswer: "
_CUE_FREE = "\nAnswer: "


def version_for(ctx: SWMContext, name: str) -> str | None:
    """Return the version of prompt ``name`` this context renders (None: the newest)."""
    chosen = ctx.prompt_version(name)
    if chosen is None and ctx.prompt_protocol == "swm":
        return _SWM_PINNED.get(name)
    return chosen


def load(ctx: SWMContext, name: str) -> prompts.Prompt:
    """Load prompt ``name`` at the version the context's protocol (or an explicit pin) asks for."""
    return prompts.load(name, version_for(ctx, name))


def parse_prompt_names(ctx: SWMContext, task: str) -> dict[str, str]:
    """Name the parser's templates: the prompt, its format instructions, the task rules, the example."""
    example = f"example_{task}" if f"example_{task}" in prompts.available() else "example_generic"
    if ctx.prompt_protocol == "paper":
        return {"parse": "parse_paper", "s3ap_format": "s3ap_schema", "task": f"task_{task}", "example": example}
    return {"parse": "parse", "s3ap_format": "s3ap_format", "task": f"task_{task}", "example": example}


def qa_prompt_name(ctx: SWMContext, mode: str, task: str) -> str:
    """Name the QA template for a mode and task under the context's protocol."""
    if ctx.prompt_protocol == "paper" and task in PAPER_QA_TASKS:
        if task == "confaide":
            return "qa_paper_s3ap_confaide" if mode == "s3ap" else "qa_paper_confaide"
        return f"qa_paper_direct_{task}" if mode == "vanilla" else f"qa_paper_{task}"
    specific = f"qa_{mode}_{task}"
    return specific if specific in prompts.available() else f"qa_{mode}"


def paper_social_state(s3ap: dict[str, Any], task_instructions: str, manual: prompts.Prompt,
                       schema: prompts.Prompt) -> str:
    """Render an S3AP as the repository hands it to the QA model: indented JSON, then its context manual.

    The manual is the parser's JSON schema (what ``<same_as_state />`` and the other tags mean)
    followed by the task-specific instructions the parse was made with.
    """
    body = json.dumps(s3ap, indent=2, ensure_ascii=False)
    schema_text = json.dumps(json.loads(schema.render()), indent=2)
    return ("### Socialized Context (the analysis of the original context)\n" + body + "\n\n"
            + manual.render(schema=schema_text, task_specific_instructions=task_instructions))


def confaide_paper_question(question: str, cue: str | None) -> str:
    """Return a ConfAIde question with its official answer cue (``\\nSummary: ``, ``\\nAnswer: "``, …)."""
    if cue is not None:
        return question + cue
    return question if ": " in question else question + _CUE_FREE


__all__ = ["PAPER_QA_TASKS", "PROTOCOLS", "confaide_paper_question", "load", "paper_social_state",
           "parse_prompt_names", "qa_prompt_name", "version_for"]
