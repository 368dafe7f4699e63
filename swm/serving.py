"""Serving policy versions: every trained policy becomes a model spec the episode graph can call.

Two ways, chosen per run:

* **Embedded** (default): llama.cpp serves the base GGUF with the policy's adapter converted to a
  GGUF LoRA (`swm.lifelong.gguf_lora`); the spec is ``embedded:lora=/…/p1.gguf`` (plus
  ``base=…`` for a base other than the shipped SmolLM2), and `swm.embedded` starts one server per
  (base, adapter), so the deploy gate plays the incumbent and the candidate side by side.
* **Runtime LoRA** on an OpenAI-compatible server (vLLM started with ``--enable-lora`` and
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``): swm POSTs ``/v1/load_lora_adapter`` with
  ``lora_name`` and ``lora_path`` (the PEFT adapter directory, which the server must be able to
  read) and addresses the adapter as ``<lora_name>@<base_url>``. A server without that route
  gets a one-line error that says what to run.

`policy_spec` returns the spec a policy plays with, serving it first where that is needed
(a runtime adapter is loaded once per process and server); `None` means the run's own models
(the base policy ``p0`` and ``memory`` policies).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from swm.errors import ModelUnavailable
from swm.llm import ModelSpec, is_embedded

if TYPE_CHECKING:
    from swm.lifelong.update import Policy

_loaded: set[tuple[str, str]] = set()
_loaded_lock = threading.Lock()

LORA_HINT = ("start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "
             "(vllm serve BASE --enable-lora --max-lora-rank 64), or drop --lora-server to serve adapters "
             "with the embedded llama.cpp server")


def lora_name(policy: Policy, run_id: str = "") -> str:
    """Return the name a runtime-LoRA server knows a policy's adapter by (unique per run and version)."""
    from swm.lifelong.records import digest

    return f"swm-{policy.version}-{digest(run_id, policy.adapter or '', size=8)}"


def load_lora_adapter(base_url: str, name: str, path: str, timeout: float = 120.0) -> None:
    """Ask an OpenAI-compatible server to load a LoRA adapter under ``name`` (vLLM's runtime route).

    Loading a name the server already holds is fine (vLLM answers 400 "already been loaded").
    """
    url = base_url.rstrip("/") + "/load_lora_adapter"
    body = json.dumps({"lora_name": name, "lora_path": path}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
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


def runtime_lora_spec(policy: Policy, base_url: str, run_id: str = "") -> str:
    """Load a policy's PEFT adapter on a runtime-LoRA server and return the spec that addresses it."""
    if not policy.adapter:
        raise ModelUnavailable(f"policy {policy.version} has no adapter to serve", "train it first")
    name = lora_name(policy, run_id)
    ensure_lora_loaded(base_url, name, policy.adapter)
    return f"{name}@{base_url.rstrip('/')}"


def policy_spec(policy: Policy | None) -> str | None:
    """Return the model spec that plays ``policy`` (serving it first), or None for the run's own models.

    A policy served by a runtime-LoRA server (``served_as`` = ``name@url``) is loaded there again
    if this process has not yet done it (a restarted server forgets its adapters); an embedded
    spec starts its llama.cpp server on first use.
    """
    if policy is None or not policy.served_as:
        return None
    spec = ModelSpec.parse(policy.served_as)
    if spec.base_url is not None and not is_embedded(spec.name) and policy.adapter:
        ensure_lora_loaded(spec.base_url, spec.name, policy.adapter)
    return policy.served_as


def serve_adapter(adapter_dir: Path, *, name: str, base_gguf: Path | None = None,
                  lora_server: str | None = None) -> tuple[str, Path | None]:
    """Serve a trained PEFT adapter; return (model spec, GGUF LoRA path or None).

    With ``lora_server`` the adapter is loaded there under ``name``; otherwise it is converted
    to a GGUF LoRA beside the adapter (once: a finished conversion is reused) and served by
    llama.cpp over ``base_gguf`` (None: the shipped SmolLM2 GGUF).
    """
    if lora_server:
        ensure_lora_loaded(lora_server, name, str(adapter_dir))
        return f"{name}@{lora_server.rstrip('/')}", None
    from swm.embedded import embedded_spec, gguf_path
    from swm.lifelong.gguf_lora import adapter_to_gguf

    out = adapter_dir.with_suffix(".gguf")
    if not out.is_file():
        adapter_to_gguf(adapter_dir, out)
    default = base_gguf is None or Path(base_gguf).resolve() == gguf_path().resolve()
    return embedded_spec(lora=out, base=None if default else base_gguf), out
