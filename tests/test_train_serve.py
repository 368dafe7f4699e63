"""Train → adapter → llama.cpp serves it → episodes differ → the deploy gate compares two live endpoints.

All on a tiny random Llama made in the session (swm/testing/tiny_llama.py), no download. Needs the
[train] and [embedded] extras, which CI installs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_cpp", reason="needs the [embedded] extra")
pytest.importorskip("trl", reason="needs the [train] extra")

from swm.checkpoints import ExperienceStore  # noqa: E402
from swm.context import SWMContext  # noqa: E402
from swm.errors import InputError, ModelUnavailable  # noqa: E402
from swm.graphs import episode  # noqa: E402
from swm.lifelong import store as ls  # noqa: E402
from swm.lifelong.bridge import agent_prompt, to_scenario  # noqa: E402
from swm.lifelong.deploy import decide  # noqa: E402
from swm.lifelong.episodes import learner_context, run_episode  # noqa: E402
from swm.lifelong.metrics import Cell  # noqa: E402
from swm.lifelong.update import PolicyVersion, action_completion  # noqa: E402
from swm.serving import (
    embedded,  # noqa: E402
    serve_adapter,  # noqa: E402
)
from swm.tasks.splits import heldout  # noqa: E402
from swm.training.trl_update import TrainSettings, check_adapter, train_adapter  # noqa: E402

TRAINED = "I offer five hundred dollars."
# Few steps at a high rate: the tiny model's logits are wide, so this moves its argmax; the
# sequences are real act prompts (~700 tokens), and each step costs a 49,152-token softmax.
FAST = TrainSettings(max_steps=6, learning_rate=5e-2, rank=8, alpha=16, batch_size=2, progress=False)
TASKS = heldout(["easy"], ["negotiation"], 1)


def _rows(completion: str, real: bool = True) -> list[dict[str, Any]]:
    """SFT rows: each seat's first act prompt of the held-out task (or a short stand-in) and ``completion``."""
    rows = []
    for task in TASKS:
        scenario = to_scenario(task)
        for name in scenario.names:
            prompt = agent_prompt(scenario, name, [], 0) if real else f"{name}, it is your turn."
            rows.append({"prompt": [{"role": "user", "content": prompt}],
                         "completion": [{"role": "assistant", "content": completion}]})
    return rows


