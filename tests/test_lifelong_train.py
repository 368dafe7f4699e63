"""The TRL trainer path (needs the [train] extra; skipped without it): the exported files train a LoRA adapter.

Run it in a job that installs the extra: ``pip install torch==2.13.0 && pip install -e '.[train]'``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_lifelong_gate import pair

from swm.lifelong.update import export
from swm.training.trl_update import TrainSettings, train_adapter

pytest.importorskip("torch")
pytest.importorskip("trl")
CHAT = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|> {% endif %}")


def tiny_llama(path: Path) -> Path:
    """Save a randomly initialised two-layer Llama with a locally built word-level tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = "<unk> <pad> <s> </s> <|user|> <|assistant|> $ . , ? ! : ' I can offer for the bike no Ava at turn 0 " \
            "would work 500 520 whatever".split()
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = CHAT
    config = LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=1, bos_token_id=2, eos_token_id=3)
    LlamaForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path


@pytest.mark.parametrize("method", ["dpo", "kto"])
def test_trl_trains_on_the_export(tmp_path: Path, method: str, capfd: pytest.CaptureFixture[str]) -> None:
    """The JSONL export, read back as TRL would, trains an adapter (extra metadata columns are ignored).

    Without a progress bar the trainer prints nothing on standard output: `swm learn --json` writes its
    JSON there (transformers' PrinterCallback printed each step's log dict before it)."""
    import json

    model = tiny_llama(tmp_path / "tiny")
    pairs = [pair(), pair(chosen="Would $520 work?", rejected="No."), pair(chosen="I can offer $500.", rejected="!")]
    data = export(pairs, method, tmp_path / f"{method}.jsonl")
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    stats = train_adapter(method, rows, str(model), tmp_path / "out",
                          settings=TrainSettings(max_steps=1, batch_size=2, max_length=128, progress=False))
    assert stats.steps == 1 and (tmp_path / "out" / "adapter_model.safetensors").is_file()
    assert "loss" not in capfd.readouterr().out
