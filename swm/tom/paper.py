"""What a benchmark item becomes under each prompt protocol: the ask graph's inputs.

Under ``paper`` and ``repo`` the question reads as the S3AP repository builds it (``XuhuiZhou/social-world-model``,
``social_world_model/task_modules/``): ToMi's ends with ``Possible answers: <candidates>``
(``tomi.py`` at 0332906d), Hi-ToM's is the question, a newline and the raw ``A. x, B. y`` choices
(``hitom.py`` at 1bf92947); ConfAIde's follows the official ``eval.py`` (skywalker023/confaide at
dfe977e9): the privacy instruction, a blank line, ``Meeting:`` or ``Scenario:``, the text, then the
question ending in its answer cue (``\\nSummary: ``, ``\\nAnswer: "``, …). Under ``swm`` the item's
own question and ConfAIde's bare instruction are sent, as before.
"""

from __future__ import annotations

import json
from typing import Any

from swm.context import SWMContext
from swm.protocols import from_repository
from swm.tom.items import TomItem

_HITOM_LISTED = "\nChoose one of: "


def paper_question(item: TomItem) -> str:
    """Return the question text the repository's QA prompt carries for this item."""
    meta = item.meta or {}
    if item.benchmark in ("tomi", "paratomi"):
        candidates = [str(c) for c in meta.get("candidates") or []]
        return item.question + (f"\n\nPossible answers: {', '.join(candidates)}" if candidates else "")
    if item.benchmark == "hitom" and item.options:
        base = item.question.split(_HITOM_LISTED, 1)[0]
        return base + "\n" + ", ".join(f"{label}. {text}" for label, text in item.options.items())
    if item.benchmark == "confaide":
        return item.question + str(meta.get("cue") or "")
    return item.question


def prompt_protocol_line(ctx: SWMContext, rows: list[dict[str, Any]]) -> str:
    """Say which prompt protocol produced these rows, with the prompt ids they recorded."""
    protocols = sorted({str(r.get("prompt_protocol") or "unrecorded") for r in rows}) or [ctx.prompt_protocol]
    ids: set[str] = set()
    for row in rows:
        recorded = row.get("prompts") or {}
        if isinstance(recorded, str):
            recorded = json.loads(recorded or "{}")
        ids.update(str(v) for k, v in recorded.items() if k != "protocol")
    named = {"paper": "the paper's appendix wording, the S3AP repository's task templates",
             "repo": "the S3AP repository's older wording", "swm": "swm's own wording"}
    head = ", ".join(f"{p} ({named.get(p, 'recorded before protocols were')})" for p in protocols)
    return head + (f"; prompts {', '.join(sorted(ids))}" if ids else "")


def item_inputs(item: TomItem, mode: str, protocol: str) -> dict[str, Any]:
    """Return the ask graph's inputs for one item in one mode under a prompt protocol."""
    meta = item.meta or {}
    inputs: dict[str, Any] = {"narrative": item.story, "question": item.question, "mode": mode, "task": item.task}
    if from_repository(protocol):
        inputs["question"] = paper_question(item)
        if item.benchmark == "confaide":
            lead = f"{meta['instruction']}\n\n" if meta.get("instruction") else ""
            inputs["instruction"] = f"{lead}{meta.get('setting') or 'Meeting'}:"
    elif meta.get("instruction"):  # swm-authored (ConfAIde's privacy prompt), set by the loader
        inputs["instruction"] = meta["instruction"]
    return inputs


__all__ = ["item_inputs", "paper_question", "prompt_protocol_line"]
