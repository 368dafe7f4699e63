"""Self-play's served rollouts on a vLLM-class server with runtime LoRA loading (``--lora-server``).

Against a loopback fake of vLLM's routes whose completions are decoded in torch by a tiny base with
the requested adapter applied (tests/fake_vllm.py): each iteration's adapter is loaded by name, the
previous one unloaded, the adapter verified after every load (listed by name, its content hash, a
greedy probe against the torch policy), and the requests name it as their model. A server that plays
another adapter under the name, a name that holds other weights, and a server without runtime LoRA
each stop the iteration before a rollout is sampled.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
from fake_vllm import TorchLora, wide_tiny_llama  # noqa: E402
from test_selfplay_graph import run  # noqa: E402

from swm.checkpoints import ExperienceStore  # noqa: E402
from swm.errors import ModelUnavailable  # noqa: E402
from swm.selfplay import loop  # noqa: E402
from swm.selfplay.checkpoint import checkpoint_dir, save_atomic  # noqa: E402
from swm.selfplay.plan import SelfPlayPlan  # noqa: E402
from swm.selfplay.served import resolve_sampler  # noqa: E402
from swm.selfplay.store import load_rollouts  # noqa: E402
from swm.serving.runtime_lora import load_lora_adapter  # noqa: E402
from swm.serving.verify import ServedMismatch, adapter_sha256  # noqa: E402
from swm.tasks.families import synthesize  # noqa: E402
from swm.testing import FakeOpenAIServer  # noqa: E402
from swm.training.config import PolicyConfig  # noqa: E402
from swm.training.policy import collate, gather  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wide_tiny_llama(tmp_path_factory.mktemp("wide") / "model")


class _Vllm:
    """A fake vLLM server (runtime LoRA routes) whose completions `TorchLora` decodes."""

    def __init__(self, base: Path, ignore_adapter: bool = False) -> None:
        self.torch = TorchLora(base, lambda: self.server.adapters(), ignore_adapter=ignore_adapter)
        self.server = FakeOpenAIServer(lora=True, record=True, scripts={"<completion>": self.torch})


@pytest.fixture
def vllm(base: Path) -> Iterator[_Vllm]:
    fake = _Vllm(base)
    with fake.server:
        yield fake


def make_plan(base: Path, out: Path, url: str, **policy: Any) -> SelfPlayPlan:
    return SelfPlayPlan.model_validate({
        "run_id": "vllm", "iterations": 2, "tasks_per_iteration": 1, "group_size": 2, "max_turns": 2,
        "eval_tasks": 1, "out_dir": str(out), "ppo": {"lr": 1e-3, "minibatch": 4},
        "policy": {"base": str(base), "lora_server": url, "lora_r": 4, "lora_alpha": 8, "max_new_tokens": 4,
                   **policy}})


def job(plan: SelfPlayPlan, sample: int = 0) -> dict[str, Any]:
    task = synthesize(plan.family, plan.level, 7)
    return {"rollout_id": f"{plan.run_id}/i0/train/{task.task_id}/g{sample}", "unit_id": task.task_id,
            "unit": {"task": task.model_dump(mode="json")}, "iteration": 0, "sample": sample, "phase": "train"}


def perturbed_checkpoint(plan: SelfPlayPlan, iteration: int = 1) -> Path:
    """Save checkpoint ``iteration`` with an adapter whose greedy replies differ from the base's."""
    policy = loop.POOL.get(plan.policy, checkpoint_dir(plan.run_dir, 0))
    with torch.no_grad():
        torch.manual_seed(3)
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn_like(param) * 0.5)
    save_atomic(plan.run_dir, iteration, lambda tmp: policy.save(tmp, None, {"iteration": iteration}))
    loop.POOL.forget(plan.policy)
    return checkpoint_dir(plan.run_dir, iteration)


def greedy(plan: SelfPlayPlan, checkpoint: Path, prompt: str, tokens: int = 6) -> str:
    """The torch policy's greedy reply under ``checkpoint`` (what the adapter says)."""
    policy = loop.POOL.get(plan.policy, checkpoint)
    ids = policy.prompt_ids(prompt)
    with torch.no_grad():
        out = policy.model.generate(input_ids=torch.tensor([ids]), do_sample=False, max_new_tokens=tokens)[0].tolist()
    return str(policy.tokenizer.decode(out[len(ids):], skip_special_tokens=True))


def test_a_lora_server_makes_the_sampler_served_without_llama_cpp(base: Path) -> None:
    assert resolve_sampler(PolicyConfig(base=str(base), lora_server="http://127.0.0.1:1/v1")) == "served"
    assert resolve_sampler(PolicyConfig(base=str(base), lora_server="http://127.0.0.1:1/v1", sampler="torch")) \
        == "torch"


