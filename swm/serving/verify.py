"""Verify what is served: the adapter a server plays is the one that was trained, by identity and by a probe.

A trained adapter that silently never reaches the server (a stale GGUF reused, a server started
without its LoRA, a name that falls back to the base) makes training sample the old policy
while every report says otherwise. After each deploy both loops call `verify_served`:

* **identity** — the adapter's content hash (`adapter_sha256`: SHA-256 of its weights and
  config) is recorded with the policy. Embedded: the GGUF LoRA carries the hash of the adapter
  it was converted from (``swm.adapter.sha256``, written by `swm.serving.gguf_lora`), and the
  running llama.cpp server must be the one started with that GGUF (on llama-server, the adapter
  the server itself lists under the id the requests name: `swm.serving.embedded.served_lora`).
  Runtime LoRA: the server's ``/v1/models`` must list the adapter's name, and where it says which directory it loaded
  (vLLM's ``root``), that directory's hash must be the recorded one.
* **probe** — one prompt decoded greedily (temperature 0) by the server must give what the
  trained adapter gives in torch (PEFT, `greedy_probe`). A first difference is forgiven only
  where the adapter itself hesitates: its two best next tokens within ``tolerance`` nats of each
  other (`PROBE_TOLERANCE`: llama.cpp's quantised arithmetic flips such a near tie, not a clear choice).

* **log-probabilities** (runtime LoRA) — a greedy reply proves nothing where the trained adapter's
  greedy reply is the base's (a few PPO steps rarely change it), and a server may play the adapter
  only at temperature 0. So `logprob_probes` picks, along the adapter's greedy replies to a few
  prompts, the positions where its next-token distribution and the base's (the same PEFT model with
  its adapter disabled) differ most, and `check_logprobs` asks the server for its top next-token
  log-probabilities there (``max_tokens`` 1, ``logprobs`` `LOGPROB_TOP`), at temperature 0 and again
  at the sampling temperature with a seed. At each position the served log-probs must lie within
  `LOGPROB_TOLERANCE` nats (mean absolute difference over the served tokens) of the adapter's, and,
  where the adapter and the base differ by more than twice the tolerance (`separation`), closer to
  the adapter's than to the base's: there the base cannot pass. Where they differ by less at every
  position (a fresh adapter is the base), the check says so in its record (``discriminating``).
  Served log-probs are read both as vLLM V1 returns them (the raw model's) and scaled by the
  temperature (V0), whichever fits the adapter.
  Cost per verified adapter: a greedy reply of `LOGPROB_REPLY_TOKENS` tokens and two forward passes
  per prompt in torch, and ``2 × LOGPROB_POSITIONS`` one-token requests to the server.

* **the rollouts' own tokens** (runtime LoRA) — the probes above are requests a server can tell from a
  rollout's (one token, or temperature 0), so a server may play the adapter on them and the base on every
  other request. Each rollout request therefore asks for the server's log-prob of every token it samples
  (``logprobs`` 1, as token ids), and where the torch policy scores those tokens (π_old, at the update)
  `check_sampled` compares the two at temperature 1: their mean absolute difference over the iteration's
  tokens must be within `SAMPLED_TOLERANCE` nats. No forward pass is added: torch's temperature-1
  log-probs come from the forward that scores π_old.

A mismatch raises `ServedMismatch`, one line, which stops the cycle or iteration.
"""

from __future__ import annotations

import hashlib
import json
import math
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swm.credentials import endpoint_key, redact_url
from swm.errors import SWMError

