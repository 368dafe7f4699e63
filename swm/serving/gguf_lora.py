"""GGUF files for llama.cpp, written with the ``gguf`` package: a PEFT LoRA adapter, and a base model.

`adapter_to_gguf` converts a PEFT LoRA adapter of a Llama-architecture model (SmolLM2 and the
tests' tiny Llama) into llama.cpp's GGUF LoRA format, as llama.cpp's own
``convert_lora_to_gguf.py`` does: ``general.type = adapter``, ``adapter.type = lora``,
``adapter.lora.alpha``, and per target weight ``<gguf name>.lora_a`` (rank × in) and
``.lora_b`` (out × rank), and ``swm.adapter.sha256``, the content hash of the adapter it came
from (`swm.serving.verify` checks it after a deploy). llama.cpp stores the query and key projections with their rows
permuted for its rotary embedding (transformers undoes that when it dequantises a GGUF), so
their ``lora_b`` rows get the same permutation. llama.cpp scales the product by alpha / rank,
as PEFT does.

`write_base_gguf` writes a Hugging Face Llama model as an F32 GGUF with the tokenizer of an
existing GGUF whose vocabulary it shares (how the tests serve a tiny random Llama with
SmolLM2's tokenizer). Any other architecture is refused with a one-line error naming the tool
that can convert it.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path
from typing import Any

from swm.errors import InputError
from swm.serving.verify import SOURCE_KEY, adapter_sha256

ARCHITECTURES = ("llama",)
ADAPTER_META = "swm_base.json"  # written beside the PEFT adapter: what converting it needs to know
_CONVERT_HINT = ("convert it with llama.cpp's convert_lora_to_gguf.py (in the llama-cpp-python sdist) and serve it "
                 "yourself, or serve the PEFT adapter with a runtime-LoRA server (--lora-server)")


def permute_rows(weights: Any, n_head: int, n_head_kv: int | None = None) -> Any:
    """Permute a query/key projection's rows the way llama.cpp's converter does (numpy or torch)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    shape = weights.shape
    return weights.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def base_meta(config: Any, base: str) -> dict[str, Any]:
    """Return what converting an adapter of this base needs: architecture, heads, layers, base path."""
    return {"base": base, "model_type": getattr(config, "model_type", ""),
            "num_attention_heads": int(config.num_attention_heads),
            "num_key_value_heads": int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads),
            "num_hidden_layers": int(config.num_hidden_layers)}


def _check_arch(model_type: str, what: str) -> None:
    if model_type not in ARCHITECTURES:
        raise InputError(f"cannot write a GGUF {what} for a {model_type or 'unknown'!s} model "
                         f"(swm converts {', '.join(ARCHITECTURES)})", _CONVERT_HINT)


def _writer(out: Path) -> tuple[Any, Path]:
    """Open a GGUF writer on a partial file beside ``out`` (renamed into place by `_finish`)."""
    import gguf  # optional: the [train] extra

    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + f".partial-{os.getpid()}")
    return gguf.GGUFWriter(partial, "llama"), partial


def _finish(writer: Any, partial: Path, out: Path) -> Path:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(partial, out)
    return out


def adapter_to_gguf(adapter_dir: Path, out: Path, meta: dict[str, Any] | None = None) -> Path:
    """Convert a PEFT LoRA adapter directory into a GGUF LoRA at ``out`` (written whole or not at all)."""
    import gguf  # optional: the [train] extra
    import numpy as np  # optional: the [train] extra
    from safetensors.numpy import load_file  # optional: the [train] extra

    adapter_dir = Path(adapter_dir)
    config_path, weights_path = adapter_dir / "adapter_config.json", adapter_dir / "adapter_model.safetensors"
    if not config_path.is_file() or not weights_path.is_file():
        raise InputError(f"{adapter_dir} is not a PEFT adapter (adapter_config.json and adapter_model.safetensors "
                         "are needed)", "train the policy again")
    meta = meta or json.loads((adapter_dir / ADAPTER_META).read_text())
    _check_arch(str(meta.get("model_type", "")), "LoRA")
    try:
        config = json.loads(config_path.read_text())
        tensors = load_file(str(weights_path))
    except (ValueError, OSError) as exc:
        raise InputError(f"the adapter in {adapter_dir} is corrupt: {exc}", "train the policy again") from exc
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, int(meta["num_hidden_layers"]))
    pairs: dict[str, dict[str, Any]] = {}
    for key, value in tensors.items():
        part = "a" if ".lora_A." in key else "b" if ".lora_B." in key else None
        if part is None:
            raise InputError(f"the adapter in {adapter_dir} holds {key}, which is not a LoRA A/B weight",
                             _CONVERT_HINT)
        hf_name = key.removeprefix("base_model.model.").split(".lora_")[0] + ".weight"
        target = names.get_name(hf_name, try_suffixes=(".weight",))
        if target is None:
            raise InputError(f"no llama.cpp tensor for adapter weight {hf_name}", _CONVERT_HINT)
        pairs.setdefault(target, {})[part] = (hf_name, value.astype(np.float32))
    writer, partial = _writer(Path(out))
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(config.get("lora_alpha", config.get("r", 8))))
    writer.add_string(SOURCE_KEY, adapter_sha256(adapter_dir))  # what it was converted from (swm.serving.verify)
    n_head, n_kv = int(meta["num_attention_heads"]), int(meta["num_key_value_heads"])
    for target in sorted(pairs):
        found = pairs[target]
        if set(found) != {"a", "b"}:
            raise InputError(f"the adapter in {adapter_dir} lacks lora_A or lora_B for {target}", "train it again")
        hf_name, lora_a = found["a"]
        _, lora_b = found["b"]
        if ".q_proj." in hf_name:
            lora_b = permute_rows(lora_b, n_head, n_head)
        elif ".k_proj." in hf_name:
            lora_b = permute_rows(lora_b, n_head, n_kv)
        writer.add_tensor(f"{target}.lora_a", np.ascontiguousarray(lora_a))
        writer.add_tensor(f"{target}.lora_b", np.ascontiguousarray(lora_b))
    return _finish(writer, partial, Path(out))