def test_a_served_rollout_samples_the_checkpoints_adapter_by_name(base: Path, vllm: _Vllm, tmp_path: Path) -> None:
    url = vllm.server.base_url
    plan = make_plan(base, tmp_path / "out", url)
    loop.ensure_initial_checkpoint(plan)
    store = ExperienceStore(tmp_path / "run.db")
    rollout = loop.run_rollout(plan, store, job(plan), 0)
    checkpoint = checkpoint_dir(plan.run_dir, 0)
    sha = adapter_sha256(checkpoint / "adapter")
    name = loop.lora_name(plan, 0, sha)
    assert rollout.failed is None and rollout.sampler == f"{name}@{url}"
    assert vllm.server.adapters() == {name: str((checkpoint / "adapter").resolve())}
    served = json.loads((checkpoint / "served.json").read_text())
    assert served["name"] == name and served["sha256"] == sha and served["server"] == url
    sampled = [b for b in vllm.server.bodies() if b.get("temperature")]
    assert sampled and {b["model"] for b in vllm.server.bodies()} == {name}, "every request names the adapter"
    assert all(b["top_k"] == -1 and b["repetition_penalty"] == 1.0 for b in sampled), "vLLM's pure sampling"
    policy = loop.POOL.get(plan.policy, checkpoint)
    for turn in (t for s in rollout.seats for t in s.turns):
        batch = collate([turn.prompt_ids], [turn.token_ids], policy.tokenizer.pad_token_id)
        with torch.no_grad():
            expected = gather(policy.score(batch)[0], batch)[0]
        assert turn.logprobs == pytest.approx(expected, abs=1e-5), "log-probs are the torch policy's, recomputed"


def test_each_iterations_adapter_replaces_the_last_and_plays_its_own_weights(base: Path, vllm: _Vllm,
                                                                            tmp_path: Path) -> None:
    url = vllm.server.base_url
    plan = make_plan(base, tmp_path / "out", url, temperature=1e-3, max_new_tokens=6)
    loop.ensure_initial_checkpoint(plan)
    first = checkpoint_dir(plan.run_dir, 0)
    second = perturbed_checkpoint(plan)
    prompt = "Ava , it is your turn ."
    wanted = [greedy(plan, first, prompt), greedy(plan, second, prompt)]
    assert wanted[0] != wanted[1], "the perturbed adapter changes the greedy reply"
    replies, names = [], []
    for checkpoint in (first, second):
        sampler, spec = loop._served_sampler(plan, checkpoint, "s")
        names.append(spec.split("@")[0])
        replies.append(sampler.generate(prompt).text)
    assert replies == wanted, "near temperature 0 the server says what each checkpoint's adapter says"
    assert vllm.server.adapters() == {names[1]: str((second / "adapter").resolve())}, "iteration 0's was unloaded"
    assert json.loads((second / "served.json").read_text())["sha256"] == adapter_sha256(second / "adapter")


def test_a_server_that_plays_another_adapter_under_the_name_is_caught(base: Path, tmp_path: Path) -> None:
    fake = _Vllm(base, ignore_adapter=True)  # lists every adapter it is given, plays the base
    with fake.server:
        plan = make_plan(base, tmp_path / "out", fake.server.base_url)
        loop.ensure_initial_checkpoint(plan)
        perturbed_checkpoint(plan)
        store = ExperienceStore(tmp_path / "run.db")
        with pytest.raises(ServedMismatch) as caught:
            loop.run_rollout(plan, store, job(plan), 1)
        sampled = [b for b in fake.server.bodies() if b.get("temperature")]
    assert "does not play the trained adapter" in str(caught.value) and "\n" not in str(caught.value)
    assert not sampled and not load_rollouts(store, plan.run_id, 0, "train"), "no rollout sampled the wrong policy"


def test_a_name_that_holds_other_weights_is_caught_by_its_content(base: Path, vllm: _Vllm, tmp_path: Path) -> None:
    plan = make_plan(base, tmp_path / "out", vllm.server.base_url)
    loop.ensure_initial_checkpoint(plan)
    checkpoint = checkpoint_dir(plan.run_dir, 0)
    stale = tmp_path / "stale"
    shutil.copytree(checkpoint / "adapter", stale)
    (stale / "adapter_config.json").write_text((stale / "adapter_config.json").read_text() + " ")
    name = loop.lora_name(plan, 0, adapter_sha256(checkpoint / "adapter"))
    load_lora_adapter(vllm.server.base_url, name, str(stale))  # the server already holds the name, other content
    with pytest.raises(ServedMismatch, match="whose content is not the trained adapter's"):
        loop._served_sampler(plan, checkpoint, "s")


def test_a_server_without_runtime_lora_is_refused_in_one_line(base: Path, tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        plan = make_plan(base, tmp_path / "out", server.base_url)
        loop.ensure_initial_checkpoint(plan)
        with pytest.raises(ModelUnavailable) as caught:
            loop._served_sampler(plan, checkpoint_dir(plan.run_dir, 0), "s")
    text = caught.value.one_line()
    assert "\n" not in text and "cannot load LoRA adapters" in text and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" in text


def test_the_graph_serves_each_iterations_adapter_on_the_lora_server(base: Path, vllm: _Vllm,
                                                                    tmp_path: Path) -> None:
    plan = make_plan(base, tmp_path / "out", vllm.server.base_url)
    out = run(tmp_path / "run.db", {"plan": plan.model_dump(mode="json")})
    assert out["iteration"] == 2 and out["stopped"] is None
    assert {out["summaries"][i]["sampler"] for i in ("0", "1")} == {"served"}
    store = ExperienceStore(tmp_path / "run.db")
    for iteration in (0, 1):
        for phase, checkpoint in (("train", iteration), ("eval", iteration + 1)):
            served = json.loads((checkpoint_dir(plan.run_dir, checkpoint) / "served.json").read_text())
            assert served["sha256"] == adapter_sha256(checkpoint_dir(plan.run_dir, checkpoint) / "adapter")
            rollouts = load_rollouts(store, plan.run_id, iteration, phase)
            assert rollouts and {r.sampler for r in rollouts} == {f"{served['name']}@{vllm.server.base_url}"}
    assert list(vllm.server.adapters()) == [served["name"]], "one adapter of the run loaded at a time"
