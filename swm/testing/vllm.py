"""A loopback stand-in for vLLM with runtime LoRA (tests and fault benches): completions decoded in torch.

`FakeOpenAIServer(lora=True)` answers ``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter`` and
``/v1/models`` as vLLM does; `TorchLora` is its ``"<completion>"`` script: each request's prompt
decoded by a tiny base with the adapter the request names (its ``model``) applied by PEFT —
greedily at temperature 0, else sampled with the request's seed — so a served reply is what that
adapter says. A request with ``logprobs`` N also gets, per generated token, its log-prob and the N
likeliest next tokens' (as ``token_id:ID`` with ``return_tokens_as_token_ids``), from the raw model as
vLLM V1 returns them. ``ignore_adapter`` makes a server that accepts and lists every adapter but plays
the base: always (``True`` or ``"always"``), only on the sampled path (``"sampled"``: the adapter at
temperature 0, where a greedy probe looks), everywhere but on requests at temperature 0 or asking for log-probs
(``"unasked"``: honest only where it is checked, before rollouts asked for log-probs), or everywhere but where a
probe looks (``"probes"``: temperature 0, or one token): the wrong-adapter cases swm must catch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swm.testing.server import FakeOpenAIServer

# a chat template over the word-level vocabulary below
CHAT = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} </s> {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|> {% endif %}")

WORDS = ("<unk> <pad> <s> </s> <|user|> <|assistant|> $ . , ? ! : ' I can offer for the bike no Ava at turn 0 "
         "would work 500 520 whatever hello Say to other players in one short sentence").split()


def wide_tiny_llama(path: Path) -> Path:
    """A two-layer random Llama with a word-level tokenizer and wide logits (clear greedy choices, which a probe
    can tell apart; `swm.serving.verify` forgives a parting at a near tie)."""
    import torch  # optional: the [train] extra
    from tokenizers import Tokenizer, models, pre_tokenizers  # optional: the [train] extra
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # optional: the [train] extra

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

    def __init__(self, base: Path, adapters: Callable[[], dict[str, str]], ignore_adapter: bool | str = False) -> None:
        self.base = base
        self.adapters = adapters  # the server's loaded adapters now: name -> directory
        self.ignore_adapter = ignore_adapter
        from transformers import AutoTokenizer  # optional: the [train] extra

        self.tokenizer = AutoTokenizer.from_pretrained(str(base))
        self.lock = threading.Lock()  # the server answers on several threads; torch decodes one at a time
        self._models: dict[str, Any] = {}
        self.played: list[str] = []  # the adapter directory each completion was decoded with ("" the base)

    def _model(self, directory: str) -> Any:
        from peft import PeftModel  # optional: the [train] extra
        from transformers import AutoModelForCausalLM  # optional: the [train] extra

        if directory not in self._models:
            model = AutoModelForCausalLM.from_pretrained(str(self.base)).eval()
            self._models[directory] = PeftModel.from_pretrained(model, directory).eval() if directory else model
        return self._models[directory]

    def _ignores(self, body: dict[str, Any]) -> bool:
        mode = "always" if self.ignore_adapter is True else str(self.ignore_adapter or "")
        sampled = float(body.get("temperature") or 0.0) > 0
        probe = not sampled or int(body.get("max_tokens") or 16) == 1
        return mode == "always" or (mode == "sampled" and sampled) or (mode == "probes" and not probe) \
            or (mode == "unasked" and sampled and not body.get("logprobs"))

    def __call__(self, prompt: str, body: dict[str, Any]) -> str | dict[str, Any]:
        import torch  # optional: the [train] extra

        name = str(body.get("model", ""))
        temperature = float(body.get("temperature") or 0.0)
        directory = "" if self._ignores(body) else self.adapters().get(name, "")
        top = int(body.get("logprobs") or 0)
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        pieces: list[str] = []
        values: list[float] = []
        tops: list[dict[str, float]] = []
        stop = [s for s in (body.get("stop") or []) if s]
        tok = self.tokenizer
        sent = body.get("prompt")  # a prompt of token ids (a seat's append-only chat) is read as its ids, as vLLM does
        ids = [int(i) for i in sent] if isinstance(sent, list) and all(isinstance(i, int) for i in sent) \
            else [int(i) for i in tok(prompt, add_special_tokens=False)["input_ids"]]
        generator = torch.Generator().manual_seed(int(body.get("seed") or 0))
        tokens: list[int] = []
        with self.lock, torch.no_grad():
            self.played.append(directory)
            model = self._model(directory)
            for _ in range(int(body.get("max_tokens") or 16)):
                logits = model(input_ids=torch.tensor([ids + tokens])).logits[0, -1].float()
                logp = torch.log_softmax(logits, dim=-1)
                if top:
                    best = torch.topk(logp, min(top, logp.shape[0]))
                    tops.append({self._piece(int(t), as_ids): float(v) for v, t in zip(best.values, best.indices,
                                                                                         strict=True)})
                if temperature <= 0:
                    token = int(torch.argmax(logits))
                else:
                    probs = torch.softmax(logits / temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generator))
                if top:
                    pieces.append(self._piece(token, as_ids))
                    values.append(float(logp[token]))
                if token == tok.eos_token_id:
                    break
                tokens.append(token)
                text = str(tok.decode(tokens, skip_special_tokens=True))
                if any(s in text for s in stop):
                    break
        text = str(tok.decode(tokens, skip_special_tokens=True))
        cut = [i for i in (text.find(s) for s in stop) if i >= 0]
        text = text[:min(cut)] if cut else text
        if not top:
            return text
        return {"text": text, "logprobs": {"tokens": pieces, "token_logprobs": values, "top_logprobs": tops}}

    def _piece(self, token: int, as_ids: bool) -> str:
        return f"token_id:{token}" if as_ids else str(self.tokenizer.convert_ids_to_tokens(token))


class FakeVllm:
    """A fake vLLM (`FakeOpenAIServer` with ``lora=True``) whose completions `TorchLora` decodes over ``base``."""

    def __init__(self, base: Path, ignore_adapter: bool | str = False, record: bool = True) -> None:
        self.torch = TorchLora(base, lambda: self.server.adapters(), ignore_adapter=ignore_adapter)
        self.server = FakeOpenAIServer(lora=True, record=record, scripts={"<completion>": self.torch})
