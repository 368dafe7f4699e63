"""Play one decision: render its prompt, sample the policy's move once, check it, record it.

On the embedded server (a base GGUF, optionally with the policy's GGUF LoRA) the move is sampled
from the text-completions endpoint with the prompt rendered by the model's own chat template
(read from the GGUF, the template llama.cpp and TRL both render) followed by the decision's
prefill, so the sampled text is exactly the completion an SFT row trains on. Any other model
(an API endpoint, a scripted test model) gets the prompt as one chat message and its reply is
read as the move. Sampling seeds are a function of the task and the sample index, so every
policy of a run (and every arm of a benchmark) draws with the same seeds.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from swm.context import SWMContext
from swm.errors import ModelCallFailed
from swm.lifelong.records import ActedTurn, EpisodeRecord, digest
from swm.llm import EMBEDDED_RESENDS, EMBEDDED_TIMEOUT, ModelSpec, call_model, embedded_revived, is_embedded
from swm.tasks import Task, check
from swm.tasks.decisions import DecisionPrompt, decision_prompt
from swm.usage import CallStats, empty_stats

_template_lock = threading.Lock()


_formatters: dict[Path, Any] = {}


def _chat_formatter(base: Path) -> Any:
    """Return llama-cpp-python's formatter for the GGUF's own chat template (read once per file)."""
    import llama_cpp
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    with _template_lock:
        if base not in _formatters:
            vocab = llama_cpp.Llama(model_path=str(base), vocab_only=True, verbose=False)
            template = vocab.metadata["tokenizer.chat_template"]
            eos = vocab.detokenize([vocab.token_eos()], special=True).decode()
            bos = vocab.detokenize([vocab.token_bos()], special=True).decode()
            _formatters[base] = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        return _formatters[base]


def sampling_seed(task_id: str, sample: int) -> int:
    """Return the sampling seed of one sample of a task (the same for every policy)."""
    return int(digest(task_id, sample, size=8), 16)


def _complete(spec: str, shown: DecisionPrompt, temperature: float, seed: int, timeout: float) -> tuple[str, CallStats]:
    from openai import OpenAI, OpenAIError

    from swm.serving.embedded import SAMPLING, ensure_server, gguf_path, parse_spec

    base, lora = parse_spec(ModelSpec.parse(spec).name) or (None, None)
    server = ensure_server(base=base, lora=lora)
    formatter = _chat_formatter(Path(base) if base is not None else gguf_path())
    rendered = formatter(messages=[{"role": "user", "content": shown.text}])
    client = OpenAI(base_url=server.base_url, api_key="sk-no-key-needed", timeout=timeout, max_retries=0)
    start = time.perf_counter()
    resent = 0
    while True:
        try:
            reply = client.completions.create(model="embedded", prompt=rendered.prompt + shown.prefill,
                                              temperature=temperature, seed=seed, max_tokens=shown.max_tokens,
                                              stop=[*(rendered.stop or []), "\n"],
                                              extra_body={**SAMPLING, **server.fields})
            break
        except OpenAIError as exc:
            # the server died or was restarted (a new adapter) with this call in flight: once it is up
            # again on its port, the same call (same seed) is sent again, as `swm.llm.call_model` does
            if resent < EMBEDDED_RESENDS and embedded_revived(exc, server.base_url):
                resent += 1
                continue
            raise ModelCallFailed(f"the decision call to {spec} failed: {' '.join(str(exc).split())[:200]}",
                                  "rerun with the same --db and --thread-id to play it again") from exc
    usage = reply.usage
    stats = empty_stats()
    stats["calls"], stats["seconds"] = 1, round(time.perf_counter() - start, 6)
    stats["prompt_tokens"] = usage.prompt_tokens if usage else 0
    stats["completion_tokens"] = usage.completion_tokens if usage else 0
    stats["unknown_usage"] = 0 if usage else 1
    return shown.prefill + reply.choices[0].text, stats


def sample_move(ctx: SWMContext, shown: DecisionPrompt, *, temperature: float, seed: int) -> tuple[str, CallStats]:
    """Sample the learner's move for a rendered decision; return (the move's text, the call's usage)."""
    spec = ctx.spec_for("agent")
    if is_embedded(ModelSpec.parse(spec).name) and not spec.startswith("<injected"):
        return _complete(spec, shown, temperature, seed, ctx.timeout or EMBEDDED_TIMEOUT)
    reply = call_model(ctx.model_for("agent"), shown.text)
    return str(reply.value or ""), reply.stats


def play_decision(task: Task, ctx: SWMContext, *, episode_id: str, sample: int,
                  **provenance: Any) -> tuple[EpisodeRecord, dict[str, CallStats]]:
    """Play one decision task under the context's ``agent`` model; return its checked record and usage."""
    shown = decision_prompt(task)
    learner = str(task.truth["learner"])
    text, stats = sample_move(ctx, shown, temperature=ctx.temperature, seed=sampling_seed(task.task_id, sample))
    turn = ActedTurn(index=0, agent=learner, text=text, prompt=shown.text,
                     state_key=digest(task.task_id, learner, shown.text))
    verdict = check(task, [turn])
    record = EpisodeRecord(task_id=task.task_id, family=task.family, level=task.level, turns=[turn], verdict=verdict,
                           episode_id=episode_id, source_episode=episode_id, models={"agent": ctx.spec_for("agent")},
                           prompts={"decision": shown.name}, **provenance)
    return record, {"decision": stats}
