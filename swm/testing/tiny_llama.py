"""A tiny random Llama for tests and fault benches (no download): SmolLM2's tokenizer, two small layers.

It exists twice: as a Hugging Face directory (what TRL trains) and as an F32 GGUF with the
shipped SmolLM2 GGUF's tokenizer (what llama.cpp serves), written by `swm.serving.gguf_lora`.
"""

from __future__ import annotations

from pathlib import Path

from swm.serving.embedded import gguf_path
from swm.serving.engine import dequantised_cache
from swm.serving.gguf_lora import write_base_gguf


def make_tiny_llama(out: Path, seed: int = 0) -> Path:
    """Write the tiny model into ``out`` (``config.json``, weights, tokenizer, ``base.gguf``)."""
    import torch  # optional: the [train] extra
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM  # optional: the [train] extra


    shipped = gguf_path()
    cached = dequantised_cache(shipped)  # the shipped tokenizer as `load_base` saved it, when it has
    tokenizer = (AutoTokenizer.from_pretrained(str(cached)) if cached is not None and cached.is_dir()
                 else AutoTokenizer.from_pretrained(str(shipped.parent), gguf_file=shipped.name))
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2, rms_norm_eps=1e-5,
                         initializer_range=0.5)  # wide logits: a few LoRA steps can make one reply the argmax
    model = LlamaForCausalLM(config).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_base_gguf(model, shipped, out / "base.gguf", name="tiny random llama")
    return out
