"""The request handler and shared state of `swm.testing.server.FakeOpenAIServer` (see that module)."""

from __future__ import annotations

import json
import random
import sys
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from swm.testing.schema_instance import minimal_instance, s3ap_parse_for

Script = Callable[[str, dict[str, Any]], Any]  # (prompt text, request body) -> arguments dict | str
DEFAULT_SCRIPTS: dict[str, Script] = {"S3APParse": lambda prompt, body: s3ap_parse_for(prompt)}
DEFAULT_TEXT = "speak: I think we can agree on that."
FAULTS = ("500", "429", "hang", "drop", "invalid_json", "huge", "html", "sse", "double_json", "drip", "missing_choice",
          "null_choice", "bad_arguments", "wrong_tool", "echo_key")
FAULT_SETTINGS = ("retry_after", "retry_after_ms", "hang", "huge_chars", "fault_rate", "usage", "drip_interval",
                  "drip_bytes", "forget_adapters_at")
USAGE = {"real": None, "missing": "leave the usage field out",
         "negative": "prompt_tokens -1000000, completion_tokens -5"}  # servers seen to send either


def _prompt_text(body: Mapping[str, Any]) -> str:
    parts = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        parts.append(str(content or ""))
    return "\n".join(parts)


def _tool_of(body: Mapping[str, Any]) -> dict[str, Any] | None:
    tools = body.get("tools") or []
    if not tools:
        return None
    choice = body.get("tool_choice")
    wanted = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    for tool in tools:
        if tool.get("function", {}).get("name") == wanted:
            return tool["function"]
    return tools[0].get("function")


