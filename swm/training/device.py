"""Where and in what precision every trainer runs: one choice, made here, for PPO and the TRL updates.

`choose_placement` picks ``cuda`` with ``bfloat16`` when a GPU that supports it is present, ``cuda``
with ``float32`` on an older GPU, and ``cpu`` with ``float32`` otherwise. An explicit argument wins,
then the environment (``SWM_DEVICE``, ``SWM_DTYPE``), then that default — so a researcher can pin
``SWM_DEVICE=cuda:1`` or ``SWM_DTYPE=float32`` for every trainer at once.

The base model is loaded in the placement's dtype and moved to its device (`swm.training.base.load_base`);
everything else follows the *model*, not a global: the PPO policy's value head (kept in float32, a
scalar regression), each batch, the reference pass (the same model with its adapter disabled) and
the optimiser's state (created by torch beside each parameter). TRL's trainers get the matching
``bf16``/``fp16``/``use_cpu`` arguments (`Placement.trainer_args`) and place the model themselves, one
device per process under ``accelerate launch``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from swm.errors import InputError

DTYPES = ("float32", "bfloat16", "float16")
DEVICE_ENV, DTYPE_ENV = "SWM_DEVICE", "SWM_DTYPE"


@dataclass(frozen=True)
class Placement:
    """A device (``cpu``, ``cuda``, ``cuda:1``, ``mps``) and the dtype the base model's weights use there."""

    device: str
    dtype: str

    @property
    def on_cpu(self) -> bool:
        return self.device == "cpu"

    def torch_dtype(self) -> Any:
        """The dtype as a ``torch.dtype``."""
        import torch  # optional: the [train] extra

        return getattr(torch, self.dtype)

    def trainer_args(self) -> dict[str, bool]:
        """The mixed-precision and device arguments of a transformers/TRL ``TrainingArguments``."""
        return {"bf16": self.dtype == "bfloat16", "fp16": self.dtype == "float16", "use_cpu": self.on_cpu}


def _cuda() -> tuple[bool, bool]:
    """(a CUDA device is present, it computes in bfloat16)."""
    import torch  # optional: the [train] extra

    present = torch.cuda.is_available()
    return present, present and bool(torch.cuda.is_bf16_supported())


def choose_placement(device: str | None = None, dtype: str | None = None) -> Placement:
    """Choose the trainers' device and dtype: the arguments, else ``SWM_DEVICE``/``SWM_DTYPE``, else the hardware.

    Fails with a one-line error for an unknown dtype, a CUDA device on a machine without one, or
    float16 on the CPU (which no trainer runs).
    """
    cuda, bf16 = _cuda()
    device = (device or os.environ.get(DEVICE_ENV) or ("cuda" if cuda else "cpu")).strip()
    dtype = (dtype or os.environ.get(DTYPE_ENV) or "").strip()
    if device.startswith("cuda") and not cuda:
        raise InputError(f"device {device} asked for, but torch sees no CUDA device",
                         f"unset {DEVICE_ENV} (or pass cpu), or install a CUDA build of torch")
    if not dtype:
        dtype = "bfloat16" if device.startswith("cuda") and bf16 else "float32"
    if dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}", f"use one of {', '.join(DTYPES)} (or unset {DTYPE_ENV})")
    if dtype == "float16" and device == "cpu":
        raise InputError("float16 training on the CPU is not supported", "use float32 or bfloat16 on the CPU")
    return Placement(device=device, dtype=dtype)


def model_device(model: Any) -> Any:
    """The ``torch.device`` of a model's first parameter: where its inputs must go."""
    return next(iter(model.parameters())).device


def place(model: Any, placement: Placement) -> Any:
    """Cast a model's floating-point weights to the placement's dtype and move it to its device."""
    return model.to(device=placement.device, dtype=placement.torch_dtype())


def train_threads(chosen: int | None = None) -> int | None:
    """torch's intra-op threads for a trainer: ``chosen``, else ``SWM_TRAIN_THREADS``, else every core
    (`cores`); None where ``OMP_NUM_THREADS`` is set, which torch has read already (the test suite's one a worker)."""
    if chosen:
        return chosen
    if os.environ.get("SWM_TRAIN_THREADS"):
        return int(os.environ["SWM_TRAIN_THREADS"])
    return None if os.environ.get("OMP_NUM_THREADS") else cores()


def cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count`` where that is not known)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU computes bfloat16 natively (AVX-512 BF16 or AMX): the flags Linux lists in ``cpuinfo``.

    Without them torch still runs bfloat16, emulated, and slower than float32, so no such CPU autocasts.
    """
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return False
    return any(flag in flags for flag in CPU_BF16_FLAGS)


def use_autocast(choice: str, device: Any, weights: Any) -> bool:
    """Whether a policy's forward runs under bfloat16 autocast: ``choice`` (`PolicyConfig.autocast`) on the CPU over
    float32 weights; ``auto`` only where `cpu_bf16` holds. A GPU, or weights already in a low precision, never."""
    import torch  # optional: the [train] extra

    if choice == "off" or getattr(device, "type", str(device)) != "cpu" or weights != torch.float32:
        return False
    return choice == "bfloat16" or cpu_bf16()
