"""Self-play's served rollouts on a vLLM-class server with runtime LoRA loading (``--lora-server``).

Against a loopback fake of vLLM's routes whose completions are decoded in torch by a tiny base with
the requested adapter applied (tests/fake_vllm.py): each iteration's adapter is loaded by name, the
previous one unloaded, the adapter verified after every load (listed by name, its content hash, a
greedy probe against the torch policy), and the requests name it as their model. A server that plays
another adapter under the name, a name that holds other weights, and a server without runtime LoRA
each stop the iteration before a rollout is sampled.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
from fake_vllm import FakeVllm, wide_tiny_llama  # noqa: E402
from test_selfplay_graph import run  # noqa: E402

from swm.checkpoints import ExperienceStore  # noqa: E402
from swm.cli import main  # noqa: E402
from swm.errors import ModelUnavailable  # noqa: E402
from swm.selfplay import loop, serving  # noqa: E402
from swm.selfplay.checkpoint import checkpoint_dir, save_atomic  # noqa: E402
from swm.selfplay.plan import SelfPlayPlan  # noqa: E402
from swm.selfplay.served import resolve_sampler  # noqa: E402
from swm.selfplay.store import load_rollouts  # noqa: E402
from swm.serving.runtime_lora import load_lora_adapter  # noqa: E402
from swm.serving.verify import ServedMismatch, adapter_sha256  # noqa: E402
from swm.tasks.families import synthesize  # noqa: E402
from swm.testing import FakeOpenAIServer  # noqa: E402
from swm.training.config import PolicyConfig  # noqa: E402
from swm.training.policy import collate, gather  # noqa: E402
from swm.training.ppo import fill_old_logprobs, training_samples  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wide_tiny_llama(tmp_path_factory.mktemp("wide") / "model")


_Vllm = FakeVllm  # a fake vLLM server (runtime LoRA routes) whose completions `TorchLora` decodes


@pytest.fixture
def vllm(base: Path) -> Iterator[_Vllm]:
    fake = _Vllm(base)
    with fake.server:
        yield fake


def make_plan(base: Path, out: Path, url: str, **policy: Any) -> SelfPlayPlan:
    return SelfPlayPlan.model_validate({
        "run_id": "vllm", "iterations": 2, "tasks_per_iteration": 1, "group_size": 2, "max_turns": 2,
        "eval_tasks": 1, "out_dir": str(out), "ppo": {"lr": 1e-3, "minibatch": 4},
        "policy": {"base": str(base), "lora_server": url, "lora_r": 4, "lora_alpha": 8, "max_new_tokens": 4,
                   **policy}})


def job(plan: SelfPlayPlan, sample: int = 0) -> dict[str, Any]:
    task = synthesize(plan.family, plan.level, 7)
    return {"rollout_id": f"{plan.run_id}/i0/train/{task.task_id}/g{sample}", "unit_id": task.task_id,
            "unit": {"task": task.model_dump(mode="json")}, "iteration": 0, "sample": sample, "phase": "train"}


def perturbed_checkpoint(plan: SelfPlayPlan, iteration: int = 1, scale: float = 0.5) -> Path:
    """Save checkpoint ``iteration`` with an adapter whose greedy replies differ from the base's (at this scale)."""
    policy = serving.POOL.get(plan.policy, checkpoint_dir(plan.run_dir, 0))
    with torch.no_grad():
        torch.manual_seed(3)
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn_like(param) * scale)
    save_atomic(plan.run_dir, iteration, lambda tmp: policy.save(tmp, None, {"iteration": iteration}))
    serving.POOL.forget(plan.policy)
    return checkpoint_dir(plan.run_dir, iteration)


def greedy(plan: SelfPlayPlan, checkpoint: Path, prompt: str, tokens: int = 6) -> str:
    """The torch policy's greedy reply under ``checkpoint`` (what the adapter says)."""
    policy = serving.POOL.get(plan.policy, checkpoint)
    ids = policy.prompt_ids(prompt)
    with torch.no_grad():
        out = policy.model.generate(input_ids=torch.tensor([ids]), do_sample=False, max_new_tokens=tokens)[0].tolist()
    return str(policy.tokenizer.decode(out[len(ids):], skip_special_tokens=True))


