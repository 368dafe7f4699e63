"""The GGUF tokenizer copy reads a GGUF's header as the ``gguf`` package's own reader does (`swm.serving.gguf_lora`)."""

from __future__ import annotations

from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf", reason="needs the [embedded] extra")

from swm.serving.gguf_lora import _tokenizer_fields  # noqa: E402


def test_the_tokenizer_fields_are_what_gguf_reader_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)  # not a tokenizer key: left out
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["<s>", "é", "Ġhello", ""])
    writer.add_token_types([3, 1, 1, 1])
    writer.add_token_scores([0.0, -1.5, -2.25, 1e-3])
    writer.add_token_merges(["Ġ h", "e llo"])
    writer.add_bos_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    writer.add_key_value("tokenizer.test.flags", [True, False], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL)
    writer.add_key_value("tokenizer.test.big", 2**40, gguf.GGUFValueType.UINT64)
    writer.add_key_value("tokenizer.test.ratio", 0.5, gguf.GGUFValueType.FLOAT64)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    reader = gguf.GGUFReader(str(path))
    expected = [(name, field.contents(), field.types[0].value, field.types[1].value if len(field.types) > 1 else None)
                for name, field in reader.fields.items() if name.startswith("tokenizer.")]
    assert len(expected) == 11
    assert _tokenizer_fields(path) == expected
