"""Serve policy versions: every trained version becomes a model spec the episode graph can call.

Two ways, chosen per run (`swm.serving.serve_adapter`): embedded (default), a GGUF LoRA on
llama.cpp over the base GGUF (on llama-server one process per base, each request naming its
adapter; on the Python server one per (base, adapter)), so the deploy gate plays the incumbent
and the candidate side by side; or runtime LoRA on an OpenAI-compatible server
(``--lora-server``), the adapter addressed as ``<lora_name>@<base_url>``.

`policy_spec` returns the spec a version plays with, serving it first where that is needed;
`None` means the run's own models (the base version ``p0`` and ``memory`` versions). A trained
version is served from the folder `swm.lifelong.artifacts.local_adapter` finds or restores from
the run's store, whose content hash must be the one recorded when it was trained.
`verify_deploy` checks, right after a deploy, that the server plays the trained adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from swm.context import LifelongContext
from swm.errors import ModelUnavailable
from swm.lifelong.artifacts import local_adapter
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.records import digest
from swm.lifelong.update import PolicyVersion
from swm.llm import ModelSpec, is_embedded
from swm.serving import embedded
from swm.serving.adapters import require_base_gguf, serve_adapter
from swm.serving.runtime_lora import ensure_lora_loaded
from swm.serving.verify import (
    ServedMismatch,
    adapter_sha256,
    check_embedded_identity,
    check_logprobs,
    check_probe,
    check_runtime_identity,
    greedy_probe,
    logprob_probes,
)

LORA_SERVER_HINT = "serve adapters on a runtime-LoRA server with --lora-server URL"


def lora_name(policy: PolicyVersion, run_id: str = "") -> str:
    """Return the name a runtime-LoRA server knows a policy's adapter by (unique per run, version and content).

    Named by the adapter's content hash where it is recorded, so a copy restored into another
    folder keeps its name (and one name never means two contents).
    """
    return f"swm-{policy.version}-{digest(run_id, policy.adapter_sha256 or policy.adapter or '', size=8)}"


def runtime_lora_spec(policy: PolicyVersion, base_url: str, run_id: str = "") -> str:
    """Load a policy's PEFT adapter on a runtime-LoRA server and return the spec that addresses it."""
    if not policy.adapter:
        raise ModelUnavailable(f"policy {policy.version} has no adapter to serve", "train it first")
    spec, _ = serve_adapter(Path(policy.adapter), name=lora_name(policy, run_id), lora_server=base_url)
    return spec


def policy_spec(policy: PolicyVersion | None, ctx: LifelongContext | None = None,
                plan: LifelongPlan | None = None) -> str | None:
    """Return the model spec that plays ``policy`` (serving it first), or None for the run's own models.

    A policy served by a runtime-LoRA server (``served_as`` = ``name@url``) is loaded there again
    if this process has not yet done it (a restarted server forgets its adapters), and the server must
    then list the name with the recorded content (`check_runtime_identity`); an embedded
    spec starts its llama.cpp server on first use. With the run's context (its store and
    ``--out``) and plan, a trained policy's adapter is first found or restored with its recorded
    content hash (`local_adapter`; a changed one stops the run in one line), and an embedded one
    is served from that folder's GGUF, which must have been converted from that content.
    """
    if policy is None or not policy.served_as:
        return None
    spec = ModelSpec.parse(policy.served_as)
    adapter = policy.adapter
    if ctx is not None and policy.adapter and policy.adapter_sha256:
        local = local_adapter(ctx.experience_store(), policy, ctx.out_dir or (plan.out_dir if plan else "."))
        if is_embedded(spec.name):
            base = require_base_gguf(plan.hf_model if plan else None, plan.base_gguf if plan else None,
                                     LORA_SERVER_HINT)
            served, gguf = serve_adapter(local, base_gguf=base)
            if gguf is not None:
                check_embedded_identity(gguf, gguf, policy.adapter_sha256)
            return served
        adapter = str(local)
    if spec.base_url is not None and not is_embedded(spec.name) and adapter:
        if ensure_lora_loaded(spec.base_url, spec.name, adapter) and policy.adapter_sha256:
            # loaded again (a restarted server, a resumed run): the name must hold the recorded content
            check_runtime_identity(spec.base_url, spec.name, policy.adapter_sha256)
    return policy.served_as


def verify_deploy(spec: str, adapter_dir: Path, base: str | None, prompt: list[dict[str, str]],
                  check: str = "full", stop: Sequence[str] = (), temperature: float = 0.7) -> dict[str, Any]:
    """Check that ``spec`` serves the adapter just trained (`swm.serving.verify`); return what was verified.

    ``prompt`` (the first training row's messages) is the probe: the adapter was trained on it, so
    there its reply differs most from the base's; ``stop`` are the strings that end a reply where it is
    sampled (a decision ends at its first newline), so the probe compares the replies the policy plays.
    On a runtime-LoRA server the server's next-token log-probs along that reply must also be the
    adapter's, not the base's, greedy and at the sampling ``temperature`` (`check_logprobs`).
    Raises `ServedMismatch` (one line) on a mismatch.
    """

    sha = adapter_sha256(adapter_dir)
    parsed = embedded.parse_spec(spec)
    if parsed is not None:
        base_gguf, lora = parsed
        if lora is None:
            raise ServedMismatch(f"{spec} serves no LoRA at all", "rerun the cycle to serve the trained adapter")
        check_embedded_identity(lora, lora, sha)  # a stale GGUF is refused before a server starts on it
        server = embedded.ensure_server(base=base_gguf, lora=lora)
        check_embedded_identity(lora, embedded.served_lora(server), sha)
        url, name, fields = server.base_url, "embedded", server.fields
    else:
        model = ModelSpec.parse(spec)
        url, name, fields = str(model.base_url), model.name, {}
        check_runtime_identity(url, name, sha)
    record: dict[str, Any] = {"name": name if parsed is None else str(lora), "sha256": sha}
    if check == "full":
        from peft import PeftModel  # optional: the [train] extra

        from swm.training.base import load_base

        model_obj, tokenizer = load_base(base)
        trained = PeftModel.from_pretrained(model_obj, str(adapter_dir))
        text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        probe = greedy_probe(trained, tokenizer, str(text), stop=stop)
        check_probe(url, name, probe, tokenizer, fields=fields)
        record["probe"] = probe.record()
        if parsed is None:  # runtime LoRA: its log-probs at full precision tell the adapter from the base
            probes = logprob_probes(trained, tokenizer, [str(text)])
            record["logprobs"] = check_logprobs(url, name, probes, tokenizer, temperature, seed=len(sha))
    return record