def test_a_lora_server_makes_the_sampler_served_without_llama_cpp(base: Path) -> None:
    assert resolve_sampler(PolicyConfig(base=str(base), lora_server="http://127.0.0.1:1/v1")) == "served"
    assert resolve_sampler(PolicyConfig(base=str(base), lora_server="http://127.0.0.1:1/v1", sampler="torch")) \
        == "torch"


def test_a_served_rollout_samples_the_checkpoints_adapter_by_name(base: Path, vllm: _Vllm, tmp_path: Path) -> None:
    url = vllm.server.base_url
    plan = make_plan(base, tmp_path / "out", url)
    loop.ensure_initial_checkpoint(plan)
    store = ExperienceStore(tmp_path / "run.db")
    rollout = loop.run_rollout(plan, store, job(plan), 0)
    checkpoint = checkpoint_dir(plan.run_dir, 0)
    sha = adapter_sha256(checkpoint / "adapter")
    name = serving.lora_name(plan, 0, sha)
    assert rollout.failed is None and rollout.sampler == f"{name}@{url}"
    assert vllm.server.adapters() == {name: str((checkpoint / "adapter").resolve())}
    served = json.loads((checkpoint / "served.json").read_text())
    assert served["name"] == name and served["sha256"] == sha and served["server"] == url
    sampled = [b for b in vllm.server.bodies() if b.get("temperature")]
    assert sampled and {b["model"] for b in vllm.server.bodies()} == {name}, "every request names the adapter"
    assert all(b["top_k"] == -1 and b["repetition_penalty"] == 1.0 for b in sampled), "vLLM's pure sampling"
    policy = serving.POOL.get(plan.policy, checkpoint)
    turns = [t for s in rollout.seats for t in s.turns]
    assert all(t.logprobs == [] for t in turns), "π_old is the update's (PolicyConfig.score_old)"
    trained = rollout.model_copy(deep=True)
    for t in (t for s in trained.seats for t in s.turns):
        t.advantages = [1.0] * len(t.token_ids)
    samples = training_samples([trained])
    fill_old_logprobs(policy, samples, plan.ppo)
    scored = iter(x for s in samples for x in s.old_logprobs)
    for turn in turns:
        batch = collate([turn.prompt_ids], [turn.token_ids], policy.tokenizer.pad_token_id)
        with torch.no_grad():
            expected = gather(policy.score(batch)[0], batch)[0]
        recomputed = [next(scored) for _ in turn.token_ids]
        assert recomputed == pytest.approx(expected, abs=1e-5), "log-probs are the torch policy's, recomputed"


def test_each_iterations_adapter_replaces_the_last_and_plays_its_own_weights(base: Path, vllm: _Vllm,
                                                                            tmp_path: Path) -> None:
    url = vllm.server.base_url
    plan = make_plan(base, tmp_path / "out", url, temperature=1e-3, max_new_tokens=6)
    loop.ensure_initial_checkpoint(plan)
    first = checkpoint_dir(plan.run_dir, 0)
    second = perturbed_checkpoint(plan)
    prompt = "Ava , it is your turn ."
    wanted = [greedy(plan, first, prompt), greedy(plan, second, prompt)]
    assert wanted[0] != wanted[1], "the perturbed adapter changes the greedy reply"
    replies, names = [], []
    for checkpoint in (first, second):
        sampler, spec = serving.served_sampler(plan, checkpoint, "s")
        names.append(spec.split("@")[0])
        replies.append(sampler.generate(prompt).text)
    assert replies == wanted, "near temperature 0 the server says what each checkpoint's adapter says"
    assert vllm.server.adapters() == {names[1]: str((second / "adapter").resolve())}, "iteration 0's was unloaded"
    assert json.loads((second / "served.json").read_text())["sha256"] == adapter_sha256(second / "adapter")


def test_a_server_that_plays_another_adapter_under_the_name_is_caught(base: Path, tmp_path: Path) -> None:
    fake = _Vllm(base, ignore_adapter=True)  # lists every adapter it is given, plays the base
    with fake.server:
        plan = make_plan(base, tmp_path / "out", fake.server.base_url)
        loop.ensure_initial_checkpoint(plan)
        perturbed_checkpoint(plan)
        store = ExperienceStore(tmp_path / "run.db")
        with pytest.raises(ServedMismatch) as caught:
            loop.run_rollout(plan, store, job(plan), 1)
        sampled = [b for b in fake.server.bodies() if b.get("temperature")]
    assert "does not play the trained adapter" in str(caught.value) and "\n" not in str(caught.value)
    assert not sampled and not load_rollouts(store, plan.run_id, 0, "train"), "no rollout sampled the wrong policy"


