"""bench.engine end to end on the loopback fake server, and the metering proxy's arithmetic (no timing asserts)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench import engine
from bench.engine_workloads import Row, busy_seconds, peak
from bench.extra_graphs import SCRIPTS
from bench.meter import Call, Meter, python_server_evaluated, shared_prefixes
from swm.testing import FakeOpenAIServer


def test_the_bench_runs_every_workload_on_an_endpoint(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "engine.json"
    with FakeOpenAIServer(latency=0.05, scripts=SCRIPTS) as server:
        engine.main(["--endpoint", server.model_spec, "--workloads", "plain,foresee,lifelong,werewolf", "--quick",
                     "--act-orders", "sotopia", "--in-flight", "3", "--json", str(out)])
        answered = server.requests
    rows = {r["workload"].split(" ")[0]: Row(**r) for r in json.loads(out.read_text())["paths"]["endpoint"]}
    assert set(rows) == {"plain", "foresee", "lifelong", "werewolf"} and not any(r.error for r in rows.values())
    assert rows["plain"].calls == 3 * 2 and rows["foresee"].calls == 2 * 3, "one call a turn; three a Foresee turn"
    assert rows["lifelong"].calls == 4, "the collect phase's four decisions, not the baseline's or the candidate's"
    assert rows["werewolf"].calls >= 5 and sum(r.calls for r in rows.values()) <= answered
    assert 2 <= rows["plain"].peak <= 3, "the episodes ran side by side, at most --in-flight at once"
    assert all(r.completion > 0 and r.prompt_sent > 0 and r.tokens_per_s > 0 for r in rows.values())
    cycle = rows["lifelong"]
    assert cycle.total_seconds and 0 < (cycle.sampling_seconds or 0) <= cycle.total_seconds
    assert cycle.prompt_evaluated is None, "the fake server says nothing of what it evaluated"
    printed = capsys.readouterr().out
    assert "plain episodes (3 x 2 turns)" in printed and "lifelong cycle: collect (4 decisions)" in printed
    assert all(r.bound_sent > 0 and r.bound_unit == "characters" and r.bound is not None and 0 <= r.bound <= 1
               for r in rows.values()), "the fake server tokenizes nothing: prompts compared by the text sent"


def test_the_prefix_order_is_measured_beside_sotopias(tmp_path: Path, capsys: Any) -> None:
    """Both acting-prompt orders, a row each: with the conversation last, a seat's later turns could be served
    almost wholly from a prefix cache (the bound); in SOTOPIA's order the instructions after it are sent again."""
    from bench.meter import METERS

    METERS.forget()  # another test's episodes in this process would count as sent before
    out = tmp_path / "engine.json"
    with FakeOpenAIServer(latency=0.01, scripts=SCRIPTS) as server:
        engine.main(["--endpoint", server.model_spec, "--workloads", "plain", "--in-flight", "2", "--turns", "6",
                     "--act-orders", "sotopia,prefix", "--json", str(out), "--no-page"])
    rows = [Row(**r) for r in json.loads(out.read_text())["paths"]["endpoint"]]
    assert [r.workload for r in rows] == ["plain episodes (2 x 6 turns)", "plain episodes (2 x 6 turns, prefix order)"]
    sotopia, prefix = rows
    assert sotopia.continued_calls == prefix.continued_calls == 2 * 4, "each seat's second and third turns"
    assert prefix.continued_bound is not None and sotopia.continued_bound is not None
    assert prefix.continued_bound < 0.5 * sotopia.continued_bound, (prefix.continued_bound, sotopia.continued_bound)
    assert "continued" in capsys.readouterr().out


def test_shared_prefixes_count_only_what_a_call_sent_earlier_had_sent() -> None:
    calls = [Call(0.0, 1.0, 1, 1, text="abcdef"),
             Call(4.5, 5.0, 1, 1, text="abcxy1"),  # the third's "abcxy", the longest of all sent before
             Call(0.5, 2.0, 1, 1, text="abcxyz"),  # the first's "abc", though sent before the first was answered
             Call(1.5, 3.0, 1, 1, text="abcdeQ"),  # the first's "abcde"
             Call(3.5, 4.0, 1, 1, text="zzz")]
    assert shared_prefixes(calls) == [0, 5, 3, 5, 0]
    assert shared_prefixes([Call(0, 1, 1, 1, tokens=[1, 2, 3]), Call(1, 2, 1, 1, tokens=[1, 2, 4, 5])]) == [0, 2]


class _Upstream(BaseHTTPRequestHandler):
    """A server that answers as llama.cpp's does: usage plus timings (prompt tokens evaluated and cached)."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({"choices": [{"text": "hi"}], "usage": {"prompt_tokens": 100, "completion_tokens": 7},
                           "timings": {"prompt_n": 20, "cache_n": 80}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_the_meter_forwards_and_records_what_the_engine_evaluated() -> None:
    import httpx

    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    meter = Meter(f"http://127.0.0.1:{upstream.server_address[1]}")
    try:
        url = meter.proxied(f"http://127.0.0.1:{upstream.server_address[1]}/v1")
        for _ in range(2):
            reply = httpx.post(f"{url}/completions", json={"prompt": "x"})
            assert reply.status_code == 200 and reply.json()["choices"][0]["text"] == "hi"
    finally:
        meter.close()
        upstream.shutdown()
    recorded = [(c.prompt_tokens, c.completion_tokens, c.evaluated, c.cached) for c in meter.calls]
    assert recorded == [(100, 7, 20, 80)] * 2


def test_the_python_servers_log_gives_the_prompt_tokens_it_evaluated(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("llama_perf_context_print: prompt eval time =   30991.94 ms /   618 tokens (50.15 ms per token)\n"
                   "Llama.generate: 106 prefix-match hit, remaining 542 prompt tokens to eval\n")
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write("llama_perf_context_print: prompt eval time =   22423.41 ms /   542 tokens (41.37 ms per token)\n"
                "llama_perf_context_print:        eval time =    3256.40 ms /    31 runs\n")
    assert python_server_evaluated(log, 0) == (618 + 542, 2)
    assert python_server_evaluated(log, offset) == (542, 1)


def test_peak_busy_time_and_ratios_to_the_limit() -> None:
    calls = [Call(0, 2, 10, 5), Call(1, 3, 10, 5), Call(5, 6, 10, 5)]
    assert peak(calls) == 2 and busy_seconds(calls) == 4
    limit = {"threads": 2, "prompt_tokens_per_s": 300.0, "generate": {"1": 50.0, "4": 80.0, "8": 100.0}}
    row = Row("plain episodes (8 x 2 turns)", 8, seconds=10, calls=16, prompt_sent=1000, prompt_evaluated=250,
              completion=500, peak=8, total_seconds=100, sampling_seconds=40, training_seconds=50)
    lines = engine.table(limit, {"new": [row.__dict__]})
    line = lines[2].split()
    assert line[:2] == ["new", "plain"] and "50.0" in line and "0.50" in line and "0.25" in line
    assert "0.40" in line and "0.10" in line, "sampling 40 of 100 s, training 50, the rest 10"
    # the engine alone needs 250 / 300 s for the prompt it evaluated and 500 / 100 s to generate at 8 in flight
    assert lines[-1].split()[-2:] == ["0.58", "characters"], lines[-1]
