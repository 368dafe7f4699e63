"""What is served is verified: identity (the adapter's content hash) and a greedy probe against PEFT's own reply.

On the tiny random Llama (swm/testing/tiny_llama.py) served by llama.cpp: the trained adapter passes;
a server that silently serves the base, a GGUF left over from an earlier adapter, an adapter a
runtime-LoRA server never loaded, or one whose directory changed after loading, each stop the
deploy with one line.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_cpp", reason="needs the [embedded] extra")
pytest.importorskip("trl", reason="needs the [train] extra")

from test_train_serve import FAST, _rows  # noqa: E402

from swm.lifelong.serve import verify_deploy  # noqa: E402
from swm.lifelong.update import action_completion  # noqa: E402
from swm.serving import embedded, serve_adapter  # noqa: E402
from swm.serving.runtime_lora import load_lora_adapter  # noqa: E402
from swm.serving.verify import (  # noqa: E402
    ServedMismatch,
    adapter_sha256,
    check_probe,
    check_runtime_identity,
    gguf_source,
    greedy_probe,
)
from swm.testing import FakeOpenAIServer  # noqa: E402
from swm.training.trl_update import train_adapter  # noqa: E402

SAID = "I offer five hundred dollars."


@pytest.fixture(scope="module")
def deployed(tiny_gguf_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An SFT adapter on the tiny model (short prompts), served by llama.cpp, and its first training prompt."""
    out = tmp_path_factory.mktemp("verify")
    rows = _rows(action_completion("speak", SAID), real=False)
    train_adapter("sft", rows, str(tiny_gguf_llama), out / "p1", settings=FAST)
    spec, gguf = serve_adapter(out / "p1", base_gguf=tiny_gguf_llama / "base.gguf")
    return {"dir": out / "p1", "spec": spec, "gguf": gguf, "prompt": rows[0]["prompt"]}


def test_the_trained_adapter_passes_and_its_identity_is_recorded(tiny_gguf_llama: Path,
                                                                 deployed: dict[str, Any]) -> None:
    record = verify_deploy(deployed["spec"], deployed["dir"], str(tiny_gguf_llama), deployed["prompt"])
    assert record["sha256"] == adapter_sha256(deployed["dir"]) == gguf_source(deployed["gguf"])
    assert record["name"] == str(deployed["gguf"]) and record["probe"]["reply"]


def test_a_server_that_silently_serves_the_base_is_caught(tiny_gguf_llama: Path, deployed: dict[str, Any]) -> None:
    from peft import PeftModel

    from swm.training.base import load_base

    model, tok = load_base(str(tiny_gguf_llama))
    trained = PeftModel.from_pretrained(model, str(deployed["dir"]))
    prompt = str(tok.apply_chat_template(deployed["prompt"], add_generation_prompt=True, tokenize=False))
    probe = greedy_probe(trained, tok, prompt)
    base_only = embedded.ensure_server(base=tiny_gguf_llama / "base.gguf")
    with pytest.raises(ServedMismatch) as caught:
        check_probe(base_only.base_url, "embedded", probe, tok, fields=base_only.fields)
    assert "does not play the trained adapter" in str(caught.value) and "\n" not in str(caught.value)
    served = embedded.ensure_server(base=tiny_gguf_llama / "base.gguf", lora=deployed["gguf"])
    # the server with the adapter (on llama-server: the request that names it) passes the same probe
    check_probe(served.base_url, "embedded", probe, tok, fields=served.fields)


def test_a_gguf_left_from_an_earlier_adapter_is_refused(tiny_gguf_llama: Path, deployed: dict[str, Any],
                                                        tmp_path: Path) -> None:
    retrained = tmp_path / "p1"
    shutil.copytree(deployed["dir"], retrained)
    config = retrained / "adapter_config.json"
    config.write_text(config.read_text().replace('"lora_alpha": 16', '"lora_alpha": 12'))  # trained again, in place
    shutil.copy(deployed["gguf"], retrained.with_suffix(".gguf"))  # the old conversion is still beside it
    spec, _ = serve_adapter(retrained, base_gguf=tiny_gguf_llama / "base.gguf")
    with pytest.raises(ServedMismatch, match="was converted from adapter"):
        verify_deploy(spec, retrained, str(tiny_gguf_llama), deployed["prompt"])