SOURCE_KEY = "swm.adapter.sha256"  # the GGUF LoRA's record of the PEFT adapter it was converted from
# Greedy replies of the shipped Q4_1 SmolLM2 on llama.cpp and of its dequantised float32 copy in
# torch part after 7-14 tokens on half of ten plain prompts, at margins of 0.8-2 nats (llama.cpp
# quantises activations for Q4_1 matmuls): a longer probe would stop cycles that serve the right
# adapter. Four tokens are where a trained reply and the base's usually differ already.
PROBE_TOKENS = 4
TOLERANCE = 0.25  # nats: a near tie that llama.cpp's own batched and one-at-a-time kernels may resolve apart
# nats: a near tie under the (float32, PEFT) adapter that its quantised serving may resolve the other way.
# Trained adapters' probes parted at the first differing token at margins of 0.31 (a PPO policy's first
# token) and 0.68 (a KTO policy's end of reply), and plain greedy replies at 0.8-2 later on (above).
PROBE_TOLERANCE = 1.0


LOGPROB_TOP = 5  # served next-token log-probs compared at each probed position
LOGPROB_POSITIONS = 3  # positions probed, where the adapter and the base differ most
LOGPROB_REPLY_TOKENS = 8  # the adapter's greedy reply to each prompt: its prefixes are the candidate positions
# nats, the mean absolute difference allowed between the served log-probs and torch's float32 ones: a bf16 or fp16
# server's rounding (vLLM's default dtypes) moves log-probs by a few hundredths
LOGPROB_TOLERANCE = 0.1
# nats, the mean absolute difference allowed between a server's log-probs of the tokens it sampled and torch's: over
# many tokens the bf16 rounding above averages a few hundredths, and llama.cpp's Q4_1 SmolLM2 against its float32
# dequantised copy measured 0.064 (docs/results/selfplay-2026-11-23.md); 0.15 is below log(1 + clip) = 0.18 of the
# default clip 0.2, so a server further off than this made the rollouts more off-policy than one PPO ratio may move
SAMPLED_TOLERANCE = 0.15
SAMPLED_MIN_TOKENS = 8  # compared tokens below which the mean says nothing (a single token's rounding can be larger)


class ServedMismatch(SWMError):
    """The server does not play the adapter that was trained: the cycle stops before it samples the wrong policy."""

    exit_code = 3


def adapter_sha256(adapter_dir: Path) -> str:
    """Return the SHA-256 of a PEFT adapter's weights and config (its content, not its path)."""
    h = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        h.update(name.encode())
        h.update((Path(adapter_dir) / name).read_bytes())
    return h.hexdigest()


def gguf_source(lora_gguf: Path) -> str | None:
    """Return the adapter hash a GGUF LoRA records (None for a GGUF converted without one)."""
    import gguf  # optional: the [train] extra

    field_ = gguf.GGUFReader(str(lora_gguf)).fields.get(SOURCE_KEY)
    return str(field_.contents()) if field_ is not None else None


@dataclass
class Probe:
    """A prompt (already chat-templated), the adapter's greedy reply and its margin at each reply token."""

    prompt: str
    tokens: list[int]
    text: str
    margins: list[float] = field(default_factory=list)  # log p(best) − log p(second best), per reply token
    stop: list[str] = field(default_factory=list)  # strings that end the reply (the text is cut before them)

    def record(self) -> dict[str, Any]:
        return {"prompt_sha256": hashlib.sha256(self.prompt.encode()).hexdigest()[:16], "reply": self.text}


def greedy_probe(model: Any, tokenizer: Any, prompt: str, max_tokens: int = PROBE_TOKENS,
                 stop: Sequence[str] = ()) -> Probe:
    """Decode ``prompt`` greedily with ``model`` (the trained PEFT model) and keep each step's margin.

    Decoding ends at the end-of-reply token or once the reply holds one of ``stop`` (the strings
    that end a reply where the policy is sampled), and the text is cut before it, as a server cuts.
    """
    import torch  # optional: the [train] extra

    ids = [int(i) for i in tokenizer(prompt, add_special_tokens=False)["input_ids"]]
    tokens: list[int] = []
    margins: list[float] = []
    model.eval()
    with torch.no_grad():
        for _ in range(max_tokens):
            logits = model(input_ids=torch.tensor([ids + tokens])).logits[0, -1].float()
            top = torch.topk(torch.log_softmax(logits, dim=-1), 2)
            token = int(top.indices[0])
            margins.append(float(top.values[0] - top.values[1]))
            tokens.append(token)
            if token == tokenizer.eos_token_id or _cut(_text(tokenizer, tokens), stop) is not None:
                break
    text = _text(tokenizer, tokens)
    return Probe(prompt=prompt, tokens=tokens, text=text[:_cut(text, stop)], margins=margins, stop=list(stop))


