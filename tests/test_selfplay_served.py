"""Self-play rollouts served by llama.cpp: each iteration's adapter as a GGUF LoRA, scored in torch.

On the tiny random Llama of swm/testing/tiny_llama.py (HF directory + F32 base GGUF). Needs the
[train] and [embedded] extras, which CI installs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("llama_cpp", reason="needs the [embedded] extra")
pytest.importorskip("peft")
from test_selfplay_graph import run  # noqa: E402

from swm.checkpoints import ExperienceStore  # noqa: E402
from swm.errors import InputError  # noqa: E402
from swm.selfplay import loop, serving  # noqa: E402
from swm.selfplay.checkpoint import checkpoint_dir, save_atomic  # noqa: E402
from swm.selfplay.plan import SelfPlayPlan  # noqa: E402
from swm.selfplay.served import ADAPTER_GGUF, resolve_sampler  # noqa: E402
from swm.selfplay.store import load_rollouts  # noqa: E402
from swm.serving import embedded  # noqa: E402
from swm.tasks.families import synthesize  # noqa: E402
from swm.training.config import PolicyConfig  # noqa: E402
from swm.training.policy import collate, gather  # noqa: E402


def policy_config(base: Path, **extra: Any) -> dict[str, Any]:
    return {"base": str(base), "base_gguf": str(base / "base.gguf"), "sampler": "served", "lora_r": 4,
            "lora_alpha": 8, "max_new_tokens": 6, **extra}


def make_plan(base: Path, out: Path, **extra: Any) -> SelfPlayPlan:
    return SelfPlayPlan.model_validate({
        "run_id": "served", "iterations": 2, "tasks_per_iteration": 1, "group_size": 2, "max_turns": 3,
        "eval_tasks": 1, "out_dir": str(out), "policy": policy_config(base), "ppo": {"lr": 1e-3, "minibatch": 4},
        **extra})


def job(plan: SelfPlayPlan, iteration: int = 0, sample: int = 0) -> dict[str, Any]:
    task = synthesize(plan.family, plan.level, 7)
    return {"rollout_id": f"{plan.run_id}/i{iteration}/train/{task.task_id}/g{sample}", "unit_id": task.task_id,
            "unit": {"task": task.model_dump(mode="json")}, "iteration": iteration, "sample": sample,
            "phase": "train"}


def test_the_sampler_setting_resolves_and_refuses_a_base_without_gguf(tiny_gguf_llama: Path) -> None:
    assert resolve_sampler(PolicyConfig(base=str(tiny_gguf_llama))) == "torch", "no base GGUF: auto samples in torch"
    assert resolve_sampler(PolicyConfig(base=str(tiny_gguf_llama), base_gguf="b.gguf")) == "served"
    assert resolve_sampler(PolicyConfig(base="m.gguf")) == "served"
    assert resolve_sampler(PolicyConfig(base=str(tiny_gguf_llama), base_gguf="b.gguf", sampler="torch")) == "torch"
    with pytest.raises(InputError) as caught:
        resolve_sampler(PolicyConfig(base=str(tiny_gguf_llama), sampler="served"))
    assert "--base-gguf" in caught.value.one_line() and "\n" not in caught.value.one_line()


@pytest.mark.parametrize(("server_says", "choice_says", "end"), [
    ({"__verbose": {"stop_type": "eos"}}, {}, None),
    ({"__verbose": {"stop_type": "word", "stopping_word": "\n\n"}}, {}, "\n\n"),
    ({"__verbose": {"stop_type": "word", "stopping_word": "\n4."}}, {}, "\n4."),
    ({"__verbose": {"stop_type": "word"}}, {}, "\n4."),
    ({}, {"stop_reason": "\n\n"}, "\n\n"),
    ({}, {"stop_reason": None}, None),
    ({}, {}, "\n4.")], ids=["eos", "second word", "first word", "word unnamed", "vllm word", "vllm eos", "not said"])
def test_a_reply_that_stopped_is_trained_with_the_end_it_sampled(tiny_gguf_llama: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 server_says: dict[str, Any],
                                                                 choice_says: dict[str, Any], end: str | None) -> None:
    """``finish_reason: "stop"`` is one of the stop strings or the end token: the turn's last tokens are the ones the
    server says it sampled (`served.ended_by_stop`), the first stop string's when it does not say which."""
    from openai.types import Completion

    from swm.selfplay.served import ServedSampler

    plan = make_plan(tiny_gguf_llama, tmp_path / "out")
    loop.ensure_initial_checkpoint(plan)
    checkpoint = checkpoint_dir(plan.run_dir, 0)
    policy = serving.POOL.get(plan.policy, checkpoint)
    sampler = ServedSampler(policy, "http://127.0.0.1:9/v1", "k", serving._scorer(plan, checkpoint), model="adapter",
                            sampling={})
    answer = Completion.model_validate({"id": "c", "created": 0, "model": "adapter", "object": "text_completion",
                                        "choices": [{"index": 0, "text": " Ann Lee", "finish_reason": "stop",
                                                     "logprobs": {"tokens": ["token_id:0"], "token_logprobs": [-1.0]},
                                                     **choice_says}], **server_says})
    asked: list[Any] = []
    monkeypatch.setattr(sampler.client.completions, "create", lambda **kwargs: asked.append(kwargs["stop"]) or answer)
    tok = policy.tokenizer
    gen = sampler.generate("Name a friend.", stop=("\n4.", "\n\n"))
    assert asked == [["\n4.", "\n\n"]], "the server is asked for every stop string"
    ending = [tok.eos_token_id] if end is None else tok.encode(end, add_special_tokens=False)
    assert gen.token_ids == [*tok.encode(" Ann Lee", add_special_tokens=False), *ending]
    assert gen.logprobs == [], "π_old is scored at the update (PolicyConfig.score_old), from these tokens"


