"""Self-play's serving half: the policy cache, the samplers, and the checks that a server plays the checkpoint.

One policy per base model per process (`POOL`), its lock held around every use of the torch
model. A rollout samples either in torch (`SeededSampler`) or from a server (`served_sampler`):
llama.cpp serving the checkpoint's adapter as a GGUF LoRA, or the plan's runtime-LoRA server
(vLLM) loading it by name; either way the server is verified to play that adapter
(`verify_checkpoint`, `verify_runtime_checkpoint`) before a rollout samples from it.

torch is imported only inside the functions that need it, so plans, the graph and the CLI load
without the train extra.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swm.credentials import redact_url
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.served import (
    LORA_SLOTS,
    SERVERS,
    VLLM_SAMPLING,
    ServedSampler,
    probe_prompts,
    served_base,
    verify_logprobs,
)
from swm.serving.verify import adapter_sha256, check_probe, check_runtime_identity, greedy_probe, listed_adapters
from swm.tasks.decisions import Stop
from swm.training.config import PolicyConfig
from swm.training.trajectory import Generation
from swm.training.transcript import SeatChat

if TYPE_CHECKING:
    from swm.training.policy import Batch, LoraValueModel


class PolicyPool:
    """One policy per base model per process; a checkpoint's weights are loaded into it in place."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._policies: dict[str, LoraValueModel] = {}
        self._loaded: dict[str, str] = {}

    def get(self, config: PolicyConfig, checkpoint: Path | None) -> LoraValueModel:
        """Return the policy of ``config`` holding ``checkpoint``'s weights (a fresh adapter when None)."""
        from swm.training.policy import LoraValueModel  # optional: the [train] extra (it imports torch)

        key = config.model_dump_json()
        with self.lock:
            if key not in self._policies:
                self._policies[key] = LoraValueModel.create(config)
                self._loaded[key] = ""
            policy = self._policies[key]
            if checkpoint is not None and self._loaded[key] != str(checkpoint):
                policy.load_weights(checkpoint)
                self._loaded[key] = str(checkpoint)
            return policy

    def forget(self, config: PolicyConfig) -> None:
        """Mark the in-memory weights as unknown (after a diverged update), so the next get reloads them."""
        with self.lock:
            self._loaded[config.model_dump_json()] = ""


POOL = PolicyPool()


class SeededSampler:
    """Samples every turn of a rollout with a seed made from the run's seed, the rollout and the turn.

    The run id is not part of it, so two runs with the same seed (the benchmark's two estimators)
    sample the same iteration-0 rollouts from the same initial adapter.
    """

    def __init__(self, policy: LoraValueModel, seed_key: str) -> None:
        self.policy = policy
        self.seed_key = seed_key
        self.calls = 0

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,
                 max_tokens: int | None = None, chat: SeatChat | None = None) -> Generation:
        gen = self.policy.generate(prompt, seed=f"{self.seed_key}/{self.calls}", prefill=prefill, stop=stop,
                                   max_tokens=max_tokens, chat=chat)
        self.calls += 1
        return gen


def served_sampler(plan: SelfPlayPlan, checkpoint: Path, seed_key: str,
                    server_logprobs: bool = False) -> tuple[ServedSampler, str]:
    """A sampler on llama.cpp serving ``checkpoint``'s adapter, scored in torch; and the spec it was served as.

    ``server_logprobs`` also keeps llama.cpp's own log-probs of each turn (bench.selfplay --samplers).
    With the plan's ``lora_server`` the adapter is served there instead (`_runtime_lora_sampler`).
    """
    if plan.policy.lora_server:
        return _runtime_lora_sampler(plan, checkpoint, seed_key, server_logprobs)
    from swm.serving.adapters import serve_adapter
    from swm.serving.gguf_lora import base_meta

    with POOL.lock:
        policy = POOL.get(plan.policy, checkpoint)
        meta_of_base = base_meta(policy.model.config, plan.policy.base)
    base = served_base(plan.policy)
    with _SERVING:
        spec, lora = serve_adapter(checkpoint / "adapter", base_gguf=base, meta=meta_of_base)
        assert lora is not None  # embedded serving always writes the GGUF LoRA
        server = SERVERS.serve(str(plan.run_dir), lora, base)
        verify_checkpoint(plan, checkpoint, lora, server)
    return ServedSampler(policy, server.base_url, seed_key, _scorer(plan, checkpoint), server_logprobs=server_logprobs,
                         fields=server.fields), spec


def _scorer(plan: SelfPlayPlan, checkpoint: Path) -> Callable[[Batch, list[Any]], Any]:
    """Score a batch under ``checkpoint`` with the shared torch policy (its lock held); ``raw`` is given the
    temperature-1 log-probs too (`LoraValueModel.score`)."""
    import torch  # optional: the [train] extra

    def score(batch: Batch, raw: list[Any]) -> Any:
        with POOL.lock, torch.no_grad():
            logprobs, _ = POOL.get(plan.policy, checkpoint).score(batch, raw=raw)
        return logprobs

    return score


def lora_name(plan: SelfPlayPlan, iteration: int, sha256: str) -> str:
    """The name a runtime-LoRA server knows a checkpoint's adapter by: unique per run and content."""
    digest = hashlib.sha256(f"{plan.run_id}/{sha256}".encode()).hexdigest()[:12]
    return f"swm-selfplay-i{iteration}-{digest}"


