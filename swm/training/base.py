"""The base model every trainer starts from, loaded with no download: one `load_base` for TRL and PPO.

``None``/``"embedded"`` is the SmolLM2 GGUF of the ``[embedded]`` extra (transformers dequantises it), a
``.gguf`` path any GGUF transformers can dequantise, a directory a local Hugging Face checkpoint.
The model comes back in float32 on the CPU (a GGUF's dequantised weights, a checkpoint saved in half
precision), or, given a `swm.training.device.Placement` (what the trainers pass), in its dtype on its device.

Dequantising a GGUF takes transformers half a minute on two cores, every time a trainer starts (each
cycle of `swm learn`, each self-play iteration's update): the first load saves the dequantised model and
tokenizer as a plain checkpoint in the per-user cache (``SWM_CACHE_DIR``, else ``~/.cache/swm``, under
``bases/<sha256 of the GGUF>``), and later loads read that in a fraction of a second. The cache holds the
same float32 tensors and tokenizer (`tests/test_base_cache.py`); an unwritable cache only costs the time.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from swm.errors import InputError
from swm.serving.engine import dequantised_cache
from swm.training.device import Placement, place

INSTALL_HINT = "pip install torch==2.13.0 first, then pip install -e '.[train]'"


def shipped_gguf() -> Path:
    """Return the SmolLM2 GGUF of the ``[embedded]`` extra (the default base)."""
    from swm.serving.embedded import gguf_path

    return gguf_path()


def resolve_base(base: str | None) -> tuple[Path, str | None]:
    """Return (directory, GGUF file name or None) for transformers' ``from_pretrained``."""
    path = shipped_gguf() if base in (None, "", "embedded") else Path(str(base)).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name
    if path.is_dir() and (path / "config.json").is_file():
        return path, None
    raise InputError(f"no base model at {base}", "pass a Hugging Face model directory or a .gguf file as --hf-model")


def imports() -> Any:
    try:
        import peft  # optional: the [train] extra
        import torch  # optional: the [train] extra
        import transformers  # optional: the [train] extra
        import trl  # optional: the [train] extra
    except ImportError as exc:
        raise InputError(f"training needs the [train] extra ({exc.name} is missing)", INSTALL_HINT) from exc
    return torch, transformers, peft, trl


def load_base(base: str | None, placement: Placement | None = None) -> tuple[Any, Any]:
    """Load a base model and its tokenizer with no download: float32 on the CPU, or as ``placement`` says."""
    torch, transformers, _, _ = imports()
    where, gguf_file = resolve_base(base)
    cached = dequantised_cache(where / gguf_file) if gguf_file else None
    with _one_at_a_time(cached):
        if cached is not None and cached.is_dir():
            where, gguf_file = cached, None
        model, tokenizer = _load(transformers, where, gguf_file, base)
        if gguf_file:
            dequantised(model)
            if cached is not None:
                _save_dequantised(model, tokenizer, cached)
    if placement is not None:
        return place(model, placement), tokenizer
    if any(p.dtype != torch.float32 for p in model.parameters()):
        model = model.to(torch.float32)
    return model, tokenizer


def _load(transformers: Any, where: Path, gguf_file: str | None, base: str | None) -> tuple[Any, Any]:
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        with _one_parse_per_gguf() if gguf_file else nullcontext():
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(where), local_files_only=True, **kwargs)
            model = transformers.AutoModelForCausalLM.from_pretrained(str(where), local_files_only=True, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"cannot load the base model {base or 'embedded'}: {' '.join(str(exc).split())[:300]}",
                         "pass a local Hugging Face checkpoint or a GGUF that transformers can dequantise") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


@contextmanager
def _one_parse_per_gguf() -> Iterator[None]:
    """Let transformers parse a GGUF once while it loads a model and tokenizer from it.

    transformers reads the file with a new ``gguf.GGUFReader`` for the tokenizer, its config, the model's config
    and the weights (three parses for the tiny test Llama); each maps every one of the tokenizer's ~100,000
    strings to numpy views, about 4 CPU-seconds for SmolLM2's vocabulary. The readers are read-only, so one per
    file serves every call while this lasts.
    """
    import gguf  # optional: the [train] extra

    real = gguf.GGUFReader
    readers: dict[tuple[str, str, int, int], Any] = {}

    def reader(path: Any, mode: str = "r") -> Any:  # keyed by the file's state too: a rewritten file is parsed again
        stat = os.stat(path)
        key = (os.path.realpath(path), mode, stat.st_mtime_ns, stat.st_size)
        if key not in readers:
            readers[key] = real(path, mode)  # type: ignore[arg-type]
        return readers[key]

    gguf.GGUFReader = reader  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        gguf.GGUFReader = real  # type: ignore[misc]


@contextmanager
def _one_at_a_time(cached: Path | None) -> Iterator[None]:
    """Hold the cache entry's file lock: one process dequantises, the others wait and read its copy."""
    if cached is None or cached.is_dir():
        yield
        return
    from filelock import FileLock  # optional: the [train] extra

    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(f"{cached}.lock")
        lock.acquire()
    except OSError:
        yield  # a read-only cache: no lock to take, nothing will be written
        return
    try:
        yield
    finally:
        lock.release()


def _save_dequantised(model: Any, tokenizer: Any, cached: Path) -> None:
    """Write the checkpoint beside its final place and rename it there: a reader sees all of it or none."""
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{cached.name}-", dir=cached.parent))
    except OSError:
        return  # a read-only cache: the next load dequantises again
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.rename(tmp, cached)  # another process may have won the race: its copy is the same
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def dequantised(model: Any) -> None:
    """Drop the GGUF quantizer transformers leaves on a model it has already dequantised.

    transformers keeps ``hf_quantizer`` (and ``is_quantized``) on a model loaded from a GGUF,
    though its weights are plain float32; TRL's trainer then refuses to train a "quantized"
    model. The saved config must not claim a quantization either.
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    model.is_quantized = False
    model.config._is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
