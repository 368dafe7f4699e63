"""Served rollouts: each iteration's adapter sampled through llama.cpp, as "Close the learning loop" serves policies.

The checkpoint's PEFT adapter is served by `swm.serving.serve_adapter` (a GGUF LoRA written
once beside it as ``adapter.gguf``) on the embedded llama.cpp server over the base
GGUF (``embedded:lora=…``; on llama-server the base's one process, each request naming the
adapter; the previous iteration's adapter of the same run is let go when the next one is served).
A turn is one ``/v1/completions`` request with the chat-templated prompt (with a seat's append-only
chat, its token ids: `swm.training.transcript`), drawn as `swm.serving.draws` says (``fresh`` by default:
no prompt cache, so the same seed gives the same move; ``seat``: the seat's own slot's cache), pure
temperature sampling (``top_k`` 0, ``top_p`` 1, ``min_p`` 0, no repeat penalty: the distribution PPO
assumes) and a seed derived from the run's seed, the rollout and the turn.

The server returns text. Its tokens are recovered by tokenising that text with the base's
tokenizer (the GGUF's own vocabulary) and appending what ended it: the end-of-turn token, or
the tokens of the stop string it stopped on (`ended_by_stop`); their log-probabilities are then
*recomputed* in torch under the sampling checkpoint, by the forward pass the update uses, so the
first PPO ratio is exactly 1. Two
approximations follow and are documented, not hidden: llama.cpp samples the base in its own number
format (by default F16 of the weights torch trains, `sampling_format`; SmolLM2 ships Q4_1, further off)
while torch scores them in float32, and a text can tokenise differently from the tokens that produced it.
Both make the rollouts slightly off-policy; the clipped ratio bounds their effect. `sampler="torch"` samples in
torch instead (exactly on-policy, much slower on a CPU).

With ``lora_server`` (a vLLM-class server with runtime LoRA loading) no GGUF is written: the
checkpoint's PEFT adapter directory is loaded there by name (``/v1/load_lora_adapter``; the run's
previous adapter is unloaded) and each request names it as its ``model``. The server samples the
base in its own precision with the same tokenizer, so only the second approximation remains.
Either way the adapter is verified before a rollout samples from it (`swm.selfplay.serving`); on a
runtime-LoRA server also by its log-probabilities (`verify_logprobs`), on prompts the run trains on,
greedy and sampled. A runtime-LoRA server that forgets the adapter mid-iteration (restarted: HTTP 404
for the name) gets it loaded and verified again (the sampler's ``reload``) and the request is sent again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import openai
from openai import OpenAI

from swm.credentials import endpoint_key, redact_url
from swm.errors import ModelUnavailable
from swm.lifelong.bridge import to_scenario
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.rollout import turn_prompt
from swm.serving import draws, formats
from swm.serving.adapters import ServerSlots, find_base_gguf, require_base_gguf
from swm.serving.embedded import PYTHON, engine, revivals, revive, slots
from swm.serving.llama_server import ENGINE
from swm.serving.runtime_lora import LoraSlots
from swm.serving.verify import ServedMismatch, check_logprobs, check_sampled, logprob_probes
from swm.tasks.decisions import Stop, stops
from swm.tasks.families import Task
from swm.tasks.levels import is_seat_level, seat_prompt
from swm.training.config import PolicyConfig
from swm.training.device import cores
from swm.training.trajectory import Generation
from swm.training.transcript import SeatChat, chat_prompt_ids

if TYPE_CHECKING:
    from swm.training.policy import Batch, LoraValueModel

ADAPTER_GGUF = "adapter.gguf"  # beside the checkpoint's ``adapter`` directory (`swm.serving.adapter_gguf`)
_NO_BASE = "sample in torch with --sampler torch"


def base_gguf(config: PolicyConfig) -> Path | None:
    """Return the GGUF that llama.cpp serves for this policy's base, or None when there is none."""
    return find_base_gguf(config.base, config.base_gguf)


def served_base(config: PolicyConfig) -> Path:
    """Return the base GGUF llama.cpp serves the adapter over; a one-line error when there is none."""
    return require_base_gguf(config.base, config.base_gguf, _NO_BASE)


