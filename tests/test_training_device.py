"""One choice of device and dtype (`swm.training.device`), and swm's trainers follow it.

The choice is tested for every machine by stubbing what torch reports (a GPU with bfloat16, an older
GPU, none); the overrides (arguments, ``SWM_DEVICE``/``SWM_DTYPE``) and their one-line errors too.
On this CPU the PPO policy is built in bfloat16, a dtype other than the default, and every tensor the
update makes is checked against the model's device and dtype: the base's weights, the value head
(float32), the scores, and the optimiser's state after a real step. TRL's arguments come from the
same placement (no ``bf16=False`` wired in).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swm.errors import InputError
from swm.training import device as dev
from swm.training.device import Placement, choose_placement


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(dev.DEVICE_ENV, raising=False)
    monkeypatch.delenv(dev.DTYPE_ENV, raising=False)


@pytest.mark.parametrize(("cuda", "expected"), [((True, True), Placement("cuda", "bfloat16")),
                                                ((True, False), Placement("cuda", "float32")),
                                                ((False, False), Placement("cpu", "float32"))])
def test_the_hardware_decides_by_default(monkeypatch: pytest.MonkeyPatch, cuda: tuple[bool, bool],
                                         expected: Placement) -> None:
    monkeypatch.setattr(dev, "_cuda", lambda: cuda)
    assert choose_placement() == expected


def test_arguments_then_the_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dev, "_cuda", lambda: (True, True))
    monkeypatch.setenv(dev.DEVICE_ENV, "cuda:1")
    monkeypatch.setenv(dev.DTYPE_ENV, "float32")
    assert choose_placement() == Placement("cuda:1", "float32")
    assert choose_placement("cpu", "bfloat16") == Placement("cpu", "bfloat16")


@pytest.mark.parametrize(("device", "dtype", "says"), [("cuda", None, "no CUDA device"),
                                                       ("cpu", "float16", "float16"),
                                                       ("cpu", "half", "unknown dtype")])
def test_impossible_choices_fail_in_one_line(monkeypatch: pytest.MonkeyPatch, device: str, dtype: str | None,
                                             says: str) -> None:
    monkeypatch.setattr(dev, "_cuda", lambda: (False, False))
    with pytest.raises(InputError, match=says):
        choose_placement(device, dtype)


def test_trainer_arguments_follow_the_placement() -> None:
    assert Placement("cuda", "bfloat16").trainer_args() == {"bf16": True, "fp16": False, "use_cpu": False}
    assert Placement("cuda", "float16").trainer_args() == {"bf16": False, "fp16": True, "use_cpu": False}
    assert Placement("cpu", "float32").trainer_args() == {"bf16": False, "fp16": False, "use_cpu": True}


torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")


def test_trls_config_takes_the_placement(tmp_path: Path) -> None:
    from swm.training.trl_update import TrainSettings, _config

    args = _config("sft", trl, tmp_path, TrainSettings(), Placement("cpu", "bfloat16"))
    assert args.bf16 is True and args.use_cpu is True
    args = _config("dpo", trl, tmp_path, TrainSettings(), choose_placement())
    assert args.bf16 is False and args.use_cpu is True  # this machine: no GPU


@pytest.fixture(scope="module")
def toy_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import toy_task

    return toy_task.make_toy_model(tmp_path_factory.mktemp("device") / "base")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_ppo_follows_the_models_device_and_dtype(toy_base: Path, dtype: str) -> None:
    from swm.training.config import PolicyConfig, PPOConfig
    from swm.training.policy import LoraValueModel, collate
    from swm.training.ppo import Sample, make_optimizer, ppo_update

    torch.manual_seed(0)
    policy = LoraValueModel.create(PolicyConfig(base=str(toy_base), dtype=dtype, max_new_tokens=1))
    where, want = policy.device, getattr(torch, dtype)
    base_weights = [p for n, p in policy.model.named_parameters() if "lora_" not in n]
    assert {p.device for p in base_weights} == {where} and {p.dtype for p in base_weights} == {want}
    assert policy.value_head.weight.device == where and policy.value_head.weight.dtype == torch.float32
    prompt = policy.prompt_ids("say red")
    red = int(policy.tokenizer.convert_tokens_to_ids("red"))
    batch = collate([prompt], [[red]], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logprobs, values = policy.score(batch)
    assert logprobs.device == where and values.device == where and logprobs.dtype == torch.float32
    optimizer = make_optimizer(policy, PPOConfig())
    sample = Sample(role="speaker", prompt_ids=prompt, token_ids=[red], old_logprobs=[float(logprobs[0, -1])],
                    advantages=[1.0], returns=[1.0])
    stats = ppo_update(policy, optimizer, [sample], PPOConfig(lr=1e-2, minibatch=1))
    assert stats["steps"] == 1.0
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    assert state and {t.device for t in state} == {where}
    gen = policy.generate("say red", seed=1)
    assert len(gen.token_ids) == len(gen.logprobs) == 1
