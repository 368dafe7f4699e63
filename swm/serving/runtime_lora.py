"""Runtime LoRA on an OpenAI-compatible server: load an adapter by name, address it as ``name@url``.

vLLM started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` takes POST
``/v1/load_lora_adapter`` with ``lora_name`` and ``lora_path`` (the PEFT adapter directory, which
the server must be able to read); swm then addresses the adapter as ``<lora_name>@<base_url>``.
A server without that route gets a one-line error that says what to run. An adapter is loaded
once per process and server (a restarted server forgets its adapters: load it again).
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


def load_lora_adapter(base_url: str, name: str, path: str, timeout: float = 120.0) -> None:
    """Ask an OpenAI-compatible server to load a LoRA adapter under ``name`` (vLLM's runtime route).

    Loading a name the server already holds is fine (vLLM answers 400 "already been loaded").
    """
    clean, key = endpoint_key(base_url)
    base_url = redact_url(base_url)  # what the messages below may show
    url = clean.rstrip("/") + "/load_lora_adapter"
    body = json.dumps({"lora_name": name, "lora_path": path}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            reply.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        if exc.code in (404, 405):
            raise ModelUnavailable(f"the server at {base_url} cannot load LoRA adapters at run time "
                                   f"(POST /load_lora_adapter answered {exc.code})", LORA_HINT) from exc
        if exc.code == 400 and "already" in detail.lower():
            return
        raise ModelUnavailable(f"the server at {base_url} refused adapter {name} from {path}: "
                               f"HTTP {exc.code} {' '.join(detail.split())}",
                               "check that the server can read the adapter directory and that its rank fits "
                               "--max-lora-rank") from exc
    except OSError as exc:
        raise ModelUnavailable(f"cannot reach the LoRA server at {base_url}: {exc}",
                               "start the server or fix --lora-server") from exc


def ensure_lora_loaded(base_url: str, name: str, path: str) -> None:
    """Load an adapter on a runtime-LoRA server once per process (see `load_lora_adapter`)."""
    key = (base_url.rstrip("/"), name)
    with _loaded_lock:
        if key not in _loaded:
            load_lora_adapter(base_url, name, path)
            _loaded.add(key)
