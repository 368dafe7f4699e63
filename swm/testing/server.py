"""A loopback OpenAI-compatible server whose latency and replies are controlled.

``POST /v1/chat/completions`` answers a tool call (when the request binds tools) whose arguments
are a valid instance of the tool's JSON schema — scripted per tool name, else the minimal valid
instance — or a short text. Each request sleeps a fixed or seeded, sampled latency, measured on
the server side, and returns real ``usage`` fields (tokens estimated as characters / 4). So a
benchmark against it measures swm, not a model; and integration tests get a real HTTP endpoint::

    with FakeOpenAIServer(latency=0.2) as server:
        ctx = SWMContext(model=server.model_spec)     # every role: ChatOpenAI over loopback
        ...
        assert server.requests == 2

With ``lora=True`` it also stands in for vLLM's runtime LoRA loading: ``POST
/v1/load_lora_adapter`` (``lora_name``, ``lora_path``) records the adapter, ``POST
/v1/unload_lora_adapter`` (``lora_name``) lets it go, ``GET /v1/models`` lists each loaded adapter
with its directory as ``root``, and a request for a model that is neither ``fake`` nor a loaded
adapter answers 404, as vLLM does; without it those routes answer 404 like a server started
without ``--enable-lora``. A ``"<completion>"`` script sees the adapter a request names in its
body's ``model`` (`FakeOpenAIServer.adapters` maps names to directories).

A chat request with ``stream: true`` (as agent harnesses send, verifiers' among them) gets the same
answer as an event stream: the message as one delta, the finish reason, the usage when
``stream_options.include_usage`` asks for it, then ``[DONE]``.

``POST /v1/completions`` (a raw prompt, as llama-server's and vLLM's) answers ``n`` choices, each the
``"<completion>"`` script's text (a function gets the choice's seed in the body) or the default text.

``GET /stats`` returns the counters as JSON, ``POST /reset`` clears them and ``POST /config``
changes the latency, so the server also runs as a separate process (``process=True``, or
``python -m swm.testing.server``) and then costs the measured process no CPU or GIL time.

Faults, for the fault-injection tests and ``bench/faults.py``: ``configure(faults=[...])`` queues
one fault per coming chat request, ``configure(fault_rate=p, fault_kinds=[...])`` draws them
(seeded). Kinds (`FAULTS`): ``500`` (an HTTP 500), ``429`` (with ``Retry-After: retry_after``
seconds), ``hang`` (no answer for ``hang`` seconds, then the connection closes), ``drop`` (the
connection closes with no answer), ``invalid_json`` (HTTP 200 with a truncated body), ``huge``
(HTTP 200 with ``huge_chars`` characters of junk instead of the answer), ``html`` (HTTP 200 with a
proxy's login page), ``sse`` (HTTP 200 with an event stream nobody asked for), ``double_json`` (tool
arguments that are a JSON string of the JSON text), ``drip`` (the reply after ``drip_bytes`` bytes
of padding, one per ``drip_interval`` seconds: a read timeout never fires), ``missing_choice`` (the
answer with its last choice left out), ``null_choice`` (its first choice with no text), ``bad_arguments``
(a tool call whose arguments are not JSON) and ``wrong_tool`` (a tool call naming a tool nobody
offered): chat completions a misformatting model sends, not retried; ``echo_key`` (HTTP 400 whose
message quotes the bearer key it was sent, as some gateways word a refusal). ``html`` to ``wrong_tool``
are generated answers, so they count in ``requests`` too. ``retry_after_ms`` adds
that header to 500s and 429s, so tests back off in milliseconds. ``attempts`` counts every chat
request, faulted or not; ``requests`` only the ones answered normally; ``injected`` the faults.
``forget_adapters_at=N`` (``lora=True``) forgets every loaded adapter once N requests were answered, as a
restarted vLLM does: its next request naming one gets HTTP 404.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Mapping
from typing import Any

from swm.testing.endpoint import DEFAULT_TEXT, FAULTS, _handler, _Server, _State

__all__ = ["FakeOpenAIServer", "FAULTS", "main"]


class FakeOpenAIServer:
    """The fake endpoint, in a thread of this process (default) or in a child process.

    ``latency`` seconds per request (``jitter`` > 0: normal with that standard deviation,
    seeded); ``scripts`` maps a tool name (or ``"<text>"`` for plain calls) to a reply or a
    function ``(prompt, body) -> reply``; ``record`` keeps request bodies for replay. Scripts
    that are functions need the in-thread server. They run on its request threads, several at once
    when requests overlap (a client with concurrency above 1): a script that keeps state (a count, a
    first-time check) holds a lock around reading and changing it.
    """

    def __init__(self, latency: float = 0.0, *, jitter: float = 0.0, seed: int = 0,
                 scripts: Mapping[str, Any] | None = None, text: str = DEFAULT_TEXT, record: bool = False,
                 process: bool = False, lora: bool = False, model: str | None = None) -> None:
        self.process_mode = process
        self._settings = {"latency": latency, "jitter": jitter, "seed": seed, "record": record}
        self._scripts = dict(scripts or {})
        self._state = _State(latency, jitter, seed, self._scripts, text, record, lora)
        self._state.model = model  # as a llama-server stand-in: the GGUF GET /props names (in-thread server)
        if process and any(callable(s) for s in (scripts or {}).values()):
            raise ValueError("scripted functions need the in-thread server (process=False)")
        self._http: _Server | None = None
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen[str] | None = None
        self.base_url = ""

    # ---- life cycle ---------------------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        if self.process_mode:
            cmd = [sys.executable, "-m", "swm.testing.server", "--port", "0"] + [
                f"--{k}={v}" for k, v in self._settings.items() if k != "record"]
            if self._settings["record"]:
                cmd.append("--record")
            if self._state.lora:
                cmd.append("--lora")
            if self._scripts:
                cmd.append(f"--scripts={json.dumps(self._scripts)}")
            self._child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            line = self._child.stdout.readline() if self._child.stdout else ""
            if not line.startswith("READY "):
                self.stop()
                raise RuntimeError(f"the fake server did not start: {line!r}")
            self.base_url = line.split()[1]
        else:
            self._http = _Server(("127.0.0.1", 0), _handler(self._state))
            self._thread = threading.Thread(target=self._http.serve_forever, name="fake-openai", daemon=True)
            self._thread.start()
            self.base_url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        return self

    def stop(self) -> None:
        self._state.release.set()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._child is not None:
            self._child.terminate()
            self._child.wait(timeout=10)
            self._child = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- what the runs did --------------------------------------------------------------
    @property
    def model_spec(self) -> str:
        """The swm model spec that points every role at this server."""
        return f"fake@{self.base_url}"

    def _call(self, method: str, path: str, payload: object = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(f"{self.base_url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    def stats(self) -> dict[str, Any]:
        """Return requests, per-request slept seconds, calls per tool and peak concurrency."""
        return self._call("GET", "/stats") if self.process_mode else self._state.stats()

    @property
    def requests(self) -> int:
        return int(self.stats()["requests"])

    @property
    def slept(self) -> float:
        """Seconds the server actually slept, summed over requests since the last reset."""
        return float(self.stats()["slept_total"])

    def adapters(self) -> dict[str, str]:
        """Return the runtime-LoRA adapters loaded now (``lora=True``): name → directory."""
        return dict(self.stats()["adapters"])

    def bodies(self) -> list[dict[str, Any]]:
        """Return the recorded request bodies (``record=True``)."""
        if self.process_mode:
            return list(self._call("GET", "/bodies"))
        with self._state.lock:
            return list(self._state.bodies)

    def reset(self) -> None:
        if self.process_mode:
            self._call("POST", "/reset", {})
        else:
            self._state.reset()

    def configure(self, **settings: Any) -> None:
        """Change ``latency``, ``jitter``, ``seed``, ``record``, ``fail_at`` or the faults on the running server.

        ``fail_at=K`` makes every request after the first K since the last `reset` answer HTTP 400 (the
        client raises and the graph stops, as if killed), however many arrive at once; ``fail_at=-1``
        turns that off. ``faults``, ``fault_rate``, ``fault_kinds``, ``retry_after``, ``retry_after_ms``,
        ``hang``, ``huge_chars``, ``forget_adapters_at``, ``drip_interval`` and ``drip_bytes``: see the
        module docstring.
        """
        if self.process_mode:
            self._call("POST", "/config", settings)
            return
        self._state.configure(settings)


def main(argv: list[str] | None = None) -> None:
    """Serve until killed; print ``READY <base_url>`` once listening.

    ``--fault-rate P --fault-kinds 500,hang`` draws faults (seeded by ``--seed``) from the start;
    ``POST /config`` changes them while it runs, as `FakeOpenAIServer.configure` does.
    """
    parser = argparse.ArgumentParser(prog="python -m swm.testing.server", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (loopback by default)")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed on the READY line)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    parser.add_argument("--jitter", type=float, default=0.0, help="standard deviation of the latency, seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", action="store_true", help="keep request bodies (GET /bodies)")
    parser.add_argument("--lora", action="store_true",
                        help="serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter as vLLM does")
    parser.add_argument("--scripts", default="{}", help="JSON: {tool name: arguments object | text}")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="share of chat requests that get a fault")
    parser.add_argument("--fault-kinds", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument("--model", default=None,
                        help="as a llama-server stand-in: the GGUF path GET /props names (swm checks it is its own)")
    args = parser.parse_args(argv)
    state = _State(args.latency, args.jitter, args.seed, json.loads(args.scripts), DEFAULT_TEXT, args.record,
                   args.lora)
    state.model = args.model
    try:
        state.configure({"fault_rate": args.fault_rate, "fault_kinds": args.fault_kinds.split(",")})
    except ValueError as exc:
        parser.error(str(exc))
    server = _Server((args.host, args.port), _handler(state))
    print(f"READY http://{args.host}:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