def _text(tokenizer: Any, tokens: Sequence[int]) -> str:
    return str(tokenizer.decode([t for t in tokens if t != tokenizer.eos_token_id], skip_special_tokens=True))


def _cut(text: str, stop: Sequence[str]) -> int | None:
    """Return where the first stop string starts in ``text`` (None: none there)."""
    found = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return min(found) if found else None


def _request(base_url: str, route: str, body: dict[str, Any] | None = None) -> urllib.request.Request:
    """A GET (with ``body``: a JSON POST) to ``route`` of ``base_url``, with the endpoint's key (`swm.credentials`)."""
    clean, key = endpoint_key(base_url)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    return urllib.request.Request(clean.rstrip("/") + route, data=None if body is None else json.dumps(body).encode(),
                                  method="GET" if body is None else "POST", headers=headers)


def served_reply(base_url: str, model: str, prompt: str, max_tokens: int, timeout: float = 120.0,
                 fields: dict[str, Any] | None = None, stop: Sequence[str] = ()) -> str:
    """Ask an OpenAI-compatible server for a temperature-0 completion of a raw prompt (``fields`` added to the body)."""
    # no repeat penalty (llama-cpp-python's server applies 1.1 unless told): PEFT's greedy decoding has none
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "top_k": 1,
            "repeat_penalty": 1.0,
            **({"stop": list(stop)} if stop else {}), **(fields or {})}
    try:
        with urllib.request.urlopen(_request(base_url, "/completions", body), timeout=timeout) as reply:
            return str(json.loads(reply.read())["choices"][0].get("text") or "")
    except (urllib.error.URLError, OSError, KeyError, ValueError) as exc:
        raise ServedMismatch(f"the probe of {model} at {redact_url(base_url)} got no completion: {exc}") from exc


def probe_difference(probe: Probe, served: str, tokenizer: Any, tolerance: float = PROBE_TOLERANCE) -> str | None:
    """Return why ``served`` is not the adapter's reply to the probe, or None when it is.

    Compared as text (a served text can tokenise differently from the tokens that made it): at the
    adapter's token where the two texts first part, the difference is forgiven only at a near tie
    of the adapter's (margin under ``tolerance``), after which the replies may go their own ways.
    """
    want = probe.text
    if served == want:
        return None
    common = 0
    while common < min(len(want), len(served)) and want[common] == served[common]:
        common += 1
    ends = [len(tokenizer.decode(probe.tokens[:k + 1], skip_special_tokens=True)) for k in range(len(probe.tokens))]
    k = next((i for i, end in enumerate(ends) if end > common), len(probe.tokens) - 1)
    if probe.margins[k] < tolerance:
        return None
    return (f"the adapter says {want!r} (token {k} by {probe.margins[k]:.2f} nats) but the server says "
            f"{served!r}")


def check_probe(base_url: str, model: str, probe: Probe, tokenizer: object, tolerance: float = PROBE_TOLERANCE,
                fields: dict[str, Any] | None = None) -> None:
    """Raise `ServedMismatch` unless the server's greedy reply to the probe is the adapter's own.

    ``fields`` go into the request body: on llama-server they pick the adapter for this request.
    """
    served = served_reply(base_url, model, probe.prompt, len(probe.tokens), fields=fields, stop=probe.stop)
    served = served[:_cut(served, probe.stop)]  # a server that ignores ``stop`` is read as the sampler reads it
    why = probe_difference(probe, served, tokenizer, tolerance)
    if why is not None:
        raise ServedMismatch(f"the server at {redact_url(base_url)} does not play the trained adapter ({model}): "
                             f"probe {why}",
                             "the adapter never reached the server; restart the run (a stale GGUF or server "
                             "is replaced) or check the server's LoRA settings")