def resolve_sampler(config: PolicyConfig) -> str:
    """Return ``"served"`` or ``"torch"``: ``auto`` serves on a ``lora_server``, or where llama.cpp and a GGUF are."""
    if config.sampler == "torch":
        return "torch"
    if config.lora_server:
        return "served"
    try:
        import llama_cpp  # type: ignore[import-not-found]  # noqa: F401

        has_server = True
    except ImportError:
        has_server = False
    if config.sampler == "served":
        if not has_server:
            raise ModelUnavailable("sampler 'served' needs llama-cpp-python",
                                   "pip install 'social-world-models[embedded]', or use --sampler torch")
        served_base(config)
        return "served"
    return "served" if has_server and base_gguf(config) is not None else "torch"


SERVERS = ServerSlots()  # one adapter per run: the checkpoint its rollouts sample from
LORA_SLOTS = LoraSlots()  # the same on a runtime-LoRA server (``lora_server``)


RELOADS = 2  # loads of an adapter a runtime-LoRA server forgot, per request, before the run stops
RUNTIME_LORA_CONCURRENCY = 8  # a vLLM-class server batches what it is sent; torch scores one turn at a time


def sampling_threads(config: PolicyConfig) -> str | None:
    """Give the embedded llama-server every core while a run samples, where nothing else computes then; return the
    threads set (None: left as they were).

    With π_old scored at the update (``score_old="update"``) a rollout's threads only build prompts and check
    replies while the server samples, so the core `swm.serving.llama_server` leaves to the client is idle: on 2
    cores the recipe's multi-turn iteration sampled in 206 s with two server threads against 354 s with one
    (docs/results, bench.iteration). Sets ``SWM_EMBEDDED_THREADS`` only where it is unset: a value the user set wins
    (on a machine busy with other work one thread is faster: two threads on two busy cores decoded 7x slower), and
    the test suite sets one a worker.
    """
    if config.score_old != "update" or config.lora_server or resolve_sampler(config) != "served" \
            or os.environ.get("SWM_EMBEDDED_THREADS"):
        return None
    os.environ["SWM_EMBEDDED_THREADS"] = str(cores())
    return os.environ["SWM_EMBEDDED_THREADS"]


AUTO_FORMAT = "f16"  # `sampling_format`'s choice where nothing names one (docs/results/engine-formats-2026-12-07-1425)


def sampling_format(config: PolicyConfig) -> str | None:
    """Serve the base in the policy's ``served_format`` while a run samples on the embedded llama.cpp server; return
    the format set (None: not served there, nothing changed).

    ``auto`` keeps ``SWM_EMBEDDED_FORMAT`` where the user set it; else a quantised base (the shipped Q4_1) is
    served in F16, its weights dequantised once (`swm.serving.formats`) as torch trains them, so the server samples
    from the policy the update scores (0.001 nats a token apart, against 0.03 for Q4_1, whose products llama.cpp
    rounds through 8-bit activations), and its prompts are evaluated by tinyBLAS rather than Q4_1's generic kernels:
    on 2 cores the recipe's iteration sampled in 108 s against 152 s. A base already in F32, F16 or BF16 is served
    as it is.
    """
    if resolve_sampler(config) != "served" or config.lora_server:
        return None
    fmt: str = config.served_format
    if fmt == "auto":
        fmt = os.environ.get(formats.ENV) or (AUTO_FORMAT if formats.quantised(served_base(config))
                                              else formats.SHIPPED)
    os.environ[formats.ENV] = fmt
    return fmt


