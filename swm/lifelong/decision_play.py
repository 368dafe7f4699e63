"""Play one decision: render its prompt, sample the policy's move once, check it, record it.

On the embedded server (a base GGUF, optionally with the policy's GGUF LoRA) the move is sampled
from the text-completions endpoint with the prompt rendered by the model's own chat template
(read from the GGUF, the template llama.cpp and TRL both render) followed by the decision's
prefill, so the sampled text is exactly the completion an SFT row trains on. Any other model
(an API endpoint, a scripted test model) gets the prompt as one chat message and its reply is
read as the move. Sampling seeds are a function of the task and the sample index, so every
policy of a run (and every arm of a benchmark) draws with the same seeds; a task's samples have
seeds that follow each other, so on llama-server the samples of one decision played at once go out
as one request with ``n`` choices and its prompt is evaluated once (`swm.serving.choices`). A seeded
draw evaluates its whole prompt (no prompt cache), so the same prompt, seed and adapter give the same
move whatever the server evaluated before; `swm.serving.draws` has the modes (``SWM_EMBEDDED_DRAW``).
"""

from __future__ import annotations

import atexit
import threading
import time
from pathlib import Path
from typing import Any

from openai import OpenAI, OpenAIError

from swm.context import ModelContext
from swm.errors import ModelCallFailed
from swm.lifelong.records import ActedTurn, EpisodeRecord, digest
from swm.llm import EMBEDDED_RESENDS, EMBEDDED_TIMEOUT, ModelSpec, call_model, embedded_revived, is_embedded
from swm.serving import choices, draws
from swm.serving.embedded import ensure_server, gguf_path, parse_spec
from swm.serving.llama_server import ENGINE
from swm.tasks import Task, check
from swm.tasks.decisions import DecisionPrompt, decision_prompt
from swm.usage import CallStats, empty_stats

_template_lock = threading.Lock()
# A move is drawn from the policy's own distribution: no repeat penalty, as the torch policy that PPO's
# ratio, TRL and the served-policy probe score it with. llama-server's penalty of 1.1 (`SAMPLING`, for chat)
# also covers the prompt, so it pushes down the newline a move ends at and the names it must copy:
# mutual-friend moves averaged 12-14 tokens with it (9-12 of 40 at the 24-token cap) against 6 without
# (1 of 40), and llama-cpp-python's server, whose penalty covers generated tokens only, 5-6 either way.
DECISION_SAMPLING: dict[str, float] = {"repeat_penalty": 1.0}


_vocabs: dict[Path, Any] = {}
_formatters: dict[Path, Any] = {}
# the samples of one prompt played at once in this process: one request with n choices (llama-server)
_gathered: choices.Gather[tuple[str, Any]] = choices.Gather()


def close_vocabs() -> None:
    """Free the cached tokenizers; run at exit, while llama-cpp-python's library is still loaded (freed later,
    by the garbage collector at interpreter shutdown, each printed an ``Exception ignored in Llama.__del__``
    traceback at the end of a run)."""
    with _template_lock:
        _formatters.clear()
        while _vocabs:
            _vocabs.popitem()[1].close()


atexit.register(close_vocabs)


def _vocab(base: Path) -> Any:
    """Return the GGUF's tokenizer (llama-cpp-python, vocabulary only; loaded once per file)."""
    import llama_cpp  # optional: the [embedded] extra

    with _template_lock:
        if base not in _vocabs:
            _vocabs[base] = llama_cpp.Llama(model_path=str(base), vocab_only=True, verbose=False)
        return _vocabs[base]


