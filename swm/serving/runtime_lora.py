"""Runtime LoRA on an OpenAI-compatible server: load an adapter by name, address it as ``name@url``.

vLLM started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` takes POST
``/v1/load_lora_adapter`` with ``lora_name`` and ``lora_path`` (the PEFT adapter directory, which
the server must be able to read) and POST ``/v1/unload_lora_adapter`` with ``lora_name``; swm then
addresses the adapter as ``<lora_name>@<base_url>`` (the request's ``model`` is the adapter's name).
A server without that route gets a one-line error that says what to run. An adapter is loaded
once per process and server (a restarted server forgets its adapters: load it again).
`LoraSlots` keeps one adapter per slot (a self-play run) loaded, unloading the previous one.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

from swm.credentials import endpoint_key, redact_url
from swm.errors import ModelUnavailable

_loaded: set[tuple[str, str]] = set()
_loaded_lock = threading.Lock()

LORA_HINT = ("start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
             "(vllm serve BASE --enable-lora --max-lora-rank 64), or drop --lora-server to serve adapters "
             "with the embedded llama.cpp server")


def _post(base_url: str, route: str, payload: dict[str, str], timeout: float) -> None:
    """POST ``payload`` to ``route`` of the server at ``base_url`` with the endpoint's key (`swm.credentials`)."""
    clean, key = endpoint_key(base_url)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(clean.rstrip("/") + route, data=json.dumps(payload).encode(), method="POST",
                                     headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        reply.read()


def load_lora_adapter(base_url: str, name: str, path: str, timeout: float = 120.0) -> None:
    """Ask an OpenAI-compatible server to load a LoRA adapter under ``name`` (vLLM's runtime route).

    Loading a name the server already holds is fine (vLLM answers 400 "already been loaded"): which
    content that name holds is for `swm.serving.verify` to check.
    """
    shown = redact_url(base_url)  # what the messages below may show
    try:
        _post(base_url, "/load_lora_adapter", {"lora_name": name, "lora_path": path}, timeout)
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        if exc.code in (404, 405):
            raise ModelUnavailable(f"the server at {shown} cannot load LoRA adapters at run time "
                                   f"(POST /load_lora_adapter answered {exc.code})", LORA_HINT) from exc
        if exc.code == 400 and "already" in detail.lower():
            return
        raise ModelUnavailable(f"the server at {shown} refused adapter {name} from {path}: "
                               f"HTTP {exc.code} {' '.join(detail.split())}",
                               "check that the server can read the adapter directory and that its rank fits "
                               "--max-lora-rank") from exc
    except OSError as exc:
        raise ModelUnavailable(f"cannot reach the LoRA server at {shown}: {exc}",
                               "start the server or fix --lora-server") from exc


def ensure_lora_loaded(base_url: str, name: str, path: str) -> bool:
    """Load an adapter on a runtime-LoRA server once per process (see `load_lora_adapter`); True if it loaded now."""
    key = (base_url.rstrip("/"), name)
    with _loaded_lock:
        if key in _loaded:
            return False
        load_lora_adapter(base_url, name, path)
        _loaded.add(key)
        return True


def unload_lora_adapter(base_url: str, name: str, timeout: float = 60.0) -> None:
    """Ask a runtime-LoRA server to let adapter ``name`` go (vLLM's POST ``/v1/unload_lora_adapter``).

    A name the server does not hold (restarted, or unloaded already) is fine; so is a server that
    cannot unload (the adapter then stays loaded, which costs the server memory, not correctness).
    """
    with _loaded_lock:
        _loaded.discard((base_url.rstrip("/"), name))
    try:
        _post(base_url, "/unload_lora_adapter", {"lora_name": name}, timeout)
    except urllib.error.HTTPError as exc:
        if exc.code not in (400, 404, 405):
            raise ModelUnavailable(f"the server at {redact_url(base_url)} could not unload adapter {name}: "
                                   f"HTTP {exc.code}", "check the server's log") from exc
    except OSError as exc:
        raise ModelUnavailable(f"cannot reach the LoRA server at {redact_url(base_url)}: {exc}",
                               "start the server or fix --lora-server") from exc


class LoraSlots:
    """One adapter per slot (a run) on a runtime-LoRA server: loading a slot's next adapter unloads its previous one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._current: dict[str, tuple[str, str]] = {}  # slot -> (base_url, adapter name)

    def serve(self, slot: str, base_url: str, name: str, path: str) -> bool:
        """Make ``name`` (the adapter at ``path``) the slot's adapter; return True when it was loaded just now."""
        with self.lock:
            current = self._current.get(slot)
            if current == (base_url, name):
                return False
            load_lora_adapter(base_url, name, path)
            with _loaded_lock:
                _loaded.add((base_url.rstrip("/"), name))
            if current is not None:
                unload_lora_adapter(*current)
            self._current[slot] = (base_url, name)
            return True

    def forget(self, slot: str) -> None:
        """Forget the slot's adapter (it failed its check): the next `serve` loads again."""
        with self.lock:
            self._current.pop(slot, None)