@pytest.fixture(scope="module")
def trained(tiny_gguf_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An SFT adapter p1 on the tiny model, its stats and its llama.cpp spec."""
    out = tmp_path_factory.mktemp("policies")
    stats = train_adapter("sft", _rows(action_completion("speak", TRAINED)), str(tiny_gguf_llama), out / "p1",
                          settings=FAST)
    spec, gguf = serve_adapter(out / "p1", name="p1", base_gguf=tiny_gguf_llama / "base.gguf")
    return {"dir": out, "stats": stats, "spec": spec, "gguf": gguf}


def test_a_trained_adapter_served_by_llama_cpp_plays_differently(tiny_gguf_llama: Path, trained: dict[str, Any],
                                                                tmp_path: Path) -> None:
    stats = trained["stats"]
    assert stats.method == "sft" and stats.steps == 6 and len(stats.loss) == 6 and stats.loss[-1] < stats.loss[0]
    assert stats.tokens_per_s > 0 and stats.adapter_bytes > 0 and stats.from_adapter is None
    assert trained["spec"] == embedded.embedded_spec(lora=trained["gguf"], base=tiny_gguf_llama / "base.gguf")

    store = ExperienceStore(tmp_path / "run.db")
    ctx = SWMContext(model=embedded.embedded_spec(base=tiny_gguf_llama / "base.gguf"), temperature=0.0, max_tokens=64,
                     store=store)
    policies = {"p0": PolicyVersion(version="p0"),
                "p1": PolicyVersion(version="p1", parent="p0", kind="sft", cycle=1, adapter=str(trained["dir"] / "p1"),
                             adapter_gguf=str(trained["gguf"]), served_as=trained["spec"], train=stats)}
    played: dict[str, list[list[tuple[str, str]]]] = {}
    graph = episode.build().compile(checkpointer=False)
    for version, policy in policies.items():
        ls.put_policy(store, "r", policy)
        for task in TASKS:
            eid = f"r/c1/eval/{version}/{task.task_id}"
            record, _ = run_episode(graph, task, learner_context(ctx, policy, self_play=True), episode_id=eid,
                                    memory={}, policy="plain", max_turns=2, judge=False, run_id="r", cycle=1,
                                    phase="eval", policy_version=version)
            ls.put_episode(store, record, record.verdict.passed)
            played.setdefault(version, []).append([(t.action_type, t.text) for t in record.turns])
            assert record.models["agent"] == (trained["spec"] if version == "p1" else ctx.model)
    assert played["p1"] != played["p0"], "at temperature 0 the adapter changes what is said"
    # both policies live side by side: on llama-server in one process (each request names its adapter),
    # on the Python server each on its own
    urls = {s.base_url for s in embedded._servers.values() if s.model_path == tiny_gguf_llama / "base.gguf"}
    assert trained["gguf"] in embedded.served_adapters()
    assert len(urls) == 1 if embedded.engine() == embedded.ENGINE else len(urls) >= 2
    cells = {v: {"easy": Cell(sum(r["completion"] for r in store.rows(
        "select completion from lifelong_episodes where policy_version = ?", [v])), len(TASKS))} for v in played}
    decision = decide(cells["p0"], cells["p1"], earlier=[], current="easy", epsilon=0.05)
    assert decision.explain() and "easy" in json.dumps(decision.deltas)


def test_llama_cpp_with_the_gguf_lora_generates_what_peft_generates(tiny_gguf_llama: Path,
                                                                    trained: dict[str, Any]) -> None:
    """The conversion is exact: greedy tokens of PEFT (HF) and of llama.cpp + GGUF LoRA agree."""
    import torch
    from langchain_openai import ChatOpenAI
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    messages = [{"role": "user", "content": "Ava, it is your turn."}]
    tokenizer = AutoTokenizer.from_pretrained(tiny_gguf_llama)
    base = AutoModelForCausalLM.from_pretrained(tiny_gguf_llama)
    model = PeftModel.from_pretrained(base, trained["dir"] / "p1").eval()
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    expected = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    server = embedded.ensure_server(base=tiny_gguf_llama / "base.gguf", lora=trained["gguf"])
    chat = ChatOpenAI(model="embedded", base_url=server.base_url, api_key="none",  # type: ignore[arg-type]
                      temperature=0.0, extra_body={"max_tokens": 8, "repeat_penalty": 1.0, **server.fields})
    assert chat.invoke(messages).content == expected


def test_a_cycle_continues_the_incumbents_adapter(tiny_gguf_llama: Path, trained: dict[str, Any],
                                                  tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    parent = trained["dir"] / "p1"
    rows = [{"prompt": r["prompt"], "chosen": r["completion"],
             "rejected": [{"role": "assistant", "content": action_completion("leave", "")}]}
            for r in _rows(action_completion("speak", TRAINED), real=False)]
    settings = TrainSettings(max_steps=2, learning_rate=1e-3, batch_size=2, progress=False)
    stats = train_adapter("dpo", rows, str(tiny_gguf_llama), tmp_path / "p2", parent_adapter=str(parent),
                          settings=settings)
    assert stats.from_adapter == str(parent) and stats.steps == 2
    # DPO's reference is the incumbent (a frozen copy of its adapter): at step one the policy equals it
    assert abs(stats.loss[0] - 0.6931) < 0.01
    before, after = load_file(str(parent / "adapter_model.safetensors")), load_file(
        str(tmp_path / "p2" / "adapter_model.safetensors"))
    assert before.keys() == after.keys() and any((before[k] != after[k]).any() for k in before)
    kto = [{"prompt": r["prompt"], "completion": r["chosen"], "label": True} for r in rows] + [
        {"prompt": r["prompt"], "completion": r["rejected"], "label": False} for r in rows]
    stats = train_adapter("kto", kto, str(tiny_gguf_llama), tmp_path / "p3", parent_adapter=str(tmp_path / "p2"),
                          settings=TrainSettings(max_steps=1, batch_size=4, progress=False))
    assert stats.method == "kto" and stats.from_adapter == str(tmp_path / "p2")


def test_killed_during_training_the_rerun_retrains_then_reuses(tiny_gguf_llama: Path, tmp_path: Path) -> None:
    rows_file = tmp_path / "rows.json"
    rows_file.write_text(json.dumps(_rows(action_completion("speak", TRAINED), real=False)))
    out = tmp_path / "p1"
    # the child says "stepped" once its first training step has run (the trainer made p1.partial before that)
    script = textwrap.dedent(f"""
        import json, pathlib, transformers
        from swm.training.trl_update import TrainSettings, train_adapter

        step = transformers.Trainer.training_step

        def told(self, *args, **kwargs):
            loss = step(self, *args, **kwargs)
            if self.state.global_step == 0:
                print("stepped", flush=True)
            return loss

        transformers.Trainer.training_step = told
        train_adapter("sft", json.load(open({str(rows_file)!r})), {str(tiny_gguf_llama)!r}, pathlib.Path({str(out)!r}),
                      settings=TrainSettings(max_steps=100000, progress=False))
        """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    partial = out.with_name("p1.partial")
    assert child.stdout is not None
    with child.stdout:  # the event: its line (the pipe closes at once if the child ends first)
        assert any(line.strip() == "stepped" for line in child.stdout), "the child never took a training step"
    assert child.poll() is None, "training should still be running"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not out.exists(), "a killed run leaves no adapter that looks finished"
    assert partial.is_dir(), "killed mid-training: the rerun finds its partial folder"
    stats = train_adapter("sft", json.loads(rows_file.read_text()), str(tiny_gguf_llama), out,
                          settings=TrainSettings(max_steps=2, progress=False))
    assert stats.steps == 2 and not partial.exists()
    mtime = (out / "adapter_model.safetensors").stat().st_mtime
    again = train_adapter("sft", [], str(tiny_gguf_llama), out, settings=TrainSettings(max_steps=2, progress=False))
    assert again == stats and (out / "adapter_model.safetensors").stat().st_mtime == mtime


def test_bad_adapters_and_bases_get_one_line_errors(tiny_gguf_llama: Path, trained: dict[str, Any],
                                                    tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text("{}")
    (broken / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    for bad in (broken, tmp_path / "missing"):
        with pytest.raises(InputError) as caught:
            check_adapter(bad)
        assert "\n" not in caught.value.one_line()
    with pytest.raises(ModelUnavailable, match="is not a file"):
        embedded.ensure_server(base=tiny_gguf_llama / "base.gguf", lora=tmp_path / "gone.gguf")
    gpt2 = tmp_path / "gpt2"
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64)).save_pretrained(gpt2)
    from swm.serving.gguf_lora import write_base_gguf

    with pytest.raises(InputError) as caught:
        write_base_gguf(GPT2LMHeadModel.from_pretrained(gpt2), tiny_gguf_llama / "base.gguf", tmp_path / "g.gguf")
    assert "convert_" in caught.value.one_line() and not (tmp_path / "g.gguf").exists()


def test_out_of_memory_is_a_one_line_error_and_leaves_nothing(tiny_gguf_llama: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import trl

    def boom(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(trl.SFTTrainer, "train", boom)
    with pytest.raises(InputError) as caught:
        train_adapter("sft", _rows(action_completion("speak", TRAINED), real=False), str(tiny_gguf_llama),
                      tmp_path / "p1",
                      settings=TrainSettings(max_steps=1, progress=False))
    assert "out of memory" in caught.value.one_line() and "--train-batch-size" in caught.value.one_line()
    assert not (tmp_path / "p1").exists() and not (tmp_path / "p1.partial").exists()