# GGUF's value types as `struct` codes, little-endian: 8 is a string, 9 an array (of one type, not of arrays)
_GGUF_NUMBERS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def _tokenizer_fields(source: Path) -> list[tuple[str, Any, int, int | None]]:
    """Read the ``tokenizer.*`` keys of a GGUF: (name, value, type, array item type), from its header alone.

    `gguf.GGUFReader` parses all 98,000 strings of SmolLM2's vocabulary and merges one numpy view at a time:
    4-7 CPU-seconds for every tiny Llama written; this walk of the key-value section takes a fraction of one.
    The file is mapped, not read: only the header's pages are touched, not the tensors after it.
    """
    with open(source, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"GGUF" or struct.unpack_from("<I", data, 4)[0] < 2:  # version 1 counted in 32 bits
            raise InputError(f"{source} is not a GGUF file of version 2 or later", "pass a current llama.cpp GGUF")
        at = 24

        def numbers(code: str, count: int = 1) -> tuple[Any, ...]:
            nonlocal at
            values = struct.unpack_from(f"<{count}{code}", data, at)
            at += struct.calcsize(f"<{count}{code}")
            return values

        def text() -> str:
            nonlocal at
            (size,) = numbers("Q")
            at += size
            return data[at - size:at].decode("utf-8")

        def values(kind: int, count: int) -> list[Any]:
            if kind == 8:
                return [text() for _ in range(count)]
            if kind not in _GGUF_NUMBERS:
                raise InputError(f"{source}: unknown GGUF value type {kind}", "use a llama.cpp GGUF")
            return list(numbers(_GGUF_NUMBERS[kind], count))

        fields: list[tuple[str, Any, int, int | None]] = []
        for _ in range(struct.unpack_from("<Q", data, 16)[0]):
            name, (kind,) = text(), numbers("I")
            sub: int | None = None
            if kind == 9:
                (sub,), (size,) = numbers("I"), numbers("Q")
                if sub == 9:
                    raise InputError(f"{source}: nested arrays are not read ({name})", "use a llama.cpp GGUF")
                content: Any = values(sub, size)
            else:
                (content,) = values(kind, 1)
            if name.startswith("tokenizer."):
                fields.append((name, content, kind, sub))
        return fields


def _copy_tokenizer(writer: Any, source: Path) -> int:
    """Copy every ``tokenizer.*`` key of a GGUF into ``writer``; return its vocabulary size."""
    import gguf  # optional: the [train] extra

    vocab = 0
    for name, value, kind, sub in _tokenizer_fields(source):
        if name == "tokenizer.ggml.tokens":
            vocab = len(value)
        item = gguf.GGUFValueType(sub) if sub is not None else None
        writer.add_key_value(name, value, gguf.GGUFValueType(kind), item)
    return vocab


def write_base_gguf(model: Any, tokenizer_gguf: Path, out: Path, name: str = "swm base") -> Path:
    """Write a Hugging Face Llama model (F32) as a GGUF base with the tokenizer of ``tokenizer_gguf``."""
    import gguf  # optional: the [train] extra
    import numpy as np  # optional: the [train] extra

    config = model.config
    _check_arch(getattr(config, "model_type", ""), "base model")
    writer, partial = _writer(Path(out))
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)
    vocab = _copy_tokenizer(writer, Path(tokenizer_gguf))
    if vocab != config.vocab_size:
        raise InputError(f"the model's vocabulary ({config.vocab_size}) is not the tokenizer GGUF's ({vocab})",
                         "convert the model with llama.cpp's convert_hf_to_gguf.py and pass --base-gguf")
    n_head = int(config.num_attention_heads)
    n_kv = int(getattr(config, "num_key_value_heads", None) or n_head)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // n_head)
    writer.add_block_count(int(config.num_hidden_layers))
    writer.add_context_length(int(config.max_position_embeddings))
    writer.add_embedding_length(int(config.hidden_size))
    writer.add_feed_forward_length(int(config.intermediate_size))
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_freq_base(float((getattr(config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(int(config.vocab_size))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, int(config.num_hidden_layers))
    tied = bool(getattr(config, "tie_word_embeddings", False))
    for key, tensor in model.state_dict().items():
        if tied and key == "lm_head.weight":
            continue
        target = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if target is None:
            raise InputError(f"no llama.cpp tensor for {key}", _CONVERT_HINT)
        data = tensor.detach().to("cpu").float().numpy()
        if ".q_proj." in key:
            data = permute_rows(data, n_head, n_head)
        elif ".k_proj." in key:
            data = permute_rows(data, n_head, n_kv)
        writer.add_tensor(target, np.ascontiguousarray(data.astype(np.float32)))
    return _finish(writer, partial, Path(out))
