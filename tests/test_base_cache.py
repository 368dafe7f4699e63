"""A GGUF base is dequantised once: later loads read the cached checkpoint, with the same tensors and tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_a_gguf_base_is_dequantised_once_and_loads_the_same_from_the_cache(
        tiny_gguf_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import transformers

    from swm.serving.engine import dequantised_cache
    from swm.training.base import _one_at_a_time, _save_dequantised, load_base

    monkeypatch.setenv("SWM_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tiny_gguf_llama / "base.gguf"
    cached = dequantised_cache(gguf)
    assert cached is not None and not cached.exists()
    first, tok = load_base(str(gguf))
    assert cached.is_dir() and (cached / "config.json").is_file()
    assert [p.name for p in cached.parent.iterdir() if p.suffix != ".lock"] == [cached.name], "no half-written copy"
    # base.gguf is the F32 copy of the tiny model's own checkpoint: dequantised, it is those tensors exactly
    made = transformers.AutoModelForCausalLM.from_pretrained(tiny_gguf_llama).state_dict()
    assert made.keys() == first.state_dict().keys()
    assert all(torch.equal(made[k], v) for k, v in first.state_dict().items()), "the GGUF read back as it was written"

    reads: list[dict[str, object]] = []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args: object, **kwargs: object) -> object:
        reads.append({"path": str(args[0]), **kwargs})
        return real(*args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    again, tok2 = load_base(str(gguf))
    assert reads == [{"path": str(cached), "local_files_only": True}], "the second load reads the cache, no GGUF"
    assert first.state_dict().keys() == again.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values(), strict=True))
    assert all(p.dtype == torch.float32 for p in again.parameters())
    assert getattr(again, "hf_quantizer", None) is None and getattr(again.config, "quantization_config", None) is None
    assert tok2.chat_template == tok.chat_template
    assert tok("Sally <|im_start|> Anne")["input_ids"] == tok2("Sally <|im_start|> Anne")["input_ids"]
    assert tok2.pad_token == tok.pad_token

    (tmp_path / "file").write_text("not a folder")  # an unwritable cache only costs the time
    unwritable = tmp_path / "file" / "cache" / cached.name
    with _one_at_a_time(unwritable):
        _save_dequantised(first, tok, unwritable)
    assert not unwritable.exists()