def default_concurrency(config: PolicyConfig, seats: int = 1) -> int:
    """Rollouts in flight by default: the embedded server's slots (8 on a ``lora_server``) when served; 1 in torch.

    In the ``seat`` draw mode (`swm.serving.draws`) every seat in flight holds a slot of its own, so a rollout of
    ``seats`` seats takes that many: the slots divided by ``seats`` (two rollouts of two seats on four slots).
    More would pin two seats to one slot, and each would evaluate its whole prompt again, drawn differently.
    """
    if resolve_sampler(config) != "served":
        return 1
    if config.lora_server:
        return RUNTIME_LORA_CONCURRENCY
    if draws.mode() == "seat" and engine() == ENGINE:
        return max(1, slots() // max(1, seats))
    return max(1, slots())


def plan_seats(plan: SelfPlayPlan) -> int:
    """Seats one rollout of ``plan`` plays: the game's players, else the task's two seats."""
    return plan.players if plan.game else 2


def seed_of(key: str) -> int:
    """A 31-bit request seed from a string (llama.cpp takes an unsigned 32-bit seed)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little") & 0x7FFFFFFF


# pure temperature sampling, in each server's own words: llama.cpp's, and vLLM's (top_k -1: every token)
LLAMA_CPP_SAMPLING = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
VLLM_SAMPLING = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}


PROBE_TASKS = 2  # training tasks whose first prompts join the fixed probe prompt in the log-prob check


def probe_prompts(plan: SelfPlayPlan, iteration: int, fixed: str) -> list[str]:
    """The prompts an adapter is probed on: ``fixed``, then the first turn's prompt of the iteration's first tasks.

    The run trains on these prompts, so there the adapter differs most from the base.
    """
    prompts = [fixed]
    for unit in list(plan.units("train", iteration).values())[:PROBE_TASKS]:
        if "task" not in unit:
            continue  # a game's prompts come from its moderator as it plays
        task = Task.model_validate(unit["task"])
        scenario = to_scenario(task)
        speaker = scenario.names[0]
        if is_seat_level(task.level):  # two-seat and multi-turn: the task's own seat prompt
            prompts.append(seat_prompt(task, speaker, []).text)
        else:
            prompts.append(turn_prompt(scenario, speaker, [], 0))
    return prompts


def verify_logprobs(policy: LoraValueModel, lock: Any, url: str, name: str, prompts: list[str],
                    temperature: float) -> dict[str, Any]:
    """Check that the runtime-LoRA server's next-token log-probs under ``name`` are the adapter's (`check_logprobs`).

    The probe positions are chosen in torch under ``lock`` (the shared policy's); the server is asked
    at temperature 0 and at ``temperature``. Returns the record kept in ``served.json``.
    """
    tok = policy.tokenizer
    with lock:
        templated = [str(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                 tokenize=False)) for p in prompts]
        probes = logprob_probes(policy.model, tok, templated)
    return check_logprobs(url, name, probes, tok, temperature, seed=seed_of(name), fields=VLLM_SAMPLING)


# llama-server's completions say ``finish_reason: "stop"`` for a stop string and for the end token alike; with
# ``verbose`` they also carry the native answer (``__verbose``), whose ``stop_type`` tells the two apart and whose
# ``stopping_word`` is the stop string met
VERBOSE = {"verbose": True}


def ended_by_stop(reply: Any, stop: Stop) -> str | None:
    """The stop string of ``stop`` (`stops`) that ended a completion that finished with ``"stop"``; None: the
    model's end token ended it.

    llama-server (asked with `VERBOSE`) says it in ``__verbose`` (``stop_type`` ``"word"`` or ``"eos"``, the string
    in ``stopping_word``), vLLM in the choice's ``stop_reason`` (the stop string, or None for the end token). A
    server that does not say (the llama-cpp-python server; a llama-server answer that names no string it was asked
    for) is taken to have met the first stop string, the likelier end when one was asked for.
    """
    ends = stops(stop)
    if not ends:
        return None
    verbose = (getattr(reply, "model_extra", None) or {}).get("__verbose")
    if isinstance(verbose, dict) and verbose.get("stop_type") in ("word", "eos"):
        if verbose["stop_type"] == "eos":
            return None
        word = verbose.get("stopping_word")
        return word if word in ends else ends[0]
    choice = reply.choices[0]
    extra = getattr(choice, "model_extra", None) or {}
    if "stop_reason" in extra:
        return extra["stop_reason"] if extra["stop_reason"] in ends else None
    return ends[0]


class ServedSampler:
    """Samples every turn from a server and, with ``score_old="sample"``, scores it in torch under the same checkpoint.

    By default (``PolicyConfig.score_old="update"``) a turn's log-probabilities are left empty: the update scores
    each seat's whole transcript once, under the same checkpoint, and only the rows it trains on
    (`swm.training.ppo.fill_old_logprobs`), where scoring each turn as it comes evaluates a seat's growing prompt
    again every turn.

    The server is llama.cpp (``model`` ``embedded``, the adapter chosen by the server or by
    ``fields``) or a runtime-LoRA server (``model``: the adapter's name, ``sampling``
    `VLLM_SAMPLING`). ``score(batch)`` returns the log-probabilities under the sampling
    checkpoint; it takes the shared torch policy's lock (rollouts run in parallel threads: the
    server queues their requests, and torch scores one turn while the server samples another).
    """

    def __init__(self, policy: LoraValueModel, base_url: str, seed_key: str, score: Callable[[Batch, list[Any]], Any],
                 timeout: float = 600.0, server_logprobs: bool = False, fields: dict[str, Any] | None = None,
                 model: str = "embedded", sampling: dict[str, Any] | None = None,
                 reload: Callable[[], None] | None = None) -> None:
        self.policy = policy
        self.reload = reload  # a runtime-LoRA server that forgot the adapter (HTTP 404): load and verify it again
        self.base_url = base_url
        self.fields = fields or {}  # llama-server: the request body field that picks this checkpoint's adapter
        self.model = model
        self.sampling = LLAMA_CPP_SAMPLING if sampling is None else sampling
        self.seed_key = seed_key
        self.calls = 0
        self.score = score
        self.server_logprobs = server_logprobs  # also keep llama.cpp's own log-probs (bench.selfplay --samplers)
        # a runtime-LoRA server is asked on every request for its log-probs of what it samples (`check_sampled`)
        self.asks_logprobs = server_logprobs or model != "embedded"
        self.pairs: list[tuple[float, float]] = []  # (served, torch) log-probs of this sampler's turns scored here
        self.lives: dict[int, int] = {}  # a seat's slot -> the server's revivals when its chat began (`seat` draws)
        self.reseeded = 0  # seat turns drawn after the server was started again (`note_reseeded`)
        url, key = endpoint_key(base_url)
        # the OpenAI client's retry layer, as for every endpoint (swm.llm): a dropped connection is re-sent
        self.client = OpenAI(base_url=url, api_key=key or "sk-no-key-needed", timeout=timeout, max_retries=2)

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None, chat: SeatChat | None = None) -> Generation:
        """Sample one reply from the server (``prefill`` appended to the prompt, any of ``stop`` ending it) and score
        it; a reply a stop string ended is trained with that string's tokens as its end (`ended_by_stop`).

        With the seat's ``chat`` the prompt is the chat's token ids then ``prompt`` as its next message
        (`swm.training.transcript`), sent as token ids, so the server can serve it from the seat's cached prefix.
        """
        from swm.training.policy import collate, gather  # optional: the [train] extra (it imports torch)

        cfg = self.policy.config
        tok = self.policy.tokenizer
        prompt_ids = chat_prompt_ids(tok, chat, prompt, prefill)
        text_prompt: str | list[int] = prompt_ids
        if chat is not None and self.model == "embedded" and engine() == PYTHON:  # its server takes text only
            text_prompt = str(tok.decode(prompt_ids, skip_special_tokens=False))
        elif chat is None:
            messages = [{"role": "user", "content": prompt}]
            text_prompt = str(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)) + prefill
        seed = seed_of(f"{self.seed_key}/{self.calls}")
        self.calls += 1
        draw: dict[str, Any] = {}
        if self.model == "embedded" and engine() == ENGINE:  # how a seeded draw is sent (`swm.serving.draws`)
            draw = {**draws.fields(), **VERBOSE}
            if chat is not None:
                if chat.slot is None:
                    chat.slot = draws.PINS.pin(self.base_url, slots())
                draw = draws.seat_fields(chat.slot, first=chat.ids is None)
        reply = self._complete(text_prompt, max_tokens or cfg.max_new_tokens, cfg.temperature, seed, stop, draw)
        self.note_reseeded(chat, draw)
        choice = reply.choices[0]
        text = choice.text or ""
        tokens = [int(t) for t in tok.encode(text, add_special_tokens=False)]
        if choice.finish_reason == "stop" and tok.eos_token_id is not None:
            # the end of the turn: the stop string it sampled, or the model's end token
            met = ended_by_stop(reply, stop)
            tokens += [int(t) for t in tok.encode(met, add_special_tokens=False)] if met is not None \
                else [int(tok.eos_token_id)]
        if not tokens:
            raise ValueError(f"the server returned no tokens (finish_reason {choice.finish_reason!r})")
        served = self._served(choice, text, tokens)
        scored: list[float] = []  # π_old left to the update (`PolicyConfig.score_old`): one pass per seat's row there
        if cfg.score_old == "sample" or self.server_logprobs:
            batch = collate([prompt_ids], [tokens], tok.pad_token_id)
            raw: list[Any] = []
            scored = gather(self.score(batch, raw), batch)[0]
            if served is not None and raw and self.model != "embedded":  # the rollout's own tokens checked as they come
                self.pairs += list(zip(served, gather(raw[0], batch)[0], strict=False))
                check_sampled(self.pairs, self.base_url, self.model, "this rollout")
        return Generation(text=prefill + text, prompt_ids=prompt_ids, token_ids=tokens, logprobs=scored,
                          served_logprobs=served)

    def note_reseeded(self, chat: SeatChat | None, draw: dict[str, Any]) -> None:
        """Count a seat turn drawn on a server started again since the seat's chat began (`reseeded`).

        A ``seat`` draw's later turns reuse the slot's cache of the seat's earlier turns (`swm.serving.draws`): once
        the server is started again (`revive`) that cache is gone, the turn's whole prompt is evaluated at once, and
        its draw (and every later one of the seat) is not the seeded draw of an uninterrupted run, though its
        context is the same. The rollout records how many (`Rollout.reseeded_turns`), not only stderr.
        """
        if chat is None or chat.slot is None or "id_slot" not in draw:
            return
        lives = revivals(self.base_url)
        began = self.lives.setdefault(chat.slot, lives)
        if draw.get("cache_prompt") and lives != began:
            self.reseeded += 1

    def _served(self, choice: Any, text: str, tokens: list[int]) -> list[float] | None:
        """The server's log-probs of the first of ``tokens`` that are its own tokens (None: none asked or comparable).

        A runtime-LoRA server names its tokens by id (``token_id:ID``, vLLM's ``return_tokens_as_token_ids``): its
        log-probs count up to the first token where they part from the text's retokenisation (a run-on after a stop
        string, or a text that tokenises otherwise). Without ids the pieces must spell the text, one per token. A
        runtime-LoRA reply without log-probs, asked for them, is refused: what it played could not be checked.
        """
        if not self.asks_logprobs:
            return None
        if choice.logprobs is None or not (choice.logprobs.tokens or getattr(choice.logprobs, "content", None)):
            if self.model == "embedded":
                return None
            raise ServedMismatch(f"the server at {redact_url(self.base_url)} returned no log-probs for a rollout of "
                                 f"{self.model}, asked for them, so what it sampled cannot be checked",
                                 "serve the adapters on vLLM (completions with logprobs)")
        pieces, values = choice.logprobs.tokens or [], choice.logprobs.token_logprobs or []
        content = getattr(choice.logprobs, "content", None) or []  # llama-server: chat-style entries
        if content and not pieces:
            pieces, values = [str(c["token"]) for c in content], [float(c["logprob"]) for c in content]
        ids = [int(p.split(":", 1)[1]) if str(p).startswith("token_id:") and p.split(":", 1)[1].isdigit() else None
               for p in pieces]
        if ids and all(i is not None for i in ids):
            same = 0
            while same < min(len(ids), len(tokens), len(values)) and ids[same] == tokens[same]:
                same += 1
            return [float(v) for v in values[:same]]
        tok = self.policy.tokenizer
        # comparable only where the server's tokens are the retokenised ones (same pieces, same count)
        if "".join(pieces) == text and len(values) == len(tokens) - (tokens[-1] == tok.eos_token_id):
            return [float(v) for v in values]
        return None

    @property
    def _as_ids(self) -> dict[str, Any]:
        """vLLM names the tokens whose log-probs it returns by id where asked (a runtime-LoRA server)."""
        return {"return_tokens_as_token_ids": True} if self.model != "embedded" else {}

    def _complete(self, prompt: str | list[int], max_tokens: int, temperature: float, seed: int,
                  stop: Stop = None, draw: dict[str, Any] | None = None) -> Any:
        """Send one completion; a request in flight when the server went down is sent again once it is back.

        A runtime-LoRA server that answers 404 for the adapter's name (restarted: it forgot its
        adapters) gets the adapter loaded and verified again (``reload``), then the request is sent
        again; a name still unknown after `RELOADS` reloads stops the run (`ModelUnavailable`).
        """
        reloads = 0
        for resend in range(4 + RELOADS):
            try:
                return self.client.completions.create(
                    model=self.model, prompt=prompt, max_tokens=max_tokens, temperature=temperature, top_p=1.0,
                    seed=seed, logprobs=1 if self.asks_logprobs else None, stop=list(stops(stop)) or openai.omit,
                    extra_body={**self.sampling, **(draw or {}), **self.fields, **self._as_ids})
            except openai.NotFoundError as exc:
                if self.reload is None:
                    raise
                if reloads == RELOADS:
                    raise ModelUnavailable(f"the server at {redact_url(self.base_url)} does not know adapter "
                                           f"{self.model} after loading it {reloads} time(s) again: {exc}",
                                           "check the server's log (is --enable-lora set?), then rerun with the "
                                           "same --thread-id: this rollout is played again") from exc
                reloads += 1
                self.reload()
            except openai.APIConnectionError as exc:
                if resend >= 3 or isinstance(exc, openai.APITimeoutError) or not revive(self.base_url):
                    raise
        raise AssertionError("unreachable")
