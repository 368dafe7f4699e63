"""Policy updates, each producing a new `PolicyVersion`: memory, sft, dpo, kto; and their exports.

* ``memory`` works with any API model: kept pairs become retrieved exemplars and distilled
  strategy notes per task family and level, injected into the learner's private instructions
  (`memory_text`). Notes are distilled by the agent model (one bounded call per family and
  level, prompt ``lifelong_distill``); a reply that does not fit falls back to notes built from
  the exemplars, and the failure is counted.
* ``sft`` / ``dpo`` / ``kto`` train the policy's weights (`swm.training.trl_update`: a LoRA adapter,
  continued from the incumbent's) on rows exported here in TRL's conversational formats:
  ``messages`` (SFT: behaviour cloning of kept trajectories, as SOTOPIA-π),
  ``prompt``/``chosen``/``rejected`` (DPO) and ``prompt``/``completion``/``label`` (KTO), both
  tracks' pairs. Each completion is the exact output the policy must produce (the act step's
  tool-call arguments), and each row carries family, level, track and margin. The trained
  policy is then served (`swm.lifelong.serve`) and its spec recorded in ``served_as``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from swm import prompts
from swm.errors import InputError
from swm.lifelong.records import EpisodeRecord, PreferencePair
from swm.llm import call_model
from swm.social.models import action_schema_for
from swm.tasks.families import is_game, is_sampled, parse_task_id, task_of_id
from swm.training.stats import TrainStats
from swm.usage import CallStats, add_stats, empty_stats

METHODS = ("memory", "sft", "rs-sft", "dpo", "kto", "ppo")
MAX_EXEMPLARS = 3


class StrategyNotes(BaseModel):
    """Distilled strategy notes for one task family and level."""

    model_config = ConfigDict(extra="forbid")

    notes: list[Annotated[str, StringConstraints(max_length=200)]] = Field(
        max_length=4, description="At most four one-sentence strategy notes.")


class PolicyVersion(BaseModel):
    """A versioned policy: what the learner is told on top of its model, what trained it, how it is served.

    ``memory`` policies carry ``notes``/``exemplars`` for an API model. Trained policies
    (``sft``/``dpo``/``kto``) carry a PEFT LoRA ``adapter`` over ``base_model`` (continued from
    the parent's adapter) with its content hash ``adapter_sha256`` (the adapter's copy in the
    run's store is found by it: `swm.lifelong.artifacts`), its GGUF conversion ``adapter_gguf``
    for llama.cpp, and ``served_as``:
    the model spec the episode graph plays it with (``embedded:lora=…`` or ``<name>@<url>``).
    """

    model_config = ConfigDict(extra="forbid")

    version: str
    parent: str | None = None
    kind: str = "base"
    cycle: int = 0
    notes: dict[str, list[str]] = Field(default_factory=dict)  # "family/level" -> notes
    exemplars: dict[str, list[dict[str, str]]] = Field(default_factory=dict)  # -> [{situation, better, worse}]
    dataset: str | None = None
    checkpoint: str | None = None
    pairs_used: int = 0
    base_model: str | None = None  # the Hugging Face base the adapter was trained on (a dir or GGUF file)
    adapter: str | None = None  # PEFT adapter directory (adapter_config.json + adapter_model.safetensors)
    adapter_sha256: str | None = None  # its content hash, the key of its stored copy (checkpoints.artifacts)
    adapter_gguf: str | None = None  # the adapter as a GGUF LoRA for llama.cpp
    served_as: str | None = None  # the model spec the learner's seats use (None: the run's own models)
    served_check: dict[str, Any] | None = None  # what was verified after the deploy: name, sha256, probe
    train: TrainStats | None = None


def _key(family: str, level: str) -> str:
    return f"{family}/{level}"


def _clip(text: str, n: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _situation(prompt: str) -> str:
    return _clip(prompt.strip().splitlines()[-1] if prompt.strip() else "", 160)


def exemplars_of(pairs: Iterable[PreferencePair]) -> dict[str, list[dict[str, str]]]:
    """Pick the widest-margin action pairs per family and level as exemplars."""
    grouped: dict[str, list[PreferencePair]] = defaultdict(list)
    for p in pairs:
        if p.track == "action":
            grouped[_key(p.family, p.level)].append(p)
    return {k: [{"situation": _situation(p.prompt), "better": _clip(p.chosen), "worse": _clip(p.rejected)}
                for p in sorted(v, key=lambda p: (-p.margin, p.pair_id))[:MAX_EXEMPLARS]]
            for k, v in sorted(grouped.items())}


def fallback_notes(exemplars: Sequence[dict[str, str]]) -> list[str]:
    return [f"Prefer moves like \"{_clip(e['better'], 120)}\" over \"{_clip(e['worse'], 60)}\"."
            for e in exemplars[:2]]


def distill(model: BaseChatModel, family: str, level: str,
            exemplars: Sequence[dict[str, str]]) -> tuple[list[str], CallStats, str | None]:
    """Ask the model for strategy notes from exemplars; fall back to rule-made notes on a bad reply."""
    prompt = prompts.load("lifelong_distill")
    shown = "\n".join(f"- situation: {e['situation']}\n  better: {e['better']}\n  worse: {e['worse']}"
                      for e in exemplars)
    reply = call_model(model, prompt.render(family=family, level=level, pairs=shown), StrategyNotes)
    notes = [n.strip() for n in (reply.value.notes if reply.value is not None else []) if n.strip()]
    return (notes or fallback_notes(exemplars)), reply.stats, reply.error


def memory_update(parent: PolicyVersion, version: str, cycle: int, pairs: Sequence[PreferencePair],
                  model: BaseChatModel | None = None) -> tuple[PolicyVersion, CallStats, list[str]]:
    """Build the next memory policy: the parent's memory, refreshed for families and levels with new pairs."""
    usage = empty_stats()
    errors: list[str] = []
    notes = dict(parent.notes)
    exemplars = dict(parent.exemplars)
    for key, picked in exemplars_of(pairs).items():
        family, level = key.split("/")
        exemplars[key] = picked
        if model is None:
            notes[key] = fallback_notes(picked)
            continue
        distilled, stats, error = distill(model, family, level, picked)
        usage = add_stats(usage, stats)
        notes[key] = distilled
        if error:
            errors.append(f"{key}: {error}")
    policy = PolicyVersion(version=version, parent=parent.version, kind="memory", cycle=cycle, notes=notes,
                    exemplars=exemplars, pairs_used=len(pairs))
    return policy, usage, errors


def memory_text(policy: PolicyVersion | None, family: str, level: str) -> str:
    """Render a policy's memory for one task as text for the learner's instructions ('' when none)."""
    if policy is None or (not policy.notes and not policy.exemplars):
        return ""
    keys = [_key(family, level)] + sorted(k for k in policy.notes if k.startswith(f"{family}/")
                                          and k != _key(family, level))
    notes = [n for k in keys for n in policy.notes.get(k, [])][:6]
    shown = [e for k in keys for e in policy.exemplars.get(k, [])][:MAX_EXEMPLARS]
    if not notes and not shown:
        return ""
    return prompts.load("lifelong_memory").render(
        policy=policy.version,
        notes="\n".join(f"- {n}" for n in notes) or "- (none yet)",
        exemplars="\n".join(f"Example: when {e['situation']!r}, a better move was {e['better']!r} "
                            f"rather than {e['worse']!r}." for e in shown),
    ).strip()


# ---- TRL exports --------------------------------------------------------------------------
# The completion is what the policy must produce: the act step's tool call, i.e. the JSON
# arguments of the action schema (``AgentActionForModel``) that llama.cpp's grammar-constrained
# function call generates after the chat template's assistant header and that vLLM returns as
# ``tool_calls[0].function.arguments``; perception completions are the world model's
# ``PredictedMind`` JSON. The prompt is the single user message the act step sends.
ACTION_TOOL = "AgentActionForModel"
PERCEPTION_TOOL = "PredictedMind"


def action_completion(action_type: str, argument: str) -> str:
    """Render an action as the act step's tool-call arguments (JSON text)."""
    spoken = "" if action_type in ("none", "leave") else argument
    return json.dumps({"action_type": action_type, "argument": spoken, "to": []}, ensure_ascii=False)


def perception_completion(about: str, mental_state: str) -> str:
    """Render a prediction as the world model's ``PredictedMind`` JSON."""
    return json.dumps({"agent": about, "mental_state": mental_state}, ensure_ascii=False)


def completion_of(pair: PreferencePair, side: str) -> str:
    """Return the chosen or rejected side of a pair in the format the policy produces."""
    text = pair.chosen if side == "chosen" else pair.rejected
    if pair.track == "perception":
        return perception_completion(str(pair.context.get("about", "")), text)
    kind = pair.chosen_action_type if side == "chosen" else pair.rejected_action_type
    return action_completion(kind, text)


def act_tools(task_id: str, agent: str) -> str:
    """Return TRL's ``tools`` column for a turn of ``agent``: the act step's tool as JSON text ("null": none).

    An episode-graph turn was answered by calling the action schema bound with the other seats'
    names (`action_schema_for`); a decision or two-turn move was sampled as text and a game move under its own
    move schema, so those carry none. TRL's trainers read a JSON string here (``json.loads``),
    which keeps the column one type across rows whose schemas differ.
    """
    return _act_tools(task_id, agent)


@cache
def _act_tools(task_id: str, agent: str) -> str:
    _, family, level, _, _ = parse_task_id(task_id)
    if is_sampled(level) or is_game(family):
        return "null"
    task = task_of_id(task_id)
    others = tuple(n for n in task.names if n != agent)  # the act step's order: the scenario's seats
    return json.dumps([convert_to_openai_tool(action_schema_for(others))], ensure_ascii=False)


def pair_meta(pair: PreferencePair, side: str = "chosen") -> dict[str, Any]:
    """Metadata columns every pair row carries (TRL ignores extra columns); the same columns as decision rows."""
    action = pair.track == "action"
    return {"family": pair.family, "level": pair.level, "track": pair.track, "cycle": pair.cycle,
            "task_id": pair.task_id, "source": pair.source, "margin": pair.margin, "pair_id": pair.pair_id,
            "episode_id": pair.chosen_episode if side == "chosen" else pair.rejected_episode,
            "tool": ACTION_TOOL if action else PERCEPTION_TOOL,
            "tools": act_tools(pair.task_id, pair.agent) if action else "null"}


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _assistant(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def dpo_rows(pairs: Iterable[PreferencePair]) -> list[dict[str, Any]]:
    """TRL's conversational preference format: prompt / chosen / rejected message lists, plus metadata."""
    return [{"prompt": _user(p.prompt), "chosen": _assistant(completion_of(p, "chosen")),
             "rejected": _assistant(completion_of(p, "rejected")), **pair_meta(p),
             "rejected_episode": p.rejected_episode} for p in pairs]


def kto_rows(pairs: Iterable[PreferencePair]) -> list[dict[str, Any]]:
    """TRL's conversational unpaired format: prompt / completion / label (chosen True, rejected False)."""
    rows: list[dict[str, Any]] = []
    for p in pairs:
        for side, label in (("chosen", True), ("rejected", False)):
            rows.append({"prompt": _user(p.prompt), "completion": _assistant(completion_of(p, side)),
                         "label": label, **pair_meta(p, side)})
    return rows


def sft_rows(episodes: Iterable[EpisodeRecord]) -> list[dict[str, Any]]:
    """Behaviour cloning of kept trajectories: every learner turn as TRL's ``messages`` rows, plus metadata.

    The learner is every seat in self-play (``seat == "all"``), else the episode's tested seat.
    """
    rows: list[dict[str, Any]] = []
    for ep in episodes:
        for turn in ep.turns:
            if ep.seat not in ("all", turn.agent) or not turn.prompt.strip():
                continue
            rows.append({"messages": _user(turn.prompt) + _assistant(action_completion(turn.action_type, turn.text)),
                         "family": ep.family, "level": ep.level, "track": "action", "cycle": ep.cycle,
                         "task_id": ep.task_id, "source": "trajectory", "episode_id": ep.episode_id,
                         "turn": turn.index, "tool": ACTION_TOOL, "tools": act_tools(ep.task_id, turn.agent)})
    return rows


def training_rows(method: str, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn export rows into what the trainer takes (SFT ``messages`` become prompt/completion)."""
    if method != "sft":
        return list(rows)
    return [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in rows]


def export_rows(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write rows as JSONL (one example a line), whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    partial.replace(path)
    return path


def export(pairs: Sequence[PreferencePair], method: str, path: Path) -> Path:
    """Write the pairs as a TRL dataset (JSONL, one example a line) for ``dpo`` or ``kto``."""
    if method not in ("dpo", "kto"):
        raise InputError(f"no pair export format for {method!r}", "use dpo or kto (sft exports episodes: sft_rows)")
    return export_rows(dpo_rows(pairs) if method == "dpo" else kto_rows(pairs), path)