@pytest.mark.parametrize("score_old", ["update", "sample"])
def test_a_served_rollout_records_tokens_scored_under_the_sampling_checkpoint(tiny_gguf_llama: Path, tmp_path: Path,
                                                                             score_old: str) -> None:
    """π_old is the torch policy's recomputation under the sampling checkpoint: of each turn as it is sampled
    (``sample``), or of each seat's whole transcript at the update (``update``, the default), the same numbers."""
    from swm.training.ppo import fill_old_logprobs, training_samples

    plan = make_plan(tiny_gguf_llama, tmp_path / "out", policy=policy_config(tiny_gguf_llama, score_old=score_old))
    loop.ensure_initial_checkpoint(plan)
    store = ExperienceStore(tmp_path / "run.db")
    first = loop.run_rollout(plan, store, job(plan), 0)
    assert first.failed is None and first.seats and first.tokens > 0
    assert first.sampler == embedded.embedded_spec(lora=checkpoint_dir(plan.run_dir, 0) / ADAPTER_GGUF,
                                                   base=tiny_gguf_llama / "base.gguf")
    turns = [t for s in first.seats for t in s.turns]
    policy = serving.POOL.get(plan.policy, checkpoint_dir(plan.run_dir, 0))
    assert all(s.turns[0].prompt_ids == policy.prompt_ids(s.turns[0].prompt) for s in first.seats if s.turns)
    assert first.append_ratio() == 1.0, "each seat's later prompts extend its chat, token for token"
    if score_old == "update":
        assert all(t.logprobs == [] for t in turns)
        trained = first.model_copy(deep=True)
        for t in (t for s in trained.seats for t in s.turns):
            t.advantages = [1.0] * len(t.token_ids)
        samples = training_samples([trained])
        assert fill_old_logprobs(policy, samples, plan.ppo) == len(samples) == len(first.seats)
        by_turn = iter(x for s in samples for x in s.old_logprobs)
        for turn in turns:
            turn.logprobs = [next(by_turn) for _ in turn.token_ids]
    for turn in turns:
        assert len(turn.token_ids) == len(turn.logprobs) > 0
        batch = collate([turn.prompt_ids], [turn.token_ids], policy.tokenizer.pad_token_id)
        with torch.no_grad():
            expected = gather(policy.score(batch)[0], batch)[0]
        assert turn.logprobs == pytest.approx(expected, abs=1e-5), "log-probs are the torch policy's, recomputed"
        # the text is what the tokens say (the end-of-turn token, when sampled, is not text)
        assert policy.tokenizer.decode(turn.token_ids, skip_special_tokens=True).strip() == turn.text
    again = loop.run_rollout(plan, store, job(plan), 0)
    assert again.transcript() == first.transcript(), "the request seeds make a replayed rollout the same"
    other = loop.run_rollout(plan, store, job(plan, sample=1), 0)
    assert other.transcript() != first.transcript(), "another sample of the group draws other replies"


