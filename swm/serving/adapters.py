"""Serve a trained PEFT adapter: as a GGUF LoRA on llama.cpp over a base GGUF, or on a runtime-LoRA server.

`serve_adapter` takes paths and returns the model spec that plays the adapter. Embedded (the
default): the adapter is converted once to a GGUF LoRA beside it (``<adapter dir>.gguf``) and the
spec is ``embedded:lora=…`` (plus ``base=…`` for a base other than the shipped SmolLM2), which
`swm.serving.embedded` serves on first use (llama-server: on the base's one process, chosen per
request; the Python server: one process per (base, adapter)). With a
``lora_server`` the adapter is loaded there (`swm.serving.runtime_lora`).

`find_base_gguf` is the one rule for which GGUF llama.cpp serves an adapter over;
`ServerSlots` keeps one adapter served per slot (a run), letting the previous one go when the
next one is served.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from swm.credentials import remember
from swm.errors import InputError
from swm.serving import embedded
from swm.serving.embedded import embedded_spec, gguf_path
from swm.serving.gguf_lora import adapter_to_gguf
from swm.serving.runtime_lora import ensure_lora_loaded

_converting = threading.Lock()  # parallel rollouts may ask for the same adapter's GGUF at once


def find_base_gguf(base: str | None, base_gguf: str | Path | None = None) -> Path | None:
    """Return the GGUF llama.cpp serves an adapter of ``base`` over, or None when there is none.

    ``base_gguf`` names it outright; a ``.gguf`` base is its own; no base or ``"embedded"`` means
    the shipped (or ``SWM_LOCAL_GGUF``) GGUF; a Hugging Face directory or id has none.
    """
    if base_gguf:
        return Path(base_gguf).expanduser()
    if base is None or base == "embedded":
        return gguf_path()
    if str(base).endswith(".gguf"):
        return Path(base).expanduser()
    return None


def require_base_gguf(base: str | None, base_gguf: str | Path | None, otherwise: str) -> Path:
    """Return `find_base_gguf`'s GGUF, or raise a one-line error naming ``--base-gguf`` and ``otherwise``."""
    found = find_base_gguf(base, base_gguf)
    if found is None:
        raise InputError(f"no GGUF of the base {base} for llama.cpp to serve the adapter over",
                         f"pass --base-gguf with the GGUF of the base (llama.cpp's convert_hf_to_gguf.py makes one), "
                         f"or {otherwise}")
    return found


def adapter_gguf(adapter_dir: Path, meta: dict[str, Any] | None = None) -> Path:
    """Return the GGUF LoRA beside a PEFT adapter, converting it first if no finished conversion is there."""
    out = adapter_dir.with_suffix(".gguf")
    with _converting:
        if not out.is_file():
            adapter_to_gguf(adapter_dir, out, meta)
    return out


def serve_adapter(adapter_dir: Path, *, base_gguf: Path | None = None, name: str = "",
                  lora_server: str | None = None, meta: dict[str, Any] | None = None) -> tuple[str, Path | None]:
    """Serve a trained PEFT adapter; return (model spec, GGUF LoRA path or None).

    With ``lora_server`` the adapter is loaded there under ``name``; otherwise it is converted to
    a GGUF LoRA (`adapter_gguf`, ``meta`` as `adapter_to_gguf` takes it) and served by llama.cpp
    over ``base_gguf`` (None: the shipped GGUF).
    """
    if lora_server:
        ensure_lora_loaded(lora_server, name, str(adapter_dir))
        return f"{name}@{remember(lora_server).rstrip('/')}", None  # the key stays in this process

    out = adapter_gguf(adapter_dir, meta)
    default = base_gguf is None or Path(base_gguf).resolve() == gguf_path().resolve()
    return embedded_spec(lora=out, base=None if default else base_gguf), out


class ServerSlots:
    """One adapter per slot (a run) at a time: serving a slot's next adapter lets its previous one go.

    On llama-server letting go releases the adapter (the base's process serves the others on); on
    the Python server it stops that adapter's own process.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._current: dict[str, tuple[Path, Any]] = {}  # slot → (adapter GGUF, `EmbeddedServer` view)

    def serve(self, slot: str, lora: Path, base: Path) -> Any:
        """Return the embedded server view that plays (``base``, ``lora``), serving it in ``slot`` if it is not."""

        with self.lock:
            current = self._current.get(slot)
            if current is not None and current[0] == lora and current[1].process.poll() is None:
                return current[1]
            if current is not None and current[0] != lora:
                embedded.stop_server(base=base, lora=current[0])
            server = embedded.ensure_server(base=base, lora=lora)
            self._current[slot] = (lora, server)
            return server