def _runtime_lora_sampler(plan: SelfPlayPlan, checkpoint: Path, seed_key: str,
                          server_logprobs: bool = False) -> tuple[ServedSampler, str]:
    """A sampler on the plan's runtime-LoRA server playing ``checkpoint``'s adapter by name, scored in torch.

    The adapter directory is loaded under a name made from its content (`lora_name`), the run's
    previous adapter unloaded, and the server checked to play it (`verify_runtime_checkpoint`) before
    any rollout samples from it; the spec is ``name@url``.
    """
    url = str(plan.policy.lora_server)
    adapter = (checkpoint / "adapter").resolve()
    with POOL.lock:
        policy = POOL.get(plan.policy, checkpoint)
    with _SERVING:
        sha = adapter_sha256(adapter)
        name = lora_name(plan, _iteration_of(checkpoint), sha)
        if LORA_SLOTS.serve(str(plan.run_dir), url, name, str(adapter)):
            _verified.discard((url, name))  # loaded just now: checked again
        try:
            verify_runtime_checkpoint(plan, checkpoint, url, name, sha)
        except Exception:
            LORA_SLOTS.forget(str(plan.run_dir))
            raise
    return ServedSampler(policy, url, seed_key, _scorer(plan, checkpoint), server_logprobs=server_logprobs,
                         model=name, sampling=VLLM_SAMPLING,
                         reload=lambda: _reload_runtime(plan, checkpoint, url, name, sha)), f"{name}@{url.rstrip('/')}"


def _reload_runtime(plan: SelfPlayPlan, checkpoint: Path, url: str, name: str, sha256: str) -> None:
    """Load and verify the adapter again on a server that forgot it (a restart); once for all rollouts waiting."""
    with _SERVING:
        if (url, name) in _verified and name in listed_adapters(url):
            return  # another rollout got it back already
        LORA_SLOTS.forget(str(plan.run_dir))
        _verified.discard((url, name))
        LORA_SLOTS.serve(str(plan.run_dir), url, name, str((checkpoint / "adapter").resolve()))
        verify_runtime_checkpoint(plan, checkpoint, url, name, sha256)


def _iteration_of(checkpoint: Path) -> int:
    """The iteration of a checkpoint folder (``iter-0003`` → 3)."""
    return int(checkpoint.name.rsplit("-", 1)[-1])


def verify_runtime_checkpoint(plan: SelfPlayPlan, checkpoint: Path, url: str, name: str, sha256: str) -> None:
    """Check once per load that the runtime-LoRA server plays the checkpoint's adapter (`swm.serving.verify`).

    Identity: the server lists ``name`` in ``/v1/models``, and where it says which directory it loaded
    (vLLM's ``root``) and that directory is readable here, its content hash is the checkpoint's.
    Probe: the fixed prompt decoded greedily by the server under ``name`` and by the torch policy
    must give the same reply, and the server's next-token log-probs where the adapter and the base
    differ most must be the adapter's, greedy and sampled (`swm.selfplay.served.verify_logprobs`).
    What was verified is written beside the checkpoint (``served.json``).
    """
    key = (url, name)
    if key in _verified:
        return
    check_runtime_identity(url, name, sha256)
    with POOL.lock:
        policy = POOL.get(plan.policy, checkpoint)
        prompt = policy.tokenizer.apply_chat_template([{"role": "user", "content": PROBE}],
                                                      add_generation_prompt=True, tokenize=False)
        probe = greedy_probe(policy.model, policy.tokenizer, str(prompt))
    check_probe(url, name, probe, policy.tokenizer)
    logprobs = verify_logprobs(policy, POOL.lock, url, name, probe_prompts(plan, _iteration_of(checkpoint), PROBE),
                               plan.policy.temperature)
    (checkpoint / "served.json").write_text(json.dumps({"server": redact_url(url), "name": name, "sha256": sha256,
                                                        "probe": probe.record(), "logprobs": logprobs}))
    _verified.add(key)


PROBE = "Say hello to the other players in one short sentence."
_verified: set[tuple[str, str]] = set()
# Rollouts run in parallel threads: the first to need an iteration's adapter converts, serves and
# verifies it; the others wait for that instead of converting the same file or probing twice.
_SERVING = threading.Lock()


def verify_checkpoint(plan: SelfPlayPlan, checkpoint: Path, lora: Path, server: Any) -> None:
    """Check once per server and adapter that llama.cpp plays the checkpoint's adapter (`swm.serving.verify`).

    Identity: the GGUF LoRA was converted from this checkpoint's adapter. Probe: a fixed prompt,
    decoded greedily by the server and by the torch policy, must give the same reply. What was
    verified is written beside the checkpoint (``served.json``); a mismatch raises `ServedMismatch`
    and stops the iteration before a rollout samples the wrong policy.
    """
    from swm.serving.embedded import served_lora
    from swm.serving.verify import check_embedded_identity

    key = (server.base_url, str(lora))
    if key in _verified:
        return
    sha = adapter_sha256(checkpoint / "adapter")
    check_embedded_identity(lora, served_lora(server), sha)
    with POOL.lock:
        policy = POOL.get(plan.policy, checkpoint)
        prompt = policy.tokenizer.apply_chat_template([{"role": "user", "content": PROBE}],
                                                      add_generation_prompt=True, tokenize=False)
        probe = greedy_probe(policy.model, policy.tokenizer, str(prompt))
    check_probe(server.base_url, "embedded", probe, policy.tokenizer, fields=server.fields)
    (checkpoint / "served.json").write_text(json.dumps({"gguf": str(lora), "sha256": sha, "probe": probe.record()}))
    _verified.add(key)
