"""The engine's own limit: llama.cpp's batched decoding of the embedded GGUF, through llama-cpp-python's C API.

No server, no HTTP, no sampling chain: one ``llama_context`` with a KV cache shared by ``P``
sequences; the prompt rate is one 512-token batch of one sequence, the generation rate ``P``
sequences decoded together — each step one ``llama_batch`` holding one token per sequence (its
own ``seq_id`` and position), the next token the argmax of that sequence's logits. Each sequence
first gets a ``context`` -token prompt, so attention works over a context like a turn's. Run in a
child process (`measure` starts it) so the model's threads do not share a process with anything
measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from swm.serving.embedded import _repack_weights


def _decode_limit(model_path: str, threads: int, parallel: list[int], prompt: int, context: int, steps: int,
                  repack: bool) -> dict[str, Any]:
    import llama_cpp as c
    import numpy as np

    c.llama_backend_init()
    mparams = c.llama_model_default_params()
    if not repack:  # as the embedded server is started (swm.serving.embedded: AMX inside a VM faults)
        mparams.use_extra_bufts = False
    model = c.llama_model_load_from_file(model_path.encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {model_path}")
    width = max(parallel)
    cparams = c.llama_context_default_params()
    cparams.n_ctx = max(prompt, width * (context + steps)) + 64
    cparams.n_batch = cparams.n_ubatch = 512
    cparams.n_seq_max = width
    cparams.n_threads = cparams.n_threads_batch = threads
    cparams.kv_unified = True
    ctx = c.llama_init_from_model(model, cparams)
    memory = c.llama_get_memory(ctx)
    n_vocab = c.llama_vocab_n_tokens(c.llama_model_get_vocab(model))
    batch = c.llama_batch_init(512, 0, width)
    rng = np.random.default_rng(0)

    def fill(items: list[tuple[int, int, int, bool]]) -> None:
        batch.n_tokens = len(items)
        for i, (token, pos, seq, logits) in enumerate(items):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = logits

    def decode(items: list[tuple[int, int, int, bool]]) -> None:
        for first in range(0, len(items), 512):
            fill(items[first:first + 512])
            if c.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")

    def tokens(n: int) -> list[int]:
        return [int(t) for t in rng.integers(100, min(n_vocab, 40_000), n)]

    out: dict[str, Any] = {"threads": threads, "prompt_batch": prompt, "context": context, "steps": steps}
    decode([(t, i, 0, i == 7) for i, t in enumerate(tokens(8))])  # warm-up: weights paged in
    best = float("inf")
    for _ in range(2):
        c.llama_memory_clear(memory, True)
        items = [(t, i, 0, i == prompt - 1) for i, t in enumerate(tokens(prompt))]
        start = time.perf_counter()
        decode(items)
        best = min(best, time.perf_counter() - start)
    out["prompt_tokens_per_s"] = prompt / best
    out["generate"] = {}
    for p in parallel:
        c.llama_memory_clear(memory, True)
        decode([(t, i, s, False) for s in range(p) for i, t in enumerate(tokens(context))])
        nxt = tokens(p)  # the first generated token; the rate does not depend on which
        start = time.perf_counter()
        for step in range(steps):
            decode([(nxt[s], context + step, s, True) for s in range(p)])
            nxt = [int(np.ctypeslib.as_array(c.llama_get_logits_ith(ctx, s), shape=(n_vocab,)).argmax())
                   for s in range(p)]
        seconds = time.perf_counter() - start
        out["generate"][str(p)] = p * steps / seconds
    c.llama_batch_free(batch)
    c.llama_free(ctx)
    c.llama_model_free(model)
    return out


def measure(model_path: Path, threads: int | None = None, parallel: tuple[int, ...] = (1, 4, 8), prompt: int = 512,
            context: int = 256, steps: int = 32, timeout: float = 300.0) -> dict[str, Any]:
    """Return the engine's prompt tokens/s and generated tokens/s per number of sequences decoded together."""

    threads = threads or int(os.environ.get("SWM_EMBEDDED_THREADS") or os.cpu_count() or 2)
    args = [str(model_path), str(threads), ",".join(map(str, parallel)), str(prompt), str(context), str(steps),
            "1" if _repack_weights() else "0"]
    code = ("import json, sys\nfrom bench.engine_limit import _decode_limit\n"
            "a = sys.argv[1:]\n"
            "print(json.dumps(_decode_limit(a[0], int(a[1]), [int(x) for x in a[2].split(',')], int(a[3]), "
            "int(a[4]), int(a[5]), a[6] == '1')))")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=Path(__file__).resolve().parent.parent)
    if done.returncode != 0:
        raise RuntimeError(f"the engine's limit run failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))