def test_the_served_reply_comes_from_the_checkpoints_adapter(tiny_gguf_llama: Path, tmp_path: Path) -> None:
    """Near temperature 0, llama.cpp with the checkpoint's GGUF LoRA says what torch's greedy decoding says."""
    plan = make_plan(tiny_gguf_llama, tmp_path / "out",
                     policy=policy_config(tiny_gguf_llama, temperature=1e-3, max_new_tokens=8))
    loop.ensure_initial_checkpoint(plan)
    policy = serving.POOL.get(plan.policy, checkpoint_dir(plan.run_dir, 0))
    prompt = "Ava, it is your turn."
    with torch.no_grad():
        base_reply = policy.model.generate(input_ids=torch.tensor([policy.prompt_ids(prompt)]), do_sample=False,
                                           max_new_tokens=8)[0].tolist()
        torch.manual_seed(3)
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn_like(param) * 0.5)
        trained_reply = policy.model.generate(input_ids=torch.tensor([policy.prompt_ids(prompt)]), do_sample=False,
                                              max_new_tokens=8)[0].tolist()
    assert trained_reply != base_reply, "the perturbed adapter changes the greedy reply"
    save_atomic(plan.run_dir, 1, lambda tmp: policy.save(tmp, None, {"iteration": 1}))
    serving.POOL.forget(plan.policy)
    served = []
    for iteration in (0, 1):
        sampler, spec = serving.served_sampler(plan, checkpoint_dir(plan.run_dir, iteration), "s")
        assert f"iter-000{iteration}" in spec
        served.append(sampler.generate(prompt).text)
    n = len(policy.prompt_ids(prompt))

    def text(ids: list[int]) -> str:
        # the server's text drops a token that is part of a UTF-8 character (the random model emits such)
        return policy.tokenizer.decode(ids[n:], skip_special_tokens=True).replace("\ufffd", "")

    # (llama-server sends U+FFFD for such a token where llama-cpp-python's server dropped it)
    served = [s.replace("\ufffd", "") for s in served]
    assert served == [text(base_reply), text(trained_reply)] and served[0] != served[1]
    # one adapter per run at a time: iteration 0's was let go when iteration 1's was served
    live = [a for a in embedded.served_adapters() if plan.run_dir in a.parents]
    assert live == [checkpoint_dir(plan.run_dir, 1) / ADAPTER_GGUF]


def test_the_graph_serves_each_iterations_new_adapter(tiny_gguf_llama: Path, tmp_path: Path) -> None:
    plan = make_plan(tiny_gguf_llama, tmp_path / "out")
    out = run(tmp_path / "run.db", {"plan": plan.model_dump(mode="json")})
    assert out["iteration"] == 2 and out["stopped"] is None
    assert {out["summaries"][i]["sampler"] for i in ("0", "1")} == {"served"}
    store = ExperienceStore(tmp_path / "run.db")
    for iteration in (0, 1):
        trained_with = {r.sampler for r in load_rollouts(store, plan.run_id, iteration, "train")}
        evaluated_with = {r.sampler for r in load_rollouts(store, plan.run_id, iteration, "eval")}
        assert trained_with == {embedded.embedded_spec(
            lora=checkpoint_dir(plan.run_dir, iteration) / ADAPTER_GGUF, base=tiny_gguf_llama / "base.gguf")}
        assert evaluated_with == {embedded.embedded_spec(
            lora=checkpoint_dir(plan.run_dir, iteration + 1) / ADAPTER_GGUF, base=tiny_gguf_llama / "base.gguf")}
        turns = [t for r in load_rollouts(store, plan.run_id, iteration, "train") for s in r.seats for t in s.turns]
        assert turns and all(len(t.advantages) == len(t.token_ids) for t in turns)
        assert all(t.logprobs == [] for t in turns), "π_old is the update's, not stored per turn"