def check_embedded_identity(lora_gguf: Path, served_lora: Path | None, sha256: str) -> None:
    """Raise `ServedMismatch` unless the GGUF was converted from the adapter ``sha256`` and is what runs."""
    source = gguf_source(lora_gguf)
    if source != sha256:
        raise ServedMismatch(f"the GGUF LoRA {lora_gguf} was converted from adapter {str(source)[:12]}, "
                             f"not from the trained one ({sha256[:12]})",
                             "delete the stale .gguf beside the adapter and rerun: it is converted again")
    if served_lora is None or Path(served_lora).resolve() != Path(lora_gguf).resolve():
        raise ServedMismatch(f"the llama.cpp server runs LoRA {served_lora}, not {lora_gguf}",
                             "stop the server and rerun")


def _models(base_url: str, timeout: float) -> list[dict[str, Any]]:
    with urllib.request.urlopen(_request(base_url, "/models"), timeout=timeout) as reply:
        return list(json.loads(reply.read()).get("data") or [])


def listed_adapters(base_url: str, timeout: float = 30.0) -> set[str]:
    """The model ids a server lists now (none when it cannot be asked)."""
    try:
        return {str(m.get("id")) for m in _models(base_url, timeout)}
    except (urllib.error.URLError, OSError, ValueError):
        return set()


def check_runtime_identity(base_url: str, name: str, sha256: str, timeout: float = 30.0) -> None:
    """Raise `ServedMismatch` unless a runtime-LoRA server lists ``name`` (and its directory holds ``sha256``)."""
    shown = redact_url(base_url)
    try:
        listed = _models(base_url, timeout)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServedMismatch(f"cannot list the models of {shown} to check adapter {name}: {exc}") from exc
    entry = next((m for m in listed if m.get("id") == name), None)
    if entry is None:
        raise ServedMismatch(f"the server at {shown} does not list adapter {name}",
                             "it was never loaded or the server restarted; rerun to load it again")
    root = entry.get("root")
    if root and Path(root).is_dir() and adapter_sha256(Path(root)) != sha256:
        raise ServedMismatch(f"adapter {name} at {shown} was loaded from {root}, whose content is not the "
                             f"trained adapter's ({sha256[:12]})", "load it again under a new name")


@dataclass
class LogprobProbe:
    """A position to probe: the text before it and the next-token log-probs of the adapter and of the base there."""

    prompt: str
    adapter: list[float]  # log p(token) for every token of the vocabulary, under the adapter (temperature 1)
    base: list[float]  # the same under the base
    logits: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))  # adapter's, base's (raw)

    def separation(self, tokens: Sequence[int]) -> float:
        """Mean |adapter − base| over ``tokens`` (nats): how well these tokens tell the two apart."""
        return sum(abs(self.adapter[t] - self.base[t]) for t in tokens) / max(1, len(tokens))

    def top(self, k: int) -> list[int]:
        """The adapter's ``k`` likeliest next tokens."""
        return sorted(range(len(self.adapter)), key=lambda t: -self.adapter[t])[:k]


