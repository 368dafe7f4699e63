"""How swm runs llama.cpp's C++ ``llama-server``: slots, prompt cache, LoRA adapters chosen per request.

One process per base GGUF serves every adapter of that base: they are all loaded at start
(``--lora a.gguf --lora b.gguf``) with scale 0 (``--lora-init-without-apply``), and a request
picks its own with the body field ``"lora": [{"id": i, "scale": 1.0}]`` (`lora_field`); a request
without one runs the base. ``--parallel`` slots decode their sequences together (continuous
batching); each slot keeps its prompt's KV cache (``cache_prompt``) and a request goes to the
idle slot whose cached prompt shares the most with it (``--slot-prompt-similarity``), so the
seats of a conversation keep re-using their own prefixes; on a server without adapters the
prompts of idle slots are also kept in RAM (``--cache-ram``) for when they come back.

Settings (environment): ``SWM_EMBEDDED_SLOTS`` (default `default_slots`: two per core, 4 to
8, and no more than 64k tokens of context in all), ``SWM_EMBEDDED_CTX`` (context per slot,
default 8192), ``SWM_EMBEDDED_THREADS`` (default one per core but one), ``SWM_EMBEDDED_CACHE_MIB`` (prompt cache in RAM,
default 1024), ``SWM_EMBEDDED_FLASH_ATTN`` (llama.cpp's ``--flash-attn``: default ``off``, which decodes about
twice as fast over long contexts on CPUs; ``on`` or ``auto`` for a GPU build), ``SWM_EMBEDDED_ARGS`` (more
llama-server flags, appended).
"""

from __future__ import annotations

import json
import os
import shlex
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ENGINE = "llama-server"
DEFAULT_CTX = 8192
MAX_TOTAL_CTX = 65536  # tokens of KV cache across all slots: 1.5 GB for SmolLM2-135M in f16
SIMILARITY = 0.10  # llama-server's own default, written out so a change upstream cannot move it silently


def slot_ctx() -> int:
    """Return the context length of one slot (``SWM_EMBEDDED_CTX``, default 8192)."""
    return int(os.environ.get("SWM_EMBEDDED_CTX") or DEFAULT_CTX)