def test_llama_cpps_own_log_probs_match_the_torch_recomputation(tiny_gguf_llama: Path, tmp_path: Path) -> None:
    """On an F32 base the served and the recomputed log-probs of the same tokens agree (llama.cpp's KV cache is F16).

    At temperature 1: llama.cpp's log-probs are those of the raw logits, whatever it samples at.
    """
    # float32 in torch, as llama.cpp computes: bfloat16 autocast (the default on CPUs that have it) moves this random
    # model's log-probs by up to ~0.6 nats, SmolLM2's by far less (docs/results, bench.iteration)
    plan = make_plan(tiny_gguf_llama, tmp_path / "out", policy=policy_config(tiny_gguf_llama, max_new_tokens=8,
                                                                            temperature=1.0, autocast="off"))
    loop.ensure_initial_checkpoint(plan)
    sampler, _ = serving.served_sampler(plan, checkpoint_dir(plan.run_dir, 0), "lp", server_logprobs=True)
    gaps = []
    for i in range(6):
        gen = sampler.generate(f"Ava, it is turn {i}. Say hello.")
        if gen.served_logprobs is not None:
            gaps += [abs(a - b) for a, b in zip(gen.served_logprobs, gen.logprobs, strict=False)]
    assert len(gaps) >= 8 and max(gaps) < 0.25 and sum(gaps) / len(gaps) < 0.03


@pytest.mark.skipif(embedded.binary() is None, reason="llama-server is not built: `swm engine build` (CI builds it)")
def test_seat_turns_drawn_after_the_server_restarted_are_recorded_on_the_rollout(
        tiny_gguf_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``seat`` draws: llama-server killed after a rollout's second turn (both seats' chats begun) is started again,
    the rollout goes on in the same context, and its record counts the seat turns whose slot cache the restart lost
    (their draw is not the seeded one); a rollout with no restart counts none."""
    import os
    import signal

    from swm.selfplay.served import ServedSampler

    monkeypatch.setenv("SWM_EMBEDDED_ENGINE", "llama-server")
    monkeypatch.setenv("SWM_EMBEDDED_DRAW", "seat")
    plan = make_plan(tiny_gguf_llama, tmp_path / "out", max_turns=4)
    loop.ensure_initial_checkpoint(plan)
    store = ExperienceStore(tmp_path / "run.db")
    calm = loop.run_rollout(plan, store, job(plan), 0)
    assert calm.failed is None and calm.reseeded_turns == 0 and len(calm.order) == 4
    generate = ServedSampler.generate
    killed: list[int] = []

    def kill_after_the_second_turn(self: ServedSampler, prompt: str, prefill: str = "", stop: Any = None,
                                  max_tokens: int | None = None, chat: Any = None) -> Any:
        made = generate(self, prompt, prefill, stop, max_tokens, chat)  # the seat's chat taken, as the sampler's
        if self.calls == 2 and not killed:
            server = embedded._find(self.base_url)
            assert server is not None
            killed.append(server.process.pid)
            os.kill(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=30)
        return made

    monkeypatch.setattr(ServedSampler, "generate", kill_after_the_second_turn)
    hit = loop.run_rollout(plan, store, job(plan, sample=1), 0)
    assert killed and hit.failed is None and len(hit.order) == 4, hit.failed
    # turns 0 (A) and 1 (B) are each seat's first draw, before the kill; 2 and 3 (A, B again) reuse the slot's cache
    # in an uninterrupted rollout and met an empty one here (a seat whose chat begins after a restart keeps its cache)
    assert hit.reseeded_turns == 2
    stored = {r.rollout_id: r for r in load_rollouts(store, plan.run_id, 0, "train")}
    assert stored[hit.rollout_id].reseeded_turns == 2 and stored[calm.rollout_id].reseeded_turns == 0
