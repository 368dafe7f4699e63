"""The number format the embedded server serves its base in: the GGUF converted once by llama.cpp's own quantizer.

SmolLM2 ships as Q4_1. llama.cpp's CPU backend multiplies Q4_1 weights with its generic dot-product kernels: Q4_1
has neither the tinyBLAS (llamafile sgemm) path that prompt batches take for F32, F16, Q8_0 and Q4_0 nor a repacked
layout, so a prompt is evaluated more slowly than the model's size would say. ``SWM_EMBEDDED_FORMAT`` picks what the
server loads instead:

* ``shipped`` (the default): the file as it is (`swm.serving.embedded.gguf_path`);
* ``f32``, ``f16``, ``bf16``: the shipped weights dequantised (F32 exactly; F16 and BF16 round them once more);
* ``q8_0``, ``q4_0``, ``q4_1``: requantised from the shipped weights (``q4_0`` loses the most).

A conversion is made once per (source file, format) with ``llama_model_quantize`` from the installed llama-cpp-python
(the same library the server is linked to), in a child process so that its log and any crash stay out of the caller,
and kept in swm's cache (`path`) under a lock, written whole before it is renamed into place. The torch side trains
on the shipped file's weights whatever the server loads (`swm.training.base.load_base`), so a format that rounds
them differently serves a slightly different base: `swm.selfplay.served.check_served_tokens` measures how much.
``python -m bench.engine_formats`` measures each format's speed and agreement side by side.
"""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import sys
from pathlib import Path

from swm.errors import InputError, ModelUnavailable
from swm.serving.engine import cache_root, file_digest

SHIPPED = "shipped"
# llama_ftype of each format (llama.h: LLAMA_FTYPE_ALL_F32 = 0, MOSTLY_F16 = 1, MOSTLY_Q4_0 = 2, ...)
FTYPES = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2, "q4_1": 3}
FORMATS = (SHIPPED, *FTYPES)
ENV = "SWM_EMBEDDED_FORMAT"
# Run in a child: argv is (source, destination, ftype, token embedding's ggml type or -1). Every weight matrix in the
# one format (``pure``), so a format's speed is its own and not the quantizer's per-tensor choices; the 4-bit formats
# keep the token embedding (SmolLM2's tied output head) at Q8_0, as the shipped file has it.
_QUANTIZE = (
    "import sys, llama_cpp\n"
    "p = llama_cpp.llama_model_quantize_default_params()\n"
    "p.ftype = int(sys.argv[3]); p.allow_requantize = True; p.pure = True; p.nthread = 0\n"
    "p.token_embedding_type = int(sys.argv[4]) if int(sys.argv[4]) >= 0 else p.token_embedding_type\n"
    "sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p))\n")
GGML_Q8_0 = 8  # ggml_type of Q8_0 (ggml.h)
EMBEDDING_KEPT = {"q4_0": GGML_Q8_0, "q4_1": GGML_Q8_0}


def chosen() -> str:
    """Return the format ``SWM_EMBEDDED_FORMAT`` names (default ``shipped``); refuse one swm does not know."""
    name = (os.environ.get(ENV) or SHIPPED).strip().lower()
    if name not in FORMATS:
        raise InputError(f"{ENV}={name!r} is not a format swm serves; choose one of {', '.join(FORMATS)}")
    return name


def _digest(source: Path) -> str:
    """The source's content digest (`swm.serving.engine.file_digest`, read once per file as it is in a process)."""
    return file_digest(source)[:24]


def path(source: Path, fmt: str) -> Path:
    """Return where the ``fmt`` conversion of ``source`` is kept (keyed by the source's content)."""
    return cache_root() / "formats" / _digest(source) / f"{fmt}.gguf"


def quantize(source: Path, out: Path, fmt: str) -> None:
    """Write ``source`` in ``fmt`` to ``out`` with llama.cpp's quantizer (in a child; whole, then renamed)."""
    if fmt not in FTYPES:
        raise InputError(f"{fmt!r} is not a format swm serves; choose one of {', '.join(FORMATS)}")
    partial = out.with_suffix(".partial")
    log = out.with_suffix(".log")
    with log.open("wb") as sink:
        done = subprocess.run([sys.executable, "-c", _QUANTIZE, str(source), str(partial), str(FTYPES[fmt]),
                               str(EMBEDDING_KEPT.get(fmt, -1))], stdout=sink, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        raise ModelUnavailable(f"llama.cpp could not convert {source.name} to {fmt} (exit {done.returncode}); "
                               f"its log is {log}", f"unset {ENV}, or serve another format")
    os.replace(partial, out)


def convert(source: Path, fmt: str) -> Path:
    """Return ``source`` in ``fmt``: converted once into swm's cache (under a lock), then reused."""
    if fmt == SHIPPED:
        return source
    if fmt not in FTYPES:
        raise InputError(f"{fmt!r} is not a format swm serves; choose one of {', '.join(FORMATS)}")
    out = path(source, fmt)
    if out.is_file():  # the common case, on every embedded request: made before, renamed into place whole
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with (out.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_file():
            quantize(source, out, fmt)
    return out


def served(source: Path) -> Path:
    """Return the file the embedded server loads for base ``source`` in the format chosen now (converted if new)."""
    return convert(source, chosen())


def quantised(source: Path) -> bool:
    """Whether ``source``'s weight matrices are quantised (not F32, F16 or BF16): read from its tensor table, once
    per file as it now is (gguf's reader takes 2-4 s over the shipped 135M file on 2 cores)."""
    try:
        stat = source.stat()
    except OSError as exc:
        raise ModelUnavailable(f"{source} is not a GGUF file llama.cpp can serve ({exc})",
                               "point the base at a .gguf model file") from exc
    return _quantised(source, stat.st_size, stat.st_mtime_ns)


PLAIN_FTYPES = {0, 1, 32}  # llama.cpp's LLAMA_FTYPE_ALL_F32, _MOSTLY_F16, _MOSTLY_BF16 (general.file_type)


@functools.lru_cache(maxsize=16)
def _quantised(source: Path, size: int, mtime: int) -> bool:
    """The file's ``general.file_type`` as llama.cpp reads it (its vocabulary alone, about 0.1 s), else its tensor
    table (gguf's reader, seconds: a file that does not say, or no llama-cpp-python)."""
    try:
        import llama_cpp  # type: ignore[import-not-found]

        header = llama_cpp.Llama(model_path=str(source), vocab_only=True, verbose=False)
        said = header.metadata.get("general.file_type")
        header.close()
        if said is not None and str(said).isdigit():
            return int(said) not in PLAIN_FTYPES
    except (ImportError, ValueError, OSError):  # not installed, or not a model it reads: the tensor table says
        pass
    import gguf  # the [train] extra's GGUF reader; only self-play, which needs that extra, asks

    try:
        reader = gguf.GGUFReader(str(source))
    except (OSError, ValueError) as exc:
        raise ModelUnavailable(f"{source} is not a GGUF file llama.cpp can serve ({exc})",
                               "point the base at a .gguf model file") from exc
    plain = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16}
    return any(len(t.shape) > 1 and t.tensor_type not in plain for t in reader.tensors)


def location(source: Path) -> Path:
    """Return where the server for base ``source`` in the format chosen now loads from, converting nothing."""
    fmt = chosen()
    return source if fmt == SHIPPED else path(source, fmt)