def default_slots(cores: int | None = None, ctx: int | None = None) -> int:
    """Return the slot count for ``cores`` and a per-slot context: two per core, 4 to 8, within 64k tokens."""
    cores = cores or os.cpu_count() or 2
    ctx = ctx or slot_ctx()
    return max(1, min(max(4, min(8, 2 * cores)), MAX_TOTAL_CTX // max(1, ctx)))


def slots() -> int:
    """Return how many sequences the server decodes together (``SWM_EMBEDDED_SLOTS`` or `default_slots`)."""
    chosen = os.environ.get("SWM_EMBEDDED_SLOTS")
    return max(1, int(chosen)) if chosen else default_slots()


def command(binary: Path, model: Path, port: int, adapters: list[Path], repack: bool) -> list[str]:
    """Return the llama-server command line for ``model`` with ``adapters`` (request id = list position)."""
    n = slots()
    # one core is left to the client that builds the prompts: llama.cpp's threads wait for each other at every
    # step, so one of them descheduled stalls them all (two threads on two busy cores decoded 7x slower than one)
    threads = os.environ.get("SWM_EMBEDDED_THREADS") or str(max(1, (os.cpu_count() or 2) - 1))
    cmd = [str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port), "--alias", "embedded",
           "--parallel", str(n), "--ctx-size", str(slot_ctx() * n), "--no-kv-unified", "--cont-batching",
           "--threads", threads, "--threads-batch", threads, "--cache-prompt",
           "--slot-prompt-similarity", str(SIMILARITY),
           "--metrics", "--no-webui", "--jinja",
           # llama.cpp's CPU flash attention (its default, "auto", turns it on) halves decoding over a long context:
           # SmolLM2 decoded 39 against 74 tokens/s at 1,891 tokens of context, 22 against 51 at 3,781, and a
           # seat's append-only chat is that long (`python -m bench.engine_context`); prompts lose about 8%
           "--flash-attn", os.environ.get("SWM_EMBEDDED_FLASH_ATTN", "off"),
           # the RAM cache of idle slots' prompts is keyed by tokens alone: with adapters it could hand a
           # request a prefix computed under another adapter, so it is on only for a server without any
           "--cache-ram", os.environ.get("SWM_EMBEDDED_CACHE_MIB", "1024") if not adapters else "0"]
    if not repack:
        cmd.append("--no-repack")
    cmd += shlex.split(os.environ.get("SWM_EMBEDDED_ARGS", ""))  # any other llama-server flag, last so it wins
    for adapter in adapters:
        cmd += ["--lora", str(adapter)]
    if adapters:
        cmd.append("--lora-init-without-apply")
    return cmd


def lora_field(adapters: list[Path], lora: Path | None) -> dict[str, Any]:
    """Return the request fields that select ``lora`` (None: the base) on a server started with ``adapters``.

    The base is asked for explicitly (adapter 0 at scale 0, which also holds on a server with no
    adapter): llama-server clears a slot's cached prompt when a request's adapters differ from the
    slot's, but a request that names none keeps the cache the slot built under another adapter.
    """
    if lora is None:
        return {"lora": [{"id": 0, "scale": 0.0}]}
    return {"lora": [{"id": adapters.index(lora), "scale": 1.0}]}


def with_adapter(adapters: list[Path], released: set[Path], lora: Path | None) -> list[Path]:
    """Return the adapter list that also holds ``lora``: in a released adapter's place, else appended.

    Ids of the adapters still in use never change, so a request built before a restart still
    names its own adapter after it. ``released`` loses the adapter whose place was taken.
    """
    if lora is None or lora in adapters:
        return list(adapters)
    reuse = next((i for i, a in enumerate(adapters) if a in released), None)
    if reuse is None:
        return [*adapters, lora]
    released.discard(adapters[reuse])
    return [*adapters[:reuse], lora, *adapters[reuse + 1:]]


def port_of(base_url: str) -> int:
    """Return the port of a loopback base URL (``http://127.0.0.1:PORT/v1``)."""
    return int(base_url.rsplit(":", 1)[1].split("/")[0])


def _get(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.loads(reply.read() or b"null")


def _root(base_url: str) -> str:
    return base_url.removesuffix("/").removesuffix("/v1")


def ready(base_url: str) -> bool:
    """Tell whether the server at ``base_url`` has loaded its model and takes requests."""
    try:
        return (_get(_root(base_url) + "/health") or {}).get("status") == "ok"
    except (OSError, ValueError):
        return False


def serves(base_url: str, model: Path) -> bool:
    """Tell whether the server at ``base_url`` is the one serving ``model`` (its ``/props``' ``model_path``): another
    process can hold a port swm chose between choosing it and its own server binding it."""
    try:
        path = (_get(_root(base_url) + "/props") or {}).get("model_path")
    except (OSError, ValueError):
        return False
    return bool(path) and Path(str(path)).resolve() == Path(model).resolve()


def loaded_adapters(base_url: str) -> dict[int, Path]:
    """Return {request id: adapter path} as the running server at ``base_url`` reports them (``/lora-adapters``)."""
    return {int(entry["id"]): Path(entry["path"]) for entry in _get(_root(base_url) + "/lora-adapters", timeout=10)}


def wait_idle(base_url: str, timeout: float) -> bool:
    """Wait until no slot is decoding (up to ``timeout`` s); say whether the server went idle."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            busy = any(slot.get("is_processing") for slot in _get(_root(base_url) + "/slots"))
        except (OSError, ValueError):
            return True  # nothing to wait for: the server is gone or does not say
        if not busy:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