def test_a_runtime_lora_server_must_list_the_adapter_with_its_content(deployed: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    sha = adapter_sha256(deployed["dir"])
    with FakeOpenAIServer(lora=True) as server:
        with pytest.raises(ServedMismatch, match="does not list adapter swm-p1"):
            check_runtime_identity(server.base_url, "swm-p1", sha)
        copy = tmp_path / "loaded"
        shutil.copytree(deployed["dir"], copy)
        load_lora_adapter(server.base_url, "swm-p1", str(copy))
        check_runtime_identity(server.base_url, "swm-p1", sha)
        (copy / "adapter_config.json").write_text((copy / "adapter_config.json").read_text() + " ")
        with pytest.raises(ServedMismatch, match="whose content is not the trained adapter's"):
            check_runtime_identity(server.base_url, "swm-p1", sha)


class _Words:
    """A tokenizer stand-in for `probe_difference`: token i decodes to WORDS[i]; 0 is the end of the reply."""

    eos_token_id = 0
    WORDS = ("", "Ben", " Khan", "\n", " Ali")

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(self.WORDS[i] for i in ids if i != self.eos_token_id)


@pytest.mark.parametrize(("served", "stop", "ok"), [
    ("Ben Khan", ["\n"], True),
    ("Ben Khan\n", ["\n"], True),  # a newline ends a decision's reply as the end-of-reply token does
    ("Ben Khan\nAli", ["\n"], True),  # a server that ignores `stop` is cut where the sampler cuts
    ("Ben Khan\n", [], False),  # where a newline does not end the reply, a clear choice differs
    ("Ben Ali", ["\n"], False),
])
def test_the_probe_compares_replies_up_to_where_the_sampler_stops(monkeypatch: pytest.MonkeyPatch, served: str,
                                                                   stop: list[str], ok: bool) -> None:
    from swm.serving import verify
    from swm.serving.verify import Probe

    sent: list[Any] = []
    monkeypatch.setattr(verify, "served_reply", lambda *a, **k: sent.append(k.get("stop")) or served)
    # the adapter's reply: "Ben", " Khan", end — each a clear choice (its end-of-reply token 2 nats over "\n")
    probe = Probe(prompt="p", tokens=[1, 2, 0], text="Ben Khan", margins=[3.0, 2.0, 2.0], stop=stop)
    if ok:
        check_probe("http://127.0.0.1:1/v1", "embedded", probe, _Words())
    else:
        with pytest.raises(ServedMismatch):
            check_probe("http://127.0.0.1:1/v1", "embedded", probe, _Words())
    assert sent == [stop]


def test_a_greedy_probe_ends_where_a_stop_string_begins(tiny_gguf_llama: Path, deployed: dict[str, Any]) -> None:
    from peft import PeftModel

    from swm.training.base import load_base

    model, tok = load_base(str(tiny_gguf_llama))
    trained = PeftModel.from_pretrained(model, str(deployed["dir"]))
    prompt = str(tok.apply_chat_template(deployed["prompt"], add_generation_prompt=True, tokenize=False))
    full = greedy_probe(trained, tok, prompt)
    assert len(full.text) >= 2, full.text
    stop = full.text[1:2]  # a string its reply holds after the first character
    cut = greedy_probe(trained, tok, prompt, stop=[stop])
    assert cut.text == full.text[:full.text.find(stop)] and cut.stop == [stop]


@pytest.mark.parametrize(("margin", "ok"), [(0.31, True), (0.99, True), (1.5, False)])
def test_a_first_token_parting_is_forgiven_only_within_the_probe_tolerance(margin: float, ok: bool) -> None:
    """Quantised serving flipped a trained PPO adapter's first token at 0.31 nats: a near tie, not a missing adapter."""
    from swm.serving.verify import Probe, probe_difference

    probe = Probe(prompt="p", tokens=[1, 2, 0], text="Ben Khan", margins=[margin, 3.0, 3.0])
    assert (probe_difference(probe, " Ali", _Words()) is None) == ok
