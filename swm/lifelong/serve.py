"""Serve policy versions: every trained version becomes a model spec the episode graph can call.

Two ways, chosen per run (`swm.serving.serve_adapter`): embedded (default), a GGUF LoRA on
llama.cpp over the base GGUF, one server per (base, adapter), so the deploy gate plays the
incumbent and the candidate side by side; or runtime LoRA on an OpenAI-compatible server
(``--lora-server``), the adapter addressed as ``<lora_name>@<base_url>``.

`policy_spec` returns the spec a version plays with, serving it first where that is needed;
`None` means the run's own models (the base version ``p0`` and ``memory`` versions).
"""

from __future__ import annotations

from pathlib import Path

from swm.errors import ModelUnavailable
from swm.lifelong.records import digest
from swm.lifelong.update import PolicyVersion
from swm.llm import ModelSpec, is_embedded
from swm.serving.adapters import serve_adapter
from swm.serving.runtime_lora import ensure_lora_loaded


def lora_name(policy: PolicyVersion, run_id: str = "") -> str:
    """Return the name a runtime-LoRA server knows a policy's adapter by (unique per run and version)."""
    return f"swm-{policy.version}-{digest(run_id, policy.adapter or '', size=8)}"


def runtime_lora_spec(policy: PolicyVersion, base_url: str, run_id: str = "") -> str:
    """Load a policy's PEFT adapter on a runtime-LoRA server and return the spec that addresses it."""
    if not policy.adapter:
        raise ModelUnavailable(f"policy {policy.version} has no adapter to serve", "train it first")
    spec, _ = serve_adapter(Path(policy.adapter), name=lora_name(policy, run_id), lora_server=base_url)
    return spec


def policy_spec(policy: PolicyVersion | None) -> str | None:
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
