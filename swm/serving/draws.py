"""How a seeded draw goes to the embedded engine, so that the same prompt, seed and adapter give the same move.

A draw at a temperature is fixed by its seed only if the logits it samples from are. llama.cpp's are
not fixed by the prompt alone: they also depend on how the prompt was evaluated. A server that finds
the prompt (or a prefix of it) in its cache evaluates only the tokens after the cached part (at least
the last one), in a smaller batch than a first evaluation, and on SmolLM2's Q4_1 weights the CPU
kernels round the two differently; at a temperature a slightly different distribution is a
different draw from the same seed wherever the draw lands near the edge between two tokens, and
everything after that token differs. Both engines do it: llama-server reuses a slot's cached prompt
(``cache_prompt``, on by default), llama-cpp-python's server the prompt it evaluated last. So the
same request drew ``ANSWER: No, there is no answer…`` on an idle server and ``ANSWER:`` after it.
llama.cpp's maintainers' answer is to turn the cache off where determinism is wanted
(ggml-org/llama.cpp#2838, #4902, PR #22224).

Draw modes (``SWM_EMBEDDED_DRAW``; `mode`):

* ``fresh`` (default): every seeded draw evaluates its whole prompt from an empty cache. On llama-server
  the request carries ``cache_prompt: false`` (`fields`); llama-cpp-python's server, which has no such
  field, is started with a patch (`PYTHON_SERVER_PATCH`) that clears its state before a request that
  names a seed. Requests without a seed (chat calls) keep the cache.
* ``alone``: ``fresh``, and one seeded draw at a time per server in this process (`one_at_a_time`), each
  sample its own request, so no other sequence of this process is decoded in the same batch. Only needed
  where the batch a draw shares changes its logits; bench/draws.py measures whether it does.
* ``cached``: the engine's prompt cache is used (the behaviour before ``fresh``): faster on long shared
  prefixes, and a draw then depends on what the server evaluated before it.
* ``seat``: for a seat's append-only chat (`swm.training.transcript`) on llama-server: the seat is pinned
  to a slot (``id_slot``, `seat_fields`); its first turn evaluates its whole prompt (no cache), each later
  turn reuses the slot's cache of its previous prompt and reply, so only the new tokens are evaluated. The
  same seed and transcript then give the same evaluation order, so the same move, as long as every seat in
  flight keeps its own slot (seats in flight no more than the server's slots); it is not ``fresh``'s draw
  (the reply's tokens were evaluated one at a time, not in a batch: `bench.engine_speed` measures both).
  A draw outside a seat's chat is drawn ``fresh``.

The run record says which mode a run drew with (`describe`, in `swm.serving.embedded.engine_info`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from swm.errors import InputError

DrawMode = Literal["fresh", "alone", "cached", "seat"]
MODES: tuple[DrawMode, ...] = ("fresh", "alone", "cached", "seat")
DEFAULT: DrawMode = "fresh"

# llama-cpp-python's server: a completion that names a seed starts from an empty state (no prefix reuse)
PYTHON_SERVER_PATCH = (
    "import llama_cpp\n"
    "_swm_create = llama_cpp.Llama._create_completion\n"
    "def _swm_fresh_when_seeded(self, *args, **kwargs):\n"
    "    if kwargs.get('seed') is not None:\n"
    "        self.reset()\n"
    "    return _swm_create(self, *args, **kwargs)\n"
    "llama_cpp.Llama._create_completion = _swm_fresh_when_seeded\n")

_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def mode() -> DrawMode:
    """Return the draw mode (``SWM_EMBEDDED_DRAW``: fresh, alone, cached or seat; default fresh)."""
    chosen = (os.environ.get("SWM_EMBEDDED_DRAW") or DEFAULT).strip().lower()
    if chosen not in MODES:
        raise InputError(f"SWM_EMBEDDED_DRAW={chosen} is not a draw mode", f"choose one of {', '.join(MODES)}")
    return chosen  # type: ignore[return-value]


def fields(chosen: DrawMode | None = None) -> dict[str, Any]:
    """Return the request body fields of a seeded draw in ``chosen`` mode (default `mode`) on llama-server."""
    return {} if (chosen or mode()) == "cached" else {"cache_prompt": False}


def seat_fields(slot: int, first: bool, chosen: DrawMode | None = None) -> dict[str, Any]:
    """Request fields of a seat's turn on llama-server: pinned to ``slot`` and cached after its ``first`` in ``seat``
    mode, `fields` otherwise."""
    if (chosen or mode()) != "seat":
        return fields(chosen)
    return {"id_slot": slot, "cache_prompt": not first}


class SlotPins:
    """Each seat in flight its own slot, in turn, of a server with ``slots`` slots (``seat`` mode)."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def pin(self, base_url: str, slots: int) -> int:
        """A slot for a seat starting its chat: the server's slots in turn."""
        with self._lock:
            slot = self._next.get(base_url, 0)
            self._next[base_url] = (slot + 1) % max(1, slots)
            return slot


PINS = SlotPins()


def shares_requests(chosen: DrawMode | None = None) -> bool:
    """Tell whether the samples of one prompt may share a request (``n`` choices): not when drawn alone."""
    return (chosen or mode()) != "alone"


@contextmanager
def one_at_a_time(base_url: str, chosen: DrawMode | None = None) -> Iterator[None]:
    """Hold this process's turn to draw on the server at ``base_url`` (``alone`` mode; other modes do not wait)."""
    if (chosen or mode()) != "alone":
        yield
        return
    with _locks_lock:
        lock = _locks.setdefault(base_url, threading.Lock())
    with lock:
        yield


def describe(chosen: DrawMode | None = None) -> str:
    """Say in one line how seeded draws are sent, for run records and reports."""
    return {"fresh": "fresh: every seeded draw evaluates its whole prompt (no prompt cache)",
            "alone": "alone: no prompt cache, one seeded draw at a time, each sample its own request",
            "cached": "cached: the engine's prompt cache is used (a draw depends on what was evaluated before it)",
            "seat": "seat: each seat's chat served from its own slot's cache, only new tokens evaluated",
            }[chosen or mode()]
