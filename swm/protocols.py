"""Prompt protocols: which templates the parser and the QA model see.

``paper`` (the default) is the wording the paper prints (its appendix A.4.1: the parser prompt
"Please analyze the following narrative/context." with ``#### Context:`` and ``#### Task specific
instructions:``, and each benchmark's task instructions), and, for what the appendix does not print,
the S3AP authors' repository (``XuhuiZhou/social-world-model``) at the commits where its wording
matches the appendix: the QA prompt per benchmark (ToMi's possible answers and "most detailed
position", Hi-ToM's assumptions (1)-(4), FANToM's "characters do not know any other information"),
the S3AP handed to the QA model as indented JSON with its ``#### Context Manual``, and ConfAIde's
official input layout with its answer cues. ``repo`` is the repository's older wording (the parser
prompt and context manual at 0332906d, MMToM-QA's short rules), which swm sent as ``paper`` before;
``swm`` is swm's own task-generic wording. All three fence user-written text against injection.
`docs/protocols.md` lists the source and commit of every template and every difference;
`tests/test_paper_prompts.py` holds the snapshot.
"""

from __future__ import annotations

import json
from typing import Any, get_args

from swm import prompts
from swm.context import ParseContext, PromptProtocol

PROTOCOLS: tuple[str, ...] = get_args(PromptProtocol)
# the protocols that send the paper's and the repository's templates (the others: swm's own wording)
REPOSITORY = ("paper", "repo")
# tasks the repository has its own QA template for; others fall back to swm's generic prompts
PAPER_QA_TASKS = ("tomi", "hitom", "mmtom", "fantom", "confaide")
# the version each protocol renders where versions differ in source (docs/protocols.md has the commits):
# parse_paper v1 the repository at 0332906d, v2 the appendix (the repository from 25d484cf); s3ap_manual v1
# the repository's manual at 0332906d, v2 its "#### Context Manual" (25d484cf..1bf92947); task_mmtom v1
# the appendix's rules (in no commit of the repository), v2 the repository's short rules (6a663868..1bf92947);
# task_confaide v1 the appendix (the repository from b3d6dd78, 2025-04-02), v2 the repository's sentence of
# 2025-03-22, which no protocol sends now (kept so runs that recorded it still resolve)
PINNED: dict[str, dict[str, str]] = {
    "paper": {"parse_paper": "v2", "s3ap_manual": "v2", "task_mmtom": "v1", "task_confaide": "v1"},
    "repo": {"parse_paper": "v1", "s3ap_manual": "v1", "task_mmtom": "v2", "task_confaide": "v1"},
    "swm": {"task_mmtom": "v1", "task_confaide": "v1"},
}
# the JSON schema each manual explains: the repository's SocializedContext (v2) or SocializedContextForModel (v1)
_MANUAL_SCHEMA = {"v1": "s3ap_schema", "v2": "s3ap_context_schema"}


def from_repository(protocol: str) -> bool:
    """Tell whether a protocol sends the paper's and the repository's templates (``paper``, ``repo``)."""
    return protocol in REPOSITORY
# ConfAIde's official answer cues (skywalker023/confaide eval.py): a question that carries no
# "label: " cue of its own gets "\nAnswer: "
_CUE_FREE = "\nAnswer: "


def version_for(ctx: ParseContext, name: str) -> str | None:
    """Return the version of prompt ``name`` this context renders (None: the newest)."""
    chosen = ctx.prompt_version(name)
    if chosen is None:
        return PINNED.get(ctx.prompt_protocol, {}).get(name)
    return chosen


def load(ctx: ParseContext, name: str) -> prompts.Prompt:
    """Load prompt ``name`` at the version the context's protocol (or an explicit pin) asks for."""
    return prompts.load(name, version_for(ctx, name))


def parse_prompt_names(ctx: ParseContext, task: str) -> dict[str, str]:
    """Name the parser's templates: the prompt, its format instructions, the task rules, the example."""
    example = f"example_{task}" if f"example_{task}" in prompts.available() else "example_generic"
    if from_repository(ctx.prompt_protocol):
        return {"parse": "parse_paper", "s3ap_format": "s3ap_schema", "task": f"task_{task}", "example": example}
    return {"parse": "parse", "s3ap_format": "s3ap_format", "task": f"task_{task}", "example": example}


def qa_prompt_name(ctx: ParseContext, mode: str, task: str) -> str:
    """Name the QA template for a mode and task under the context's protocol."""
    if from_repository(ctx.prompt_protocol) and task in PAPER_QA_TASKS:
        if task == "confaide":
            return "qa_paper_s3ap_confaide" if mode == "s3ap" else "qa_paper_confaide"
        return f"qa_paper_direct_{task}" if mode == "vanilla" else f"qa_paper_{task}"
    specific = f"qa_{mode}_{task}"
    return specific if specific in prompts.available() else f"qa_{mode}"


def manual_prompts(ctx: ParseContext) -> tuple[prompts.Prompt, prompts.Prompt]:
    """Return the context manual the QA model gets with the S3AP, and the JSON schema it explains."""
    manual = load(ctx, "s3ap_manual")
    return manual, prompts.load(_MANUAL_SCHEMA.get(manual.version, "s3ap_schema"))


def prompt_set(ctx: ParseContext, task: str) -> str:
    """Return the ids of the parser, task, manual and QA templates a run under this context sends for a task,
    so that a resumed run can be refused when the protocol's wording changed since it started."""
    names = parse_prompt_names(ctx, task)
    ids = {load(ctx, name).id for key, name in names.items()}
    if from_repository(ctx.prompt_protocol):
        ids.update(p.id for p in manual_prompts(ctx))
    ids.update(load(ctx, qa_prompt_name(ctx, mode, task)).id for mode in ("vanilla", "cot", "s3ap", "s3ap_only"))
    return ",".join(sorted(ids))


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


__all__ = ["PAPER_QA_TASKS", "PINNED", "PROTOCOLS", "REPOSITORY", "confaide_paper_question", "from_repository",
           "load", "manual_prompts", "paper_social_state", "parse_prompt_names", "prompt_set", "qa_prompt_name",
           "version_for"]
