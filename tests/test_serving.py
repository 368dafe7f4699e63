"""Serving policy versions over real loopback HTTP: runtime LoRA loading, and the learner seats' model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swm.context import SWMContext
from swm.errors import ModelUnavailable
from swm.graphs import episode
from swm.lifelong.episodes import learner_context, run_episode
from swm.lifelong.serve import lora_name, policy_spec, runtime_lora_spec
from swm.lifelong.update import PolicyVersion
from swm.serving.runtime_lora import load_lora_adapter
from swm.serving.verify import ServedMismatch, adapter_sha256
from swm.tasks.families import synthesize
from swm.testing import FakeOpenAIServer


def _policy(tmp_path: Path, version: str = "p1") -> PolicyVersion:
    adapter = tmp_path / version / "adapter"
    adapter.mkdir(parents=True)
    return PolicyVersion(version=version, parent="p0", kind="dpo", cycle=1, adapter=str(adapter))


def test_a_policy_is_loaded_by_name_and_plays_the_learner_seat(tmp_path: Path) -> None:
    with FakeOpenAIServer(lora=True) as server:
        policy = _policy(tmp_path)
        spec = runtime_lora_spec(policy, server.base_url, run_id="r")
        name = spec.split("@")[0]
        assert server.stats()["adapters"] == {name: policy.adapter}
        policy = policy.model_copy(update={"served_as": spec})
        assert runtime_lora_spec(policy, server.base_url, run_id="r") == spec, "loading twice is harmless"

        ctx = SWMContext(model=server.model_spec)
        task = synthesize("negotiation", "easy", 3)
        played = learner_context(ctx, policy, self_play=False)
        assert played.store is ctx.experience_store() and played.spec_for("judge") == server.model_spec
        graph = episode.build().compile(checkpointer=False)
        record, _ = run_episode(graph, task, played, episode_id="e1", memory={}, policy="plain", max_turns=2,
                                judge=False, tested_agent=task.names[0])
    by_model = server.stats()["by_model"]
    assert record.models["agent"] == spec and record.models["partner"] == server.model_spec
    assert by_model[name] == 1 and by_model["fake"] == 1, "the tested seat spoke through the adapter, the other not"


def test_a_restarted_server_gets_the_adapter_again(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    with FakeOpenAIServer(lora=True) as first:
        served = policy.model_copy(update={"served_as": runtime_lora_spec(policy, first.base_url, "r2")})
    with FakeOpenAIServer(lora=True) as second:
        moved = served.model_copy(update={"served_as": served.served_as.split("@")[0] + "@" + second.base_url})
        assert policy_spec(moved) == moved.served_as
        assert second.stats()["adapters"] == {moved.served_as.split("@")[0]: policy.adapter}


def test_a_name_loaded_again_must_hold_the_recorded_adapter(tmp_path: Path) -> None:
    """A restarted server that already holds the policy's name with other weights is refused when it is loaded again."""
    policy = _policy(tmp_path)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        (Path(str(policy.adapter)) / name).write_text(f"{name} of p1")
    policy = policy.model_copy(update={"adapter_sha256": adapter_sha256(Path(str(policy.adapter)))})
    other = tmp_path / "other"
    shutil.copytree(str(policy.adapter), other)
    (other / "adapter_config.json").write_text("another adapter")
    name = lora_name(policy, "r4")
    with FakeOpenAIServer(lora=True) as good:
        assert policy_spec(policy.model_copy(update={"served_as": f"{name}@{good.base_url}"}))
    with FakeOpenAIServer(lora=True) as stale:
        load_lora_adapter(stale.base_url, name, str(other))
        with pytest.raises(ServedMismatch, match="whose content is not the trained adapter's"):
            policy_spec(policy.model_copy(update={"served_as": f"{name}@{stale.base_url}"}))


def test_a_server_without_runtime_lora_gets_a_one_line_error(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server, pytest.raises(ModelUnavailable) as caught:
        runtime_lora_spec(_policy(tmp_path), server.base_url, run_id="r3")
    text = caught.value.one_line()
    assert "\n" not in text and "cannot load LoRA adapters" in text and "--enable-lora" in text


def test_base_and_memory_policies_keep_the_run_models() -> None:
    ctx = SWMContext(model="fake@http://127.0.0.1:9/v1")
    assert policy_spec(None) is None and policy_spec(PolicyVersion(version="p1", kind="memory")) is None
    assert learner_context(ctx, PolicyVersion(version="p0"), self_play=True) is ctx
