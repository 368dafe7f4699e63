"""Trained adapters live where the run's state lives: a deleted ``--out``, or another machine, loses nothing.

A DPO run on the tiny Llama (served by runtime LoRA on the loopback stand-in for vLLM, as in
test_lifelong_trained) stops after cycle 1 trained and deployed p1; its ``--out`` is deleted and
``swm learn`` resumes the thread from another folder (on PostgreSQL, the stand-in for another
machine). Cycle 2 plays under p1 restored from the store with its recorded hash and trains p2 from
it; no model call is paid twice. A changed copy or a damaged stored copy is one line, exit 2; a
changed ``--lora-server`` or ``--train-*`` setting is refused with the differences. An embedded
(llama.cpp) adapter restored from the store is served from a GGUF converted from the recorded content.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_lifelong_graph import Agents

from swm.checkpoints import open_saver, open_store
from swm.checkpoints.artifacts import TABLE, ArtifactCorrupt
from swm.cli import main
from swm.context import SWMContext
from swm.graphs import lifelong
from swm.lifelong import store as ls
from swm.lifelong.artifacts import content_hash, local_adapter
from swm.lifelong.plan import LifelongPlan
from swm.social.models import AgentActionForModel
from swm.testing import FakeOpenAIServer

pytest.importorskip("trl", reason="needs the [train] extra")

PLAN: dict[str, Any] = {"cycles": 2, "levels": ["easy"], "families": ["negotiation"], "episodes_per_level": 2,
                        "samples_per_task": 2, "max_turns": 2, "heldout_per_cell": 1, "update": "dpo",
                        "gate_alpha": 0.0,  # every candidate is deployed: cycle 2 plays under p1
                        "train": {"max_steps": 1, "batch_size": 2, "progress": False},
                        "verify_served": "identity"}  # the stand-in for vLLM plays no weights


def _act(agents: Agents) -> Any:
    def act(prompt: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = agents(prompt, "AgentActionForModel")
        return reply.model_dump() if isinstance(reply, AgentActionForModel) else dict(reply)

    return act


def _train_cycle_one(db: Any, server: FakeOpenAIServer, plan: dict[str, Any]) -> None:
    """Run the thread until cycle 1 is deployed (the interrupt stands in for a kill)."""
    store = open_store(db)
    config: Any = {"configurable": {"thread_id": "a"}, "max_concurrency": 2, "recursion_limit": 1000}
    with open_saver(db) as saver:
        graph = lifelong.build().compile(checkpointer=saver, interrupt_after=["deploy"])
        graph.invoke({"plan": plan}, config, context=SWMContext(model=server.model_spec, store=store))
        while graph.get_state(config).values.get("cycle", 0) < 2:
            graph.invoke(None, config, context=SWMContext(model=server.model_spec, store=store))


def test_a_deleted_out_folder_or_another_machine_continues_with_the_same_adapter(
        db_target: Any, tiny_gguf_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(db_target)
    first_out = tmp_path / "first" / "out"
    with FakeOpenAIServer(lora=True, scripts={"AgentActionForModel": _act(Agents())}) as server:
        plan = {**PLAN, "run_id": "a", "hf_model": str(tiny_gguf_llama), "out_dir": str(first_out),
                "lora_server": server.base_url}
        _train_cycle_one(db, server, plan)
        store = open_store(db)
        p1 = ls.get_policy(store, "a", "p1")
        assert p1 is not None and p1.adapter and p1.adapter_sha256 == content_hash(Path(p1.adapter))
        assert [d["deployed"] for d in ls.policies(store, "a") if d["version"] == "p1"] == [True]
        shutil.rmtree(first_out)  # the folder of the run that trained p1 is gone
        elsewhere = tmp_path / "machine2"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        args = ["learn", "--db", db, "--thread-id", "a", "--model", server.model_spec, "--out", "out", "--json"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        calls = server.stats()["requests"]

        restored = (elsewhere / "out" / "adapters" / "p1").resolve()
        assert content_hash(restored) == p1.adapter_sha256, "cycle 2 played the adapter p1 was trained as"
        p2 = ls.get_policy(store, "a", "p2")
        assert p2 is not None and p2.train is not None and p2.train.from_adapter == str(restored)
        assert p2.adapter_sha256 and Path(p2.adapter or "").parent == restored.parent
        played = {r["models"] for r in store.rows("select models from lifelong_episodes where cycle = 2 and "
                                                  "phase = 'collect'")}
        assert played and {json.loads(m)["agent"] for m in played} == {p1.served_as}
        ids = [r["episode_id"] for r in store.rows("select episode_id from lifelong_episodes where run_id = 'a'")]
        assert len(ids) == len(set(ids)) == 3 * 2 + 2 * 2  # p0, p1, p2 on dev and test; two collects of two
        summary = json.loads(result.stdout[result.stdout.index('{\n  "thread_id"'):])  # after the trainer's lines
        assert summary["calls"] == calls, "every model call the server answered is counted once: none paid twice"

        # a changed serving or training setting is a difference, never the stored one silently kept
        for option, shown in ((["--lora-server", "http://127.0.0.1:9/v1"], "lora_server: "),
                              (["--train-steps", "3"], "train.max_steps: 1 → 3")):
            refused = CliRunner().invoke(main, [*args, *option])
            assert refused.exit_code == 2 and "was started with other options" in refused.output, refused.output
            assert shown in refused.output
        same = CliRunner().invoke(main, [*args, "--train-steps", "1", "--lora-server", server.base_url])
        assert same.exit_code == 0 and "already finished" in same.output, same.output

        # a copy that was changed is refused in one line, not served
        weights = restored / "adapter_model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-8] + b"\x00" * 8)
        with pytest.raises(ArtifactCorrupt) as caught:
            local_adapter(store, p1, elsewhere / "out")
        assert caught.value.exit_code == 2 and "\n" not in caught.value.one_line()
        assert "delete that folder" in caught.value.one_line()

        # the stored copy damaged too (and the folder gone): resuming stops in one line, exit 2
        shutil.rmtree(elsewhere / "out")
        store.execute(f"update {TABLE} set data = ? where key = ? and name = 'adapter_model.safetensors'",
                      [b"not the adapter", p2.adapter_sha256])
        before = server.stats()["requests"]
        damaged = CliRunner().invoke(main, [*args[:-1], "--cycles", "3"])
        assert damaged.exit_code == 2, damaged.output
        said = damaged.output.split("error: ")  # the progress bar's carriage returns share its line
        assert len(said) == 2 and said[1].startswith("the stored artifact") and "is damaged" in said[1]
        assert said[1].count("\n") == 1 and "Traceback" not in damaged.output, damaged.output
        assert server.stats()["requests"] == before, "nothing was played under an adapter that is not p2"


def test_an_embedded_adapter_is_restored_and_served_from_a_gguf_of_the_recorded_content(
        tiny_gguf_llama: Path, tmp_path: Path) -> None:
    from swm.lifelong.artifacts import keep_adapter
    from swm.lifelong.serve import policy_spec
    from swm.lifelong.update import PolicyVersion
    from swm.serving import embedded, serve_adapter
    from swm.serving.verify import gguf_source
    from swm.training.trl_update import TrainSettings, train_adapter

    trained = tmp_path / "gone" / "adapters" / "p1"
    rows = [{"prompt": [{"role": "user", "content": "Your turn."}],
             "completion": [{"role": "assistant", "content": "ACCEPT"}]}] * 2
    train_adapter("sft", rows, str(tiny_gguf_llama), trained, settings=TrainSettings(max_steps=1, progress=False))
    store = open_store(tmp_path / "run.db")
    base = tiny_gguf_llama / "base.gguf"
    spec, _ = serve_adapter(trained, base_gguf=base)
    policy = PolicyVersion(version="p1", kind="sft", cycle=1, adapter=str(trained), served_as=spec,
                           adapter_sha256=keep_adapter(store, trained))
    shutil.rmtree(tmp_path / "gone")
    ctx = SWMContext(model="fake@http://127.0.0.1:9/v1", store=store, out_dir=str(tmp_path / "here"))
    plan = LifelongPlan(hf_model=str(tiny_gguf_llama), base_gguf=str(base))
    served = policy_spec(policy, ctx, plan)
    restored = tmp_path / "here" / "adapters" / "p1"
    assert served == embedded.embedded_spec(lora=restored.with_suffix(".gguf"), base=base) != spec
    assert gguf_source(restored.with_suffix(".gguf")) == policy.adapter_sha256
    assert policy_spec(policy, ctx, plan) == served, "served again from the same checked copy"
