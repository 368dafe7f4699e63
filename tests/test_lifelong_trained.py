"""The loop trains weights and plays them: a DPO cycle on the tiny Llama, served by runtime LoRA, evaluated by name.

The loopback server stands in for vLLM (``load_lora_adapter`` recorded; unknown model names
answer 404). The base seats follow the scripted negotiators of test_lifelong_graph; a request
for the trained adapter's name says so, which shows which model played each seat.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_lifelong_graph import Agents

from swm.checkpoints import ExperienceStore, sqlite_saver
from swm.context import SWMContext
from swm.graphs import lifelong
from swm.lifelong import store as ls
from swm.social.models import AgentActionForModel
from swm.testing import FakeOpenAIServer

pytest.importorskip("trl", reason="needs the [train] extra")

ADAPTER_SAYS = "I speak through the trained adapter."


def test_a_dpo_cycle_trains_serves_by_name_and_evaluates_the_served_adapter(tiny_gguf_llama: Path,
                                                                          tmp_path: Path) -> None:
    agents = Agents()

    def act(prompt: str, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("model") != "fake":
            return {"action_type": "speak", "argument": ADAPTER_SAYS, "to": []}
        reply = agents(prompt, "AgentActionForModel")
        return reply.model_dump() if isinstance(reply, AgentActionForModel) else dict(reply)

    plan = {"run_id": "tr", "cycles": 1, "levels": ["easy"], "families": ["negotiation"], "episodes_per_level": 2,
            "samples_per_task": 2, "max_turns": 2, "heldout_per_cell": 1, "update": "dpo",
            "hf_model": str(tiny_gguf_llama), "out_dir": str(tmp_path / "out"),
            "train": {"max_steps": 1, "batch_size": 2, "progress": False},
            "verify_served": "identity"}  # the stand-in for vLLM plays no weights: no probe can match them
    db = tmp_path / "run.db"
    store = ExperienceStore(db)
    with FakeOpenAIServer(lora=True, scripts={"AgentActionForModel": act}) as server, sqlite_saver(db) as saver:
        plan["lora_server"] = server.base_url
        config: Any = {"configurable": {"thread_id": "tr"}, "max_concurrency": 2, "recursion_limit": 1000}
        lifelong.build().compile(checkpointer=saver).invoke(
            {"plan": plan}, config, context=SWMContext(model=server.model_spec, store=store))
        stats = server.stats()
    policy = ls.get_policy(store, "tr", "p1")
    assert policy is not None and policy.kind == "dpo" and policy.parent == "p0"
    assert policy.adapter and (Path(policy.adapter) / "adapter_model.safetensors").is_file()
    assert policy.train is not None and policy.train.steps == 1 and policy.train.loss and policy.pairs_used > 0
    name = policy.served_as.split("@")[0] if policy.served_as else ""
    assert policy.served_as == f"{name}@{server.base_url}" and stats["adapters"] == {name: policy.adapter}
    assert policy.served_check is not None and policy.served_check["name"] == name
    assert len(policy.served_check["sha256"]) == 64 and "probe" not in policy.served_check
    rows = list(store.rows("select models from lifelong_episodes where policy_version = 'p1'"))
    assert rows and all(json.loads(r["models"])["agent"] == policy.served_as for r in rows)
    assert stats["by_model"][name] > 0, "the candidate's episodes were played by the adapter, addressed by name"
    said = [t["text"] for r in store.rows("select record from lifelong_episodes where policy_version = 'p1'")
            for t in json.loads(r["record"])["turns"]]
    assert said and set(said) == {ADAPTER_SAYS}
    exported = [json.loads(line) for line in Path(policy.dataset or "").read_text().splitlines()]
    assert exported and all(AgentActionForModel.model_validate_json(r["chosen"][0]["content"]) for r in exported)
