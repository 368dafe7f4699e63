"""A loopback stand-in for vLLM with runtime LoRA: the fake server's routes, completions decoded in torch.

`FakeOpenAIServer(lora=True)` answers ``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter`` and
``/v1/models`` as vLLM does; `TorchLora` is its ``"<completion>"`` script: each request's prompt
decoded by a tiny base with the adapter the request names (its ``model``) applied by PEFT —
greedily at temperature 0, else sampled with the request's seed — so a served reply is what that
adapter says. ``ignore_adapter=True`` makes a server that accepts and lists every adapter but plays
the base: the wrong-adapter case swm must catch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from test_lifelong_train import CHAT
from transformers import AutoModelForCausalLM, AutoTokenizer

WORDS = ("<unk> <pad> <s> </s> <|user|> <|assistant|> $ . , ? ! : ' I can offer for the bike no Ava at turn 0 "
         "would work 500 520 whatever hello Say to other players in one short sentence").split()


def wide_tiny_llama(path: Path) -> Path:
    """A two-layer random Llama with a word-level tokenizer and wide logits (clear greedy choices, which a probe
    can tell apart; `swm.serving.verify` forgives a parting at a near tie)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")
    fast.chat_template = CHAT
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                         pad_token_id=1, bos_token_id=2, eos_token_id=3, initializer_range=0.5)
    LlamaForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)
    return path


class TorchLora:
    """The completions of ``base`` with the adapter each request names, as a `FakeOpenAIServer` script."""

    def __init__(self, base: Path, adapters: Callable[[], dict[str, str]], ignore_adapter: bool = False) -> None:
        self.base = base
        self.adapters = adapters  # the server's loaded adapters now: name -> directory
        self.ignore_adapter = ignore_adapter
        self.tokenizer = AutoTokenizer.from_pretrained(str(base))
        self.lock = threading.Lock()  # the server answers on several threads; torch decodes one at a time
        self._models: dict[str, Any] = {}
        self.played: list[str] = []  # the adapter directory each completion was decoded with ("" the base)

    def _model(self, directory: str) -> Any:
        if directory not in self._models:
            model = AutoModelForCausalLM.from_pretrained(str(self.base)).eval()
            self._models[directory] = PeftModel.from_pretrained(model, directory).eval() if directory else model
        return self._models[directory]

    def __call__(self, prompt: str, body: dict[str, Any]) -> str:
        name = str(body.get("model", ""))
        directory = "" if self.ignore_adapter else self.adapters().get(name, "")
        temperature = float(body.get("temperature") or 0.0)
        stop = [s for s in (body.get("stop") or []) if s]
        tok = self.tokenizer
        ids = [int(i) for i in tok(prompt, add_special_tokens=False)["input_ids"]]
        generator = torch.Generator().manual_seed(int(body.get("seed") or 0))
        tokens: list[int] = []
        with self.lock, torch.no_grad():
            self.played.append(directory)
            model = self._model(directory)
            for _ in range(int(body.get("max_tokens") or 16)):
                logits = model(input_ids=torch.tensor([ids + tokens])).logits[0, -1].float()
                if temperature <= 0:
                    token = int(torch.argmax(logits))
                else:
                    probs = torch.softmax(logits / temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generator))
                if token == tok.eos_token_id:
                    break
                tokens.append(token)
                text = str(tok.decode(tokens, skip_special_tokens=True))
                if any(s in text for s in stop):
                    break
        text = str(tok.decode(tokens, skip_special_tokens=True))
        cut = [i for i in (text.find(s) for s in stop) if i >= 0]
        return text[:min(cut)] if cut else text