class _State:
    """Counters and settings shared by the handler threads."""

    def __init__(self, latency: float, jitter: float, seed: int, scripts: Mapping[str, Any], text: str,
                 record: bool, lora: bool = False) -> None:
        self.lock = threading.Lock()
        self.lora = lora
        self.model: str | None = None  # the GGUF a llama-server stand-in says it serves (``/props``' model_path)
        self.adapters: dict[str, str] = {}  # lora_name -> lora_path, as loaded
        self.latency, self.jitter = latency, jitter
        self.rng = random.Random(seed)
        self.scripts = {**DEFAULT_SCRIPTS, **scripts}
        self.text = text
        self.record = record
        self.fail_at = -1  # when >= 0: requests after this many (`admitted`) answer HTTP 400 (a stand-in for a crash)
        self.faults: deque[str] = deque()
        self.fault_rate, self.fault_kinds = 0.0, list(FAULTS)
        self.fault_rng = random.Random(seed)
        self.retry_after, self.retry_after_ms = 1.0, -1.0  # -1: no retry-after-ms header
        self.hang, self.huge_chars = 30.0, 2_000_000
        self.usage = "real"  # see USAGE
        self.drip_interval, self.drip_bytes = 0.2, 50  # "drip": one byte of padding per interval, then the reply
        self.forget_adapters_at = -1  # when >= 0: once this many requests were answered, forget every adapter
        self.release = threading.Event()  # set on stop: hung requests end at once
        self.reset()

    def configure(self, settings: Mapping[str, Any]) -> None:
        """Apply ``configure()``/``POST /config`` settings (latency, seed, record, fail_at, faults)."""
        with self.lock:
            self.latency = float(settings.get("latency", self.latency))
            self.jitter = float(settings.get("jitter", self.jitter))
            if "seed" in settings:
                self.rng = random.Random(int(settings["seed"]))
                self.fault_rng = random.Random(int(settings["seed"]))
            self.record = bool(settings.get("record", self.record))
            self.fail_at = int(settings.get("fail_at", self.fail_at))
            unknown = [f for f in [*settings.get("faults", []), *settings.get("fault_kinds", [])] if f not in FAULTS]
            if unknown:
                raise ValueError(f"unknown faults {unknown}; kinds are {', '.join(FAULTS)}")
            if "faults" in settings:
                self.faults = deque(settings["faults"])
            if "fault_kinds" in settings:
                self.fault_kinds = list(settings["fault_kinds"])
            for key in FAULT_SETTINGS:
                if key in settings:
                    setattr(self, key, type(getattr(self, key))(settings[key]))

    def next_fault(self) -> str | None:
        """Count a chat request and return the fault to inject into it, if any."""
        with self.lock:
            self.attempts += 1
            self.arrivals.append(time.monotonic())
            fault = self.faults.popleft() if self.faults else None
            if fault is None and self.fault_rate > 0 and self.fault_rng.random() < self.fault_rate:
                fault = self.fault_rng.choice(self.fault_kinds)
            if fault is not None:
                self.injected[fault] += 1
            return fault

    def reset(self) -> None:
        with self.lock:
            self.requests = 0
            self.attempts = 0
            self.admitted = 0  # chat and completion requests let past ``fail_at``, counted as they are let past
            self.arrivals: list[float] = []  # when each chat request arrived (monotonic clock)
            self.injected: Counter[str] = Counter()
            self.slept: list[float] = []
            self.by_tool: Counter[str] = Counter()
            self.by_model: Counter[str] = Counter()
            self.by_auth: Counter[str] = Counter()  # the Authorization header of each chat request ("" if none)
            self.bodies: list[dict[str, Any]] = []
            self.in_flight = 0
            self.max_in_flight = 0

    def draw_latency(self) -> float:
        with self.lock:
            if self.jitter <= 0:
                return self.latency
            return max(0.0, self.rng.gauss(self.latency, self.jitter))

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {"requests": self.requests, "attempts": self.attempts, "injected": dict(self.injected),
                    "slept": list(self.slept), "slept_total": sum(self.slept),
                    "by_tool": dict(self.by_tool), "by_model": dict(self.by_model), "by_auth": dict(self.by_auth),
                    "adapters": dict(self.adapters), "max_in_flight": self.max_in_flight,
                    "latency": self.latency, "jitter": self.jitter}

    def reply(self, body: dict[str, Any], received: float) -> dict[str, Any]:
        """Build the reply, then sleep until ``latency`` has passed since the request arrived.

        The slept figure recorded is the whole time the server held the request (its own JSON
        work included), so "model latency" is what a client would see from a model, and all
        that remains of a graph's wall time is swm's overhead and the loopback transport.
        """
        prompt = _prompt_text(body)
        tool = _tool_of(body)
        name = tool["name"] if tool else "<text>"
        with self.lock:
            self.requests += 1
            self.by_tool[name] += 1
            self.by_model[str(body.get("model", ""))] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.record:
                self.bodies.append(body)
        try:
            payload = self._payload(body, prompt, tool, name)
            remaining = self.draw_latency() - (time.perf_counter() - received)
            if remaining > 0:
                time.sleep(remaining)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.slept.append(time.perf_counter() - received)
        return payload

    def completion(self, body: dict[str, Any], received: float) -> dict[str, Any]:
        """Answer ``POST /v1/completions`` (a raw prompt, ``n`` choices), as llama-server and vLLM do.

        Choice ``i`` is the ``"<completion>"`` script's text (or the default) for seed ``seed + i``, the
        seeds a server gives the choices of one request; ``usage`` counts the prompt once.
        """
        prompt, n, seed = str(body.get("prompt", "")), max(1, int(body.get("n") or 1)), int(body.get("seed") or 0)
        script = self.scripts.get("<completion>")
        with self.lock:
            self.requests += 1
            self.by_tool["<completion>"] += 1
            self.by_model[str(body.get("model", ""))] += 1
            if self.record:
                self.bodies.append(body)
        # a script answers text, or {"text": ..., "logprobs": ...}: a choice with the server's log-probs
        answers = [script(prompt, {**body, "seed": seed + i}) if callable(script) else str(script or self.text)
                   for i in range(n)]
        texts = [str(a["text"]) if isinstance(a, dict) else str(a) for a in answers]
        logprobs = [a.get("logprobs") if isinstance(a, dict) else None for a in answers]
        remaining = self.draw_latency() - (time.perf_counter() - received)
        if remaining > 0:
            time.sleep(remaining)
        with self.lock:
            self.slept.append(time.perf_counter() - received)
        prompt_tokens, completion_tokens = max(1, len(prompt) // 4), sum(max(1, len(t) // 4) for t in texts)
        return {"id": f"cmpl-{uuid.uuid4().hex[:12]}", "object": "text_completion", "created": int(time.time()),
                "model": body.get("model", "fake"),
                "choices": [{"index": i, "text": t, "finish_reason": "stop", "logprobs": logprobs[i]}
                            for i, t in enumerate(texts)],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    def _payload(self, body: dict[str, Any], prompt: str, tool: dict[str, Any] | None, name: str) -> dict[str, Any]:
        script = self.scripts.get(name)
        if tool is None:
            content = script(prompt, body) if callable(script) else (script or self.text)
            message: dict[str, Any] = {"role": "assistant", "content": str(content)}
            finish, out_text = "stop", str(content)
        else:
            args = script(prompt, body) if callable(script) else script
            if args is None:
                args = minimal_instance(tool.get("parameters") or {})
            arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                "function": {"name": name, "arguments": arguments}}]}
            finish, out_text = "tool_calls", arguments
        prompt_tokens = max(1, (len(prompt) + len(json.dumps(body.get("tools") or ""))) // 4)
        completion_tokens = max(1, len(out_text) // 4)
        if self.usage == "negative":
            prompt_tokens, completion_tokens = -1_000_000, -5
        reply = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
                 "created": int(time.time()), "model": body.get("model", "fake"),
                 "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                 "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                           "total_tokens": prompt_tokens + completion_tokens}}
        if self.usage == "missing":
            del reply["usage"]
        return reply