def _chat_formatter(base: Path) -> Any:
    """Return llama-cpp-python's formatter for the GGUF's own chat template (read once per file)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter  # optional: the [embedded] extra

    vocab = _vocab(base)
    with _template_lock:
        if base not in _formatters:
            template = vocab.metadata["tokenizer.chat_template"]
            eos = vocab.detokenize([vocab.token_eos()], special=True).decode()
            bos = vocab.detokenize([vocab.token_bos()], special=True).decode()
            _formatters[base] = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        return _formatters[base]


def sampling_seed(task_id: str, sample: int) -> int:
    """Return the sampling seed of one sample of a task (the same for every policy).

    A task's samples draw with seeds that follow each other (the task's seed, + 1, + 2, ...): the seeds
    a server gives the choices of one request with ``n`` of them, so the samples can share one request.
    """
    return int(digest(task_id, size=8), 16) % 2**31 + sample


def choices_of(reply: Any, n: int, spec: str) -> list[tuple[str, Any] | ModelCallFailed]:
    """Return a reply's ``n`` choices in seed order, each with the request's usage.

    A choice the server left out, or sent with no text, fails its own sample only (a `ModelCallFailed`
    in its place): the other samples of the request keep theirs.
    """
    listed = getattr(reply, "choices", None) or []
    by_index = {c.index: c for c in listed if isinstance(getattr(c, "index", None), int)}
    out: list[tuple[str, Any] | ModelCallFailed] = []
    for i in range(n):
        choice = by_index.get(i)
        if choice is None or not isinstance(choice.text, str):
            what = "left out choice" if choice is None else "sent no text for choice"
            out.append(ModelCallFailed(f"the decision call to {spec} {what} {i + 1} of {n}",
                                       "rerun with the same --db and --thread-id to play it again"))
        else:
            out.append((choice.text, reply.usage))
    return out


def _complete(spec: str, shown: DecisionPrompt, temperature: float, seed: int, timeout: float,
              siblings: int = 1, max_retries: int = 0) -> tuple[str, CallStats]:
    base, lora = parse_spec(ModelSpec.parse(spec).name) or (None, None)
    server = ensure_server(base=base, lora=lora)
    gguf = Path(base) if base is not None else gguf_path()
    rendered = _chat_formatter(gguf)(messages=[{"role": "user", "content": shown.text}])
    prompt, stop = rendered.prompt + shown.prefill, [*(rendered.stop or []), "\n"]
    # the client retries a 5xx, a 429 or a dropped connection (--max-retries), as `swm.llm.call_model` does
    client = OpenAI(base_url=server.base_url, api_key="sk-no-key-needed", timeout=timeout, max_retries=max_retries)
    start = time.perf_counter()

    draw = draws.mode()  # how a seeded draw is sent: no prompt cache unless "cached" (`swm.serving.draws`)
    body = {**DECISION_SAMPLING, **(draws.fields(draw) if server.engine == ENGINE else {}), **server.fields}

    def send(first: int, n: int) -> list[tuple[str, Any] | ModelCallFailed]:
        resent = 0
        while True:
            try:
                with draws.one_at_a_time(server.base_url, draw):
                    reply = client.completions.create(model="embedded", prompt=prompt, temperature=temperature,
                                                      seed=first, max_tokens=shown.max_tokens, stop=stop, n=n,
                                                      extra_body=body)
                break
            except OpenAIError as exc:
                # the server died or was restarted (a new adapter) with this call in flight: once it is up
                # again on its port, the same call (same seed) is sent again, as `swm.llm.call_model` does
                if resent < EMBEDDED_RESENDS and embedded_revived(exc, server.base_url):
                    resent += 1
                    continue
                raise ModelCallFailed(f"the decision call to {spec} failed: {' '.join(str(exc).split())[:200]}",
                                      "rerun with the same --db and --thread-id to play it again") from exc
        return choices_of(reply, n, spec)

    if server.engine == ENGINE and choices.enabled() and draws.shares_requests(draw):  # ``n``: seeds s, s + 1, ...
        key = (server.base_url, repr(server.fields), prompt, temperature, shown.max_tokens, tuple(stop))
        (text, usage), place, _ = _gathered.call(key, seed, siblings, server.slots, send)
    else:
        alone = send(seed, 1)[0]
        if isinstance(alone, ModelCallFailed):
            raise alone
        (text, usage), place = alone, 0
    stats = empty_stats()
    stats["seconds"] = round(time.perf_counter() - start, 6)
    if place == 0:  # the request's first choice carries the request: its prompt, its own tokens (``usage``)
        stats["calls"] = 1
        stats["prompt_tokens"] = usage.prompt_tokens if usage else 0
        stats["completion_tokens"] = usage.completion_tokens if usage else 0
        stats["unknown_usage"] = 0 if usage else 1
    else:  # a further choice of that request: no call or prompt of its own; its tokens counted from its text
        stats["completion_tokens"] = len(_vocab(gguf).tokenize(text.encode(), add_bos=False, special=False))
    return shown.prefill + text, stats


def draw_mode(ctx: ModelContext) -> str | None:
    """Return how the context's ``agent`` model draws a seeded move: the embedded engine's mode, else None."""
    spec = ctx.spec_for("agent")
    return draws.mode() if is_embedded(ModelSpec.parse(spec).name) and not spec.startswith("<injected") else None


def sample_move(ctx: ModelContext, shown: DecisionPrompt, *, temperature: float, seed: int,
                siblings: int = 1) -> tuple[str, CallStats]:
    """Sample the learner's move for a rendered decision; return (the move's text, the call's usage).

    ``siblings``: how many samples of this prompt are being played at once (seeds ``seed`` and the
    ones next to it); on the embedded llama-server they wait for each other briefly and go out as one
    request with ``n`` choices (`swm.serving.choices`).
    """
    spec = ctx.spec_for("agent")
    if draw_mode(ctx) is not None:
        return _complete(spec, shown, temperature, seed, ctx.timeout or EMBEDDED_TIMEOUT, siblings, ctx.max_retries)
    reply = call_model(ctx.model_for("agent"), shown.text)
    return str(reply.value or ""), reply.stats


def play_decision(task: Task, ctx: ModelContext, *, episode_id: str, sample: int, siblings: int = 1,
                  **provenance: Any) -> tuple[EpisodeRecord, dict[str, CallStats]]:
    """Play one decision task under the context's ``agent`` model; return its checked record and usage.

    ``siblings``: how many samples of the task are played at once (see `sample_move`).
    """
    shown = decision_prompt(task)
    learner = str(task.truth["learner"])
    text, stats = sample_move(ctx, shown, temperature=ctx.temperature, seed=sampling_seed(task.task_id, sample),
                              siblings=siblings)
    turn = ActedTurn(index=0, agent=learner, text=text, prompt=shown.text,
                     state_key=digest(task.task_id, learner, shown.text))
    verdict = check(task, [turn])
    record = EpisodeRecord(task_id=task.task_id, family=task.family, level=task.level, turns=[turn], verdict=verdict,
                           episode_id=episode_id, source_episode=episode_id, models={"agent": ctx.spec_for("agent")},
                           prompts={"decision": shown.name}, draw=draw_mode(ctx), **provenance)
    return record, {"decision": stats}