def logprob_probes(model: Any, tokenizer: Any, prompts: Sequence[str], positions: int = LOGPROB_POSITIONS,
                   reply_tokens: int = LOGPROB_REPLY_TOKENS, top: int = LOGPROB_TOP) -> list[LogprobProbe]:
    """Return the ``positions`` prefixes of the adapter's greedy replies where the adapter and the base differ most.

    ``model`` is the trained PEFT model (its adapter disabled gives the base); ``prompts`` are
    chat-templated. Each prompt costs a greedy reply and one forward pass of each model over it.
    """
    import torch  # optional: the [train] extra

    found: list[tuple[float, LogprobProbe]] = []
    for prompt in prompts:
        reply = greedy_probe(model, tokenizer, prompt, max_tokens=reply_tokens)
        ids = [int(i) for i in tokenizer(prompt, add_special_tokens=False)["input_ids"]]
        sequence = torch.tensor([ids + [t for t in reply.tokens if t != tokenizer.eos_token_id]])
        with torch.no_grad():
            adapter = model(input_ids=sequence).logits[0].float()
            with model.disable_adapter():
                base = model(input_ids=sequence).logits[0].float()
        for k in range(len(ids) - 1, sequence.shape[1]):
            text = prompt + _text(tokenizer, sequence[0, len(ids):k + 1].tolist())
            if k >= len(ids) and tokenizer(text, add_special_tokens=False)["input_ids"] != sequence[0, :k + 1].tolist():
                continue  # this prefix tokenises otherwise as text: the server would read another context
            probe = LogprobProbe(prompt=text, adapter=torch.log_softmax(adapter[k], -1).tolist(),
                                 base=torch.log_softmax(base[k], -1).tolist(),
                                 logits=(adapter[k].tolist(), base[k].tolist()))
            found.append((probe.separation(probe.top(top)), probe))
    found.sort(key=lambda pair: -pair[0])
    return [probe for _, probe in found[:positions]]


def served_top_logprobs(base_url: str, model: str, prompt: str, temperature: float, seed: int, top: int,
                        tokenizer: Any, fields: dict[str, Any] | None = None,
                        timeout: float = 120.0) -> dict[int, float]:
    """Ask the server for its ``top`` next-token log-probs after ``prompt`` (one token, at ``temperature``).

    Tokens come back as ids where the server can say them (vLLM's ``return_tokens_as_token_ids``),
    else as text pieces, read as ids where a piece is one token of ``tokenizer``.
    """
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": temperature, "seed": seed,
            "logprobs": top, "return_tokens_as_token_ids": True, **(fields or {})}
    shown = redact_url(base_url)
    try:
        with urllib.request.urlopen(_request(base_url, "/completions", body), timeout=timeout) as reply:
            choice = json.loads(reply.read())["choices"][0]
    except (urllib.error.URLError, OSError, KeyError, IndexError, ValueError) as exc:
        raise ServedMismatch(f"the log-prob probe of {model} at {shown} got no completion: {exc}") from exc
    tops = ((choice.get("logprobs") or {}).get("top_logprobs") or [None])[0]
    if not tops:
        raise ServedMismatch(f"the server at {shown} returns no log-probabilities for {model}, so what it plays "
                             "cannot be checked", "serve the adapters on vLLM (completions with logprobs)")
    out: dict[int, float] = {}
    for piece, value in tops.items():
        head, _, tail = str(piece).partition(":")
        if head == "token_id" and tail.isdigit():
            out[int(tail)] = float(value)
            continue
        ids = tokenizer(str(piece), add_special_tokens=False)["input_ids"]
        if len(ids) == 1:
            out[int(ids[0])] = float(value)
    return out


def logprob_difference(probe: LogprobProbe, served: dict[int, float], temperature: float,
                       tolerance: float = LOGPROB_TOLERANCE) -> tuple[str | None, dict[str, float]]:
    """Return why ``served`` is not the adapter's next-token distribution (None when it is), and the distances.

    Distances are mean absolute differences over the served tokens: to the adapter (``adapter``), to the
    base (``base``), and between the two (``separation``), read raw or scaled by ``temperature``,
    whichever fits the adapter better.
    """
    tokens = [t for t in served if 0 <= t < len(probe.adapter)]
    if not tokens:
        return "the server's log-probs name no token of the adapter's vocabulary", {}
    best: dict[str, float] = {}
    scales = [1.0] + ([temperature] if temperature > 0 and abs(temperature - 1.0) > 1e-6 else [])
    for scale in scales:
        if scale == 1.0:
            adapter, base = probe.adapter, probe.base
        else:
            adapter, base = (_log_softmax([x / scale for x in logits]) for logits in probe.logits)
        dist = {"adapter": sum(abs(served[t] - adapter[t]) for t in tokens) / len(tokens),
                "base": sum(abs(served[t] - base[t]) for t in tokens) / len(tokens),
                "separation": sum(abs(adapter[t] - base[t]) for t in tokens) / len(tokens)}
        if not best or dist["adapter"] < best["adapter"]:
            best = dist
    # closer to the base than to the adapter counts only where the two differ by more than the server's rounding
    if best["adapter"] > tolerance or (best["separation"] > 2 * tolerance and best["base"] < best["adapter"]):
        plays = f" (the base's, within {best['base']:.3f})" if best["base"] <= tolerance else ""
        why = (f"its next-token log-probs are {best['adapter']:.3f} nats from the adapter's{plays}, "
               f"where the adapter and the base differ by {best['separation']:.3f}")
        return why, best
    return None, {k: (round(v, 4) if math.isfinite(v) else v) for k, v in best.items()}