def test_a_name_that_holds_other_weights_is_caught_by_its_content(base: Path, vllm: _Vllm, tmp_path: Path) -> None:
    plan = make_plan(base, tmp_path / "out", vllm.server.base_url)
    loop.ensure_initial_checkpoint(plan)
    checkpoint = checkpoint_dir(plan.run_dir, 0)
    stale = tmp_path / "stale"
    shutil.copytree(checkpoint / "adapter", stale)
    (stale / "adapter_config.json").write_text((stale / "adapter_config.json").read_text() + " ")
    name = serving.lora_name(plan, 0, adapter_sha256(checkpoint / "adapter"))
    load_lora_adapter(vllm.server.base_url, name, str(stale))  # the server already holds the name, other content
    with pytest.raises(ServedMismatch, match="whose content is not the trained adapter's"):
        serving.served_sampler(plan, checkpoint, "s")


def test_a_server_without_runtime_lora_is_refused_in_one_line(base: Path, tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        plan = make_plan(base, tmp_path / "out", server.base_url)
        loop.ensure_initial_checkpoint(plan)
        with pytest.raises(ModelUnavailable) as caught:
            serving.served_sampler(plan, checkpoint_dir(plan.run_dir, 0), "s")
    text = caught.value.one_line()
    assert "\n" not in text and "cannot load LoRA adapters" in text and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" in text


def test_the_graph_serves_each_iterations_adapter_on_the_lora_server(base: Path, vllm: _Vllm,
                                                                    tmp_path: Path) -> None:
    plan = make_plan(base, tmp_path / "out", vllm.server.base_url)
    out = run(tmp_path / "run.db", {"plan": plan.model_dump(mode="json")})
    assert out["iteration"] == 2 and out["stopped"] is None
    assert {out["summaries"][i]["sampler"] for i in ("0", "1")} == {"served"}
    store = ExperienceStore(tmp_path / "run.db")
    for iteration in (0, 1):
        for phase, checkpoint in (("train", iteration), ("eval", iteration + 1)):
            served = json.loads((checkpoint_dir(plan.run_dir, checkpoint) / "served.json").read_text())
            assert served["sha256"] == adapter_sha256(checkpoint_dir(plan.run_dir, checkpoint) / "adapter")
            rollouts = load_rollouts(store, plan.run_id, iteration, phase)
            assert rollouts and {r.sampler for r in rollouts} == {f"{served['name']}@{vllm.server.base_url}"}
    assert list(vllm.server.adapters()) == [served["name"]], "one adapter of the run loaded at a time"



# the command, on a game: a tiny random model earns rewards there (±1 a side, −0.5 an illegal move), so PPO
# moves the adapter; at this step size its greedy replies stay the base's
SELFPLAY = ["selfplay", "--game", "werewolf", "--max-rounds", "1", "--iterations", "2", "--tasks", "1", "--group", "2",
            "--eval-tasks", "1", "--kl-coef", "0", "--train-lr", "0.005", "--max-new-tokens", "4", "--train-rank", "4",
            # the value head's advantages move the adapter after one iteration; the group estimator (the default)
            # has none to give two games of equal rewards, and an adapter that is the base is not a case to catch
            "--estimator", "hierarchical", "--train-batch-size", "4"]


def test_selfplay_stops_on_a_server_that_samples_the_base_where_it_is_not_greedy(base: Path, tmp_path: Path) -> None:
    """A server that lists every adapter and plays it at temperature 0 (where the greedy probe looks) but samples the
    base is caught by the served log-probs on the sampled path: no rollout under the trained adapter is kept."""
    fake = _Vllm(base, ignore_adapter="sampled")
    with fake.server:
        result = CliRunner().invoke(main, [*SELFPLAY, "--base", str(base), "--lora-server", fake.server.base_url,
                                           "--db", str(tmp_path / "run.db"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 3, result.output
    line = result.output.strip().splitlines()[-1]
    assert "does not play the trained adapter" in line and "sampled path (temperature 0.7)" in line, line
    under_trained = ExperienceStore(tmp_path / "run.db").count("selfplay_rollouts", "phase = 'eval' or iteration > 0")
    assert under_trained == 0, "no rollout was sampled from the base under the trained adapter's name"


def test_a_server_honest_only_where_it_is_checked_stops_before_the_update_and_a_rerun_plays_again(
        base: Path, tmp_path: Path) -> None:
    """A server that plays the adapter where a probe looks (temperature 0, one token) and the base on every rollout
    request passes every probe; its own log-probs of the tokens it sampled, asked for on the rollout requests,
    are the base's: the run stops in one line (exit 3) before training on them, they are let go, and the rerun
    of the same thread on the mended server plays them again under the adapter."""
    fake = _Vllm(base, ignore_adapter="probes")
    with fake.server:
        # a step size that moves the adapter's log-probs of what it samples past the tolerance in one iteration
        # no held-out tasks: the training rollouts' own check is the one this holds (the next test: held-out)
        args = [*SELFPLAY, "--train-lr", "0.05", "--eval-tasks", "0", "--base", str(base), "--lora-server",
                fake.server.base_url, "--thread-id", "H",
                "--db", str(tmp_path / "run.db"), "--out", str(tmp_path / "out")]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 3, result.output
        line = result.output.strip().splitlines()[-1]
        assert line.startswith("error: the server at") and "does not play the trained adapter" in line, line
        assert "on iteration 1's rollouts: its log-probs of the" in line and "\n" not in line, line
        store = ExperienceStore(tmp_path / "run.db")
        assert store.count("selfplay_rollouts", "phase = 'train' and iteration = 1") == 0, "let go, not trained on"
        assert not list((tmp_path / "out").rglob("iter-0002")), "no update on them"
        fake.torch.ignore_adapter = False
        played = len(fake.torch.played)
        again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert store.count("selfplay_rollouts", "phase = 'train' and iteration = 1 and failed is null") == 2
    assert "" not in fake.torch.played[played:], "the rerun's every request was played by an adapter"


def test_a_server_honest_only_where_it_is_checked_is_caught_on_the_held_out_rollouts_too(
        base: Path, tmp_path: Path) -> None:
    """Held-out rollouts have no torch pass of their own: a server playing the base on them would have the run report
    the base's held-out rate as the trained policy's. A seeded draw of them is scored after they are played: the run
    stops in one line at the first evaluation under a trained checkpoint, keeps none of them, and the rerun on the
    mended server plays them again under the adapter. It failed before the check (exit 3 only at iteration 1's
    training rollouts, with iteration 0's base-played held-out rollout kept as checkpoint 1's)."""
    fake = _Vllm(base, ignore_adapter="probes")
    with fake.server:
        args = [*SELFPLAY, "--train-lr", "0.05", "--base", str(base), "--lora-server", fake.server.base_url,
                "--thread-id", "E", "--db", str(tmp_path / "run.db"), "--out", str(tmp_path / "out")]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 3, result.output
        line = result.output.strip().splitlines()[-1]
        assert "does not play the trained adapter" in line and "on iteration 0's held-out rollouts" in line, line
        store = ExperienceStore(tmp_path / "run.db")
        assert store.count("selfplay_rollouts", "phase = 'eval'") == 0, "none kept as the trained policy's"
        fake.torch.ignore_adapter = False
        played = len(fake.torch.played)
        again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert store.count("selfplay_rollouts", "phase = 'eval' and failed is null") == 2
    assert "" not in fake.torch.played[played:], "the rerun's every request was played by an adapter"


def test_a_server_honest_where_it_is_asked_for_log_probs_plays_the_adapter_on_every_rollout(
        base: Path, tmp_path: Path) -> None:
    """The issue's server: the adapter on requests at temperature 0 or asking for log-probs, the base on the others.
    Every rollout request asks for the log-probs of what it samples, so none is played by the base."""
    fake = _Vllm(base, ignore_adapter="unasked")
    with fake.server:
        result = CliRunner().invoke(main, [*SELFPLAY, "--base", str(base), "--lora-server", fake.server.base_url,
                                           "--db", str(tmp_path / "run.db"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert fake.torch.played and "" not in fake.torch.played, "no request was played by the base"
    sampled = [b for b in fake.server.bodies() if b.get("temperature") and b.get("max_tokens") != 1]
    assert sampled and all(b["logprobs"] == 1 and b["return_tokens_as_token_ids"] for b in sampled)


def greedy_twin(plan: SelfPlayPlan) -> Path:
    """Checkpoint 1: an adapter whose greedy replies are the base's, whose log-probs are not."""
    return perturbed_checkpoint(plan, 1, scale=0.05)


def test_an_adapter_whose_greedy_replies_are_the_bases_is_told_apart_by_log_probs(base: Path, tmp_path: Path) -> None:
    ignoring, faithful = _Vllm(base, ignore_adapter=True), _Vllm(base)
    with ignoring.server, faithful.server:
        plan = make_plan(base, tmp_path / "out", ignoring.server.base_url, temperature=1.0)
        loop.ensure_initial_checkpoint(plan)
        twin = greedy_twin(plan)
        prompt = "Ava , it is your turn ."
        assert greedy(plan, twin, prompt) == greedy(plan, checkpoint_dir(plan.run_dir, 0), prompt)
        with pytest.raises(ServedMismatch, match="on the greedy path its next-token log-probs") as caught:
            loop.run_rollout(plan, ExperienceStore(tmp_path / "run.db"), job(plan), 1)
        assert "\n" not in str(caught.value)
        policy = plan.policy.model_copy(update={"lora_server": faithful.server.base_url})
        plan = plan.model_copy(update={"policy": policy})
        loop.run_rollout(plan, ExperienceStore(tmp_path / "run.db"), job(plan), 1)
    record = json.loads((twin / "served.json").read_text())["logprobs"]
    assert record["discriminating"] and record["max_distance"] < 1e-3, record


def test_a_server_that_forgot_the_adapter_gets_it_loaded_and_verified_again(base: Path, vllm: _Vllm,
                                                                          tmp_path: Path) -> None:
    """A restart between two turns of a rollout (HTTP 404 for the adapter's name): load, verify, send again."""
    plan = make_plan(base, tmp_path / "out", vllm.server.base_url, temperature=1.0)
    loop.ensure_initial_checkpoint(plan)
    twin = greedy_twin(plan)
    store = ExperienceStore(tmp_path / "run.db")
    loop.run_rollout(plan, store, job(plan, 0), 1)
    (twin / "served.json").unlink()
    vllm.server.configure(forget_adapters_at=vllm.server.requests + 1)  # after the next rollout's first turn
    rollout = loop.run_rollout(plan, store, job(plan, 1), 1)
    assert rollout.failed is None and len([t for s in rollout.seats for t in s.turns]) == 2
    assert vllm.server.stats()["attempts"] > vllm.server.stats()["requests"], "one request met the 404"
    name = rollout.sampler.split("@")[0]
    assert name in vllm.server.adapters() and json.loads((twin / "served.json").read_text())["name"] == name, \
        "loaded again and verified again (served.json rewritten)"


def test_an_iteration_with_no_rollout_stops_in_one_line_and_a_rerun_plays_it(base: Path, tmp_path: Path) -> None:
    """Every rollout failed (the server drops every sampled request): no update on nothing, exit 3; once the server
    is mended, the rerun of the same thread plays the iteration's rollouts again and goes on."""
    fake = _Vllm(base)
    probe, broken = fake.torch, [True]

    def failing(prompt: str, body: dict[str, Any]) -> Any:
        if broken[0] and body.get("temperature") and body.get("max_tokens") != 1:  # every rollout request
            raise RuntimeError("the sampler is broken")
        return probe(prompt, body)

    fake.server = FakeOpenAIServer(lora=True, record=True, scripts={"<completion>": failing})
    with fake.server:
        args = [*SELFPLAY, "--iterations", "1", "--base", str(base), "--lora-server", fake.server.base_url,
                "--thread-id", "N", "--db", str(tmp_path / "run.db"), "--out", str(tmp_path / "out")]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 3, result.output
        line = result.output.strip().splitlines()[-1]
        assert line.startswith("error: iteration 0 has no rollout to train on: 2 of 2 failed"), line
        assert not list((tmp_path / "out").rglob("iter-0001")), "no update was saved"
        broken[0] = False
        again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    store = ExperienceStore(tmp_path / "run.db")
    assert store.count("selfplay_rollouts", "phase = 'train' and failed is null") == 2