class _Handler(BaseHTTPRequestHandler):
    """The routes; `_handler` binds one server's `_State` as ``state``."""

    state: _State
    protocol_version = "HTTP/1.1"  # keep-alive, as the OpenAI client's connection pool expects
    # Headers and body go out in two writes; with Nagle's algorithm on, the second waits for
    # the client's delayed ACK (40 ms on Linux), which would be counted as swm's overhead.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, code: int, payload: object, headers: Mapping[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _fault(self, fault: str, body: dict[str, Any]) -> None:
        """Answer one chat request with the injected fault."""
        backoff = {"retry-after-ms": f"{self.state.retry_after_ms:g}"} if self.state.retry_after_ms >= 0 else {}
        if fault == "500":
            self._send(500, {"error": {"message": "fake server: injected 500", "type": "server_error"}}, backoff)
        elif fault == "429":
            self._send(429, {"error": {"message": "fake server: injected rate limit", "type": "rate_limit"}},
                       {"retry-after": f"{self.state.retry_after:g}", **backoff})
        elif fault == "invalid_json":
            self._send(200, b'{"id": "chatcmpl-broken", "object": "chat.completion", "choices": [{"ind')
        elif fault == "huge":
            tool = _tool_of(body)
            junk = "x" * self.state.huge_chars
            message: dict[str, Any] = {"role": "assistant", "content": junk}
            if tool is not None:
                message = {"role": "assistant", "content": None, "tool_calls": [{
                    "id": "call_huge", "type": "function",
                    "function": {"name": tool["name"], "arguments": json.dumps({"junk": junk})}}]}
            self._send(200, {"id": "chatcmpl-huge", "object": "chat.completion", "created": int(time.time()),
                             "model": body.get("model", "fake"), "choices": [{
                                 "index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": self.state.huge_chars // 4,
                                       "total_tokens": 1 + self.state.huge_chars // 4}})
        elif fault in ("html", "sse", "double_json", "drip"):
            self._not_a_completion(fault, body)
        elif fault in ("missing_choice", "null_choice"):
            self._send(200, broken_choices(fault, self._answer(body)))
        elif fault in ("bad_arguments", "wrong_tool"):
            self._send(200, unusable_tool_call(fault, self._answer(body)))
        elif fault == "echo_key":  # a 400 quoting the key it was sent, as some gateways word a refusal
            key = str(self.headers.get("Authorization") or "").removeprefix("Bearer ")
            self._send(400, {"error": {"message": f"Request refused for API key {key}: model overloaded, try "
                                                  f"another model", "type": "invalid_request_error"}})
        else:  # hang, then drop; drop: close the connection with no answer
            if fault == "hang":
                self.state.release.wait(self.state.hang)
            self.close_connection = True

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """Return the normal answer to a chat or a text completion request."""
        if self.path.rstrip("/").endswith("/chat/completions"):
            return self.state.reply(body, time.perf_counter())
        return self.state.completion(body, time.perf_counter())

    def _not_a_completion(self, fault: str, body: dict[str, Any]) -> None:
        """HTTP 200 with what a proxy, a misconfigured or a slow server sends instead of a chat completion.

        ``html``: a login or error page; ``sse``: an event stream nobody asked for; ``double_json``:
        a tool call whose arguments are a JSON string holding the JSON text; ``drip``: the real
        reply after ``drip_bytes`` bytes of padding sent one per ``drip_interval`` seconds.
        """
        state = self.state
        if fault == "html":
            page = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body>Proxy login</body></html>"
            self._raw(200, "text/html; charset=utf-8", page)
            return
        reply = state.reply(body, time.perf_counter())
        if fault == "sse":
            chunk = {**reply, "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": reply["choices"][0]["message"], "finish_reason": None}]}
            self._raw(200, "text/event-stream", f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
        elif fault == "double_json":
            for call in reply["choices"][0]["message"].get("tool_calls") or []:
                call["function"]["arguments"] = json.dumps(call["function"]["arguments"])
            self._send(200, reply)
        else:
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(state.drip_bytes + len(data)))
            self.end_headers()
            try:
                for _ in range(state.drip_bytes):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    if state.release.wait(state.drip_interval):
                        break
                self.wfile.write(data)
            except OSError:  # the client gave up on the drip
                self.close_connection = True

    def _raw(self, code: int, content_type: str, data: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.rstrip("/").endswith("/stats"):
            self._send(200, self.state.stats())
        elif self.path.rstrip("/") == "/health":  # llama-server's readiness route: a stand-in for it answers it
            self._send(200, {"status": "ok"})
        elif self.path.rstrip("/") == "/props" and self.state.model:  # and its model, which swm checks is its own
            self._send(200, {"model_path": self.state.model})
        elif self.path.rstrip("/").endswith("/bodies"):
            with self.state.lock:
                self._send(200, list(self.state.bodies))
        elif self.path.rstrip("/").endswith("/models"):
            with self.state.lock:  # loaded adapters are listed as vLLM lists them: name, directory, base
                adapters = [{"id": n, "object": "model", "root": p, "parent": "fake"}
                            for n, p in self.state.adapters.items()]
            self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}, *adapters]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def _completions(self, body: dict[str, Any], received: float) -> None:
        """Answer a chat or text completion request: the fault queued for it, a refusal, or the answer."""
        with self.state.lock:  # the check and the count are one step: requests arriving together pass K at most
            self.state.by_auth[str(self.headers.get("Authorization") or "")] += 1
            failing = 0 <= self.state.fail_at <= self.state.admitted
            if not failing:
                self.state.admitted += 1
        if failing:
            self._send(400, {"error": {"message": "fake server: fail_at reached",
                                       "type": "invalid_request_error"}})
            return
        fault = self.state.next_fault()
        if fault is not None:
            self._fault(fault, body)
            return
        model = str(body.get("model", ""))
        with self.state.lock:  # a restart: the adapters loaded at run time are gone
            if 0 <= self.state.forget_adapters_at <= self.state.requests:
                self.state.adapters.clear()
                self.state.forget_adapters_at = -1
        if self.state.lora and model != "fake" and model not in self.state.adapters:
            self._send(404, {"error": {"message": f"The model `{model}` does not exist.",
                                       "type": "NotFoundError"}})
            return
        chat = self.path.rstrip("/").endswith("/chat/completions")
        if body.get("stream"):
            if not chat:
                self._send(400, {"error": {"message": "the fake server streams chat completions only"}})
                return
            self._stream(self.state.reply(body, received), bool((body.get("stream_options") or {}).get(
                "include_usage")))
            return
        self._send(200, self.state.reply(body, received) if chat else self.state.completion(body, received))

    def _stream(self, reply: dict[str, Any], usage: bool) -> None:
        """Send a chat answer as an event stream (``stream=True``, as agent harnesses ask): the message as one delta,
        then the finish reason (and the usage, when asked for), then ``[DONE]``."""
        choice = reply["choices"][0]
        base = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
        message = {k: v for k, v in choice["message"].items() if v is not None}
        if message.get("tool_calls"):  # a streamed tool call carries its position
            message["tool_calls"] = [{**call, "index": i} for i, call in enumerate(message["tool_calls"])]
        chunks = [{**base, "choices": [{"index": 0, "delta": message, "finish_reason": None}]},
                  {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}]
        if usage:
            chunks.append({**base, "choices": [], "usage": reply["usage"]})
        events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self._raw(200, "text/event-stream", events.encode())

    def do_POST(self) -> None:  # noqa: N802
        received = time.perf_counter()
        try:
            body = self._body()
        except ValueError as exc:
            self._send(400, {"error": {"message": f"bad JSON: {exc}"}})
            return
        path = self.path.rstrip("/")
        if path.endswith("/completions"):  # chat, or a raw prompt's text completion
            self._completions(body, received)
        elif path.endswith("/load_lora_adapter") and self.state.lora:
            name, where = str(body.get("lora_name", "")), str(body.get("lora_path", ""))
            with self.state.lock:
                known = name in self.state.adapters
                if not known and name and where:
                    self.state.adapters[name] = where
            if not name or not where:
                self._send(400, {"error": {"message": "lora_name and lora_path are required"}})
            elif known:
                self._send(400, {"error": {"message": f"The lora adapter '{name}' has already been loaded."}})
            else:
                self._send(200, {"ok": True})
        elif path.endswith("/unload_lora_adapter") and self.state.lora:
            name = str(body.get("lora_name", ""))
            with self.state.lock:
                known = self.state.adapters.pop(name, None) is not None
            if known:
                self._send(200, {"ok": True})
            else:  # as vLLM answers a name it does not hold
                self._send(404, {"error": {"message": f"The lora adapter '{name}' cannot be found."}})
        elif path.endswith("/reset"):
            self.state.reset()
            self._send(200, {"ok": True})
        elif path.endswith("/config"):
            try:
                self.state.configure(body)
            except ValueError as exc:
                self._send(400, {"error": {"message": str(exc)}})
                return
            self._send(200, {"ok": True})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})


def unusable_tool_call(fault: str, reply: dict[str, Any]) -> dict[str, Any]:
    """Spoil an answer's tool calls: arguments that are not JSON (``bad_arguments``), or a tool nobody offered
    (``wrong_tool``). A well-formed chat completion, as a model that misformats sends: no retry, an unusable reply.
    """
    for choice in reply.get("choices") or []:
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            if fault == "bad_arguments":
                call["function"]["arguments"] = '{"answer": "the bas'
            else:
                call["function"]["name"] = "not_a_tool"
    return reply


def broken_choices(fault: str, reply: dict[str, Any]) -> dict[str, Any]:
    """Spoil a good answer as servers were seen to: ``missing_choice`` drops its last choice, ``null_choice``
    nulls the text of its first (a chat message's content and tool calls)."""
    choices = reply["choices"]
    if fault == "missing_choice":
        del choices[-1]
    elif "text" in choices[0]:
        choices[0]["text"] = None
    else:
        choices[0]["message"] = {"role": "assistant", "content": None}
    return reply


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"state": state})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # 32+ concurrent clients connect at once

    def handle_error(self, request: Any, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # a client that timed out on a hung request left
            return
        super().handle_error(request, client_address)