def _log_softmax(values: Sequence[float]) -> list[float]:
    top = max(values)
    total = top + math.log(sum(math.exp(v - top) for v in values))
    return [v - total for v in values]


def check_logprobs(base_url: str, model: str, probes: Sequence[LogprobProbe], tokenizer: object, temperature: float,
                   seed: int = 0, fields: dict[str, Any] | None = None, top: int = LOGPROB_TOP,
                   tolerance: float = LOGPROB_TOLERANCE) -> dict[str, Any]:
    """Raise `ServedMismatch` unless the server's next-token log-probs at every probe are the adapter's.

    Asked at temperature 0 and again at ``temperature`` (the sampled path, seeded). Returns the record:
    the largest distance to the adapter, the largest separation of the adapter from the base, and whether
    the probes could tell the two apart at all (``discriminating``: a separation above twice the tolerance).
    """
    worst, strongest = 0.0, 0.0
    for i, probe in enumerate(probes):
        for temp in (0.0, temperature):
            served = served_top_logprobs(base_url, model, probe.prompt, temp, seed + i, top, tokenizer, fields)
            why, dist = logprob_difference(probe, served, temp, tolerance)
            if why is not None:
                path = "greedy path" if temp == 0 else f"sampled path (temperature {temp:g})"
                raise ServedMismatch(f"the server at {redact_url(base_url)} does not play the trained adapter "
                                     f"({model}): on the {path} {why}",
                                     "the server plays another model under the adapter's name; check its LoRA "
                                     "settings (vLLM --enable-lora) and restart the run")
            worst = max(worst, dist["adapter"])
            strongest = max(strongest, dist["separation"])
    return {"positions": len(probes), "temperatures": [0.0, temperature], "max_distance": round(worst, 4),
            "separation": round(strongest, 4), "discriminating": strongest > 2 * tolerance}


def sampled_gap(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Mean |served − torch| over (served, torch) log-prob pairs; None when fewer than `SAMPLED_MIN_TOKENS`."""
    if len(pairs) < SAMPLED_MIN_TOKENS:
        return None
    return sum(abs(s - t) for s, t in pairs) / len(pairs)


def check_sampled(pairs: Sequence[tuple[float, float]], base_url: str, model: str, what: str,
                  tolerance: float = SAMPLED_TOLERANCE) -> dict[str, Any]:
    """Raise `ServedMismatch` unless the server's log-probs of the tokens it sampled are the adapter's (torch's).

    ``pairs`` are (served, torch) temperature-1 log-probs of the same sampled tokens; ``what`` names them in the
    message (``iteration 3's rollouts``). Returns the record: tokens compared and their mean distance.
    """
    gap = sampled_gap(pairs)
    if gap is not None and gap > tolerance:
        raise ServedMismatch(f"the server at {redact_url(base_url)} does not play the trained adapter ({model}) on "
                             f"{what}: its log-probs of the {len(pairs)} tokens it sampled are {gap:.3f} nats from "
                             f"the adapter's (mean; allowed {tolerance:g})",
                             "the server plays the adapter only where it is checked; they are dropped and played "
                             "again on rerun with the same --thread-id once the server is fixed (vLLM --enable-lora)")
    return {"tokens": len(pairs), "distance": None if gap is None else round(gap, 4)}
