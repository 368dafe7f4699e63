"""Policy updates: memory (distilled notes, fallback on a bad reply, injection), TRL exports loaded by datasets."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from test_lifelong_gate import pair

from swm.errors import InputError
from swm.lifelong.update import PolicyVersion, StrategyNotes, export, memory_text, memory_update, sft_rows
from swm.testing import ScriptedChatModel


def test_memory_update_distills_notes_per_family_and_level() -> None:
    llm = ScriptedChatModel(replies=[StrategyNotes(notes=["Name a price inside the likely zone early."])])
    parent = PolicyVersion(version="p0")
    pairs = [pair(), pair(chosen="Would $520 work for you?", rejected="No.")]
    policy, stats, errors = memory_update(parent, "p1", 1, pairs, llm)
    assert llm.calls == 1 and stats["calls"] == 1 and errors == []
    assert policy.notes == {"negotiation/easy": ["Name a price inside the likely zone early."]}
    assert len(policy.exemplars["negotiation/easy"]) == 2 and policy.parent == "p0" and policy.pairs_used == 2
    text = memory_text(policy, "negotiation", "easy")
    assert "Name a price inside" in text and "a better move was" in text and "policy p1" in text
    assert memory_text(policy, "secret", "easy") == ""
    assert memory_text(PolicyVersion(version="p0"), "negotiation", "easy") == ""
    # the distillation prompt says what was better and worse
    assert "better: I can offer $500" in llm.prompts[0][1]


def test_a_bad_distillation_reply_falls_back_and_is_recorded() -> None:
    llm = ScriptedChatModel(replies=["I am not calling any tool."])
    policy, stats, errors = memory_update(PolicyVersion(version="p0"), "p1", 1, [pair()], llm)
    assert stats["failures"] == 1 and len(errors) == 1 and errors[0].startswith("negotiation/easy")
    assert policy.notes["negotiation/easy"][0].startswith("Prefer moves like")


def test_perception_pairs_are_not_exemplars() -> None:
    policy, _, _ = memory_update(PolicyVersion(version="p0"), "p1", 1, [pair(track="perception")], None)
    assert policy.exemplars == {} and policy.notes == {}


def test_dpo_and_kto_exports_load_with_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    pairs = [pair(), pair(chosen="Would $520 work?", rejected="No.")]
    dpo = datasets.load_dataset("json", data_files=str(export(pairs, "dpo", tmp_path / "d.jsonl")), split="train")
    assert dpo.column_names[:3] == ["prompt", "chosen", "rejected"] and len(dpo) == 2
    assert {"family", "level", "margin", "track"} <= set(dpo.column_names)
    assert dpo[0]["prompt"] == [{"role": "user", "content": "Ava at turn 0"}]
    assert dpo[0]["family"] == "negotiation" and dpo[0]["track"] == "action" and dpo[0]["margin"] > 0
    kto = datasets.load_dataset("json", data_files=str(export(pairs, "kto", tmp_path / "k.jsonl")), split="train")
    assert kto.column_names[:3] == ["prompt", "completion", "label"] and len(kto) == 4
    assert kto["label"] == [True, False, True, False]
    with pytest.raises(InputError):
        export(pairs, "ppo", tmp_path / "x.jsonl")


def test_completions_are_the_act_steps_tool_call_arguments() -> None:
    from swm.lifelong.update import dpo_rows
    from swm.social.models import AgentActionForModel

    leave = pair(chosen="I can offer $500 for the bike.", rejected="bye").model_copy(
        update={"rejected_action_type": "leave"})
    row = dpo_rows([leave])[0]
    chosen = AgentActionForModel.model_validate_json(row["chosen"][0]["content"])
    rejected = AgentActionForModel.model_validate_json(row["rejected"][0]["content"])
    assert (chosen.action_type, chosen.argument) == ("speak", "I can offer $500 for the bike.")
    assert (rejected.action_type, rejected.argument) == ("leave", "")
    seen = dpo_rows([pair(track="perception").model_copy(update={"context": {"about": "Ben"}})])[0]
    assert seen["chosen"][0]["content"].startswith('{"agent": "Ben", "mental_state": ')
    assert seen["tool"] == "PredictedMind"


def test_sft_export_clones_the_learner_turns_as_messages() -> None:
    from lifelong_helpers import negotiation_task, record

    task = negotiation_task()
    buyer, seller = task.names
    ep = record(task, [(seller, "I can sell it for $500."), (buyer, "Deal at $500.")], "e1",
                action_types=["speak", "speak"]).model_copy(update={"seat": seller})
    rows = sft_rows([ep])
    assert len(rows) == 1 and rows[0]["messages"][0]["role"] == "user"
    said = '{"action_type": "speak", "argument": "I can sell it for $500.", "to": []}'
    assert rows[0]["messages"][1] == {"role": "assistant", "content": said}
    assert rows[0]["family"] == task.family and rows[0]["level"] == task.level
    assert len(sft_rows([ep.model_copy(update={"seat": "all"})])) == 2, "self-play: every seat is the learner"


@pytest.mark.skipif(importlib.util.find_spec("trl") is not None, reason="the [train] extra is installed")
def test_training_without_the_train_extra_says_how_to_install(tmp_path: Path) -> None:
    from swm.training.trl_update import train_adapter

    with pytest.raises(InputError, match=r"\[train\]"):
        train_adapter("dpo", [{"prompt": [], "chosen": [], "rejected": []}], None, tmp_path / "out")
