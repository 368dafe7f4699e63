"""A loopback proxy in front of an OpenAI-compatible server that records what each completion cost the engine.

Every request is forwarded unchanged; for each completion answered, the proxy keeps when it
started and ended, the ``usage`` the server reported (prompt tokens sent, completion tokens) and,
where the server says so, the prompt tokens it evaluated and the ones it served from its cache
(llama.cpp's C++ server: ``timings.prompt_n`` and ``timings.cache_n``). For llama-cpp-python's
own server, which reports no timings, `python_server_evaluated` reads them from its log (its
``llama_perf_context_print`` line after each completion). It also keeps the text each request
sent (the tools and messages of a chat completion, or the prompt), so a workload can say how much
of it an earlier request had already sent (`shared_prefixes`).
`wrap_embedded` puts one proxy in front of every embedded server this process starts, so the
graphs under measurement run exactly as they do without it.
"""

from __future__ import annotations

import bisect
import dataclasses
import http.client
import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from swm.serving import embedded

_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Call:
    """One completion answered by the engine."""

    start: float
    end: float
    prompt_tokens: int
    completion_tokens: int
    evaluated: int | None = None  # prompt tokens the engine evaluated (None: not reported)
    cached: int | None = None
    text: str = ""  # what the request sent: its tools and messages, or its prompt
    tokens: list[int] | None = None  # the prompt as the engine's tokens (llama-server: rendered and tokenized by it)


class Meter:
    """The proxy of one upstream server; ``calls`` grows as completions are answered."""

    def __init__(self, upstream: str, log_path: Path | None = None, tokenize: bool = False) -> None:
        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.log_path = log_path
        self.tokenize = tokenize  # ask the upstream (llama-server) for each prompt's tokens after it answered
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        self.pending = 0  # tokenizations under way
        meter = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: the measured run prints its own progress
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                meter._forward(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                meter._forward(self, "POST")

            def do_DELETE(self) -> None:  # noqa: N802
                meter._forward(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def proxied(self, base_url: str) -> str:
        """Return ``base_url`` (of the upstream) with the proxy's address instead."""
        parts = urlsplit(base_url)
        return self.url + parts.path

    def _forward(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP}
        start = time.time()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=3600)
        try:
            conn.request(method, handler.path, body=body, headers=headers)
            reply = conn.getresponse()
            data = reply.read()
            status, reply_headers = reply.status, reply.getheaders()
        except OSError as err:
            data, status, reply_headers = str(err).encode(), 502, [("Content-Type", "text/plain")]
        finally:
            conn.close()
        end = time.time()
        calls = self._record(data, start, end, sent_text(body)) \
            if status == 200 and handler.path.rstrip("/").endswith("completions") else []
        if calls and self.tokenize:
            with self.lock:
                self.pending += 1
        handler.send_response(status)
        for key, value in reply_headers:
            if key.lower() not in _HOP:
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
        if calls and self.tokenize:  # after the reply: the caller does not wait for it
            try:
                tokens = self._prompt_tokens(handler.path, body or b"{}")
                for call in calls:
                    call.tokens = tokens
                for call, text in zip(calls[1:], _choice_texts(data)[1:], strict=False):
                    call.completion_tokens = len(self._tokens(text) or [])  # the usage counted the first only
            finally:
                with self.lock:
                    self.pending -= 1

    def _post(self, path: str, payload: bytes) -> Any:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request("POST", path, body=payload, headers={"Content-Type": "application/json"})
            reply = conn.getresponse()
            return json.loads(reply.read()) if reply.status == 200 else None
        finally:
            conn.close()

    def _prompt_tokens(self, path: str, body: bytes) -> list[int] | None:
        """The request's prompt as the upstream renders (its chat template, tools included) and tokenizes it."""
        try:
            request = json.loads(body)
            if path.rstrip("/").endswith("chat/completions"):
                rendered = self._post("/apply-template", body)
                prompt = (rendered or {}).get("prompt")
            else:
                prompt = request.get("prompt")
            return self._tokens(prompt, special=True) if isinstance(prompt, str) else None
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    def _tokens(self, text: str, special: bool = False) -> list[int] | None:
        """``text`` as the upstream (llama-server) tokenizes it."""
        try:
            done = self._post("/tokenize", json.dumps({"content": text, "parse_special": special}).encode())
        except (OSError, ValueError):
            return None
        tokens = (done or {}).get("tokens")
        return [int(t) for t in tokens] if isinstance(tokens, list) else None

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until every tokenization asked for has come back."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.01)

    def _record(self, data: bytes, start: float, end: float, text: str) -> list[Call]:
        """Keep the completion's cost: one call per choice (a request for ``n`` choices is ``n`` samples).

        llama.cpp's server evaluates the prompt of a request with ``n`` choices once and copies it into
        ``n - 1`` more slots, and reports the first choice's ``usage`` and ``timings`` only: each further
        choice is counted as a call that sent the same prompt and evaluated none of it (all of it
        cached), its completion tokens counted from its text once the upstream has tokenized it.
        """
        try:
            reply = json.loads(data)
        except ValueError:
            return []
        if not isinstance(reply, dict):
            return []
        usage = reply.get("usage") or {}
        timings = reply.get("timings") or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        calls = [Call(start, end, prompt, int(usage.get("completion_tokens") or 0),
                      int(timings["prompt_n"]) if "prompt_n" in timings else None,
                      int(timings["cache_n"]) if "cache_n" in timings else None, text)]
        calls += [Call(start, end, prompt, 0, 0 if "prompt_n" in timings else None,
                       prompt if "cache_n" in timings else None, text)
                  for _ in range(len(reply.get("choices") or []) - 1)]
        with self.lock:
            self.calls.extend(calls)
        return calls


def _choice_texts(data: bytes) -> list[str]:
    """The texts of a completion's choices, in their order (``index``)."""
    try:
        choices = sorted(json.loads(data).get("choices") or [], key=lambda c: int(c.get("index") or 0))
    except (ValueError, AttributeError, TypeError):
        return []
    return [str(c.get("text") or (c.get("message") or {}).get("content") or "") for c in choices]


def sent_text(body: bytes | None) -> str:
    """Return what a completion request sent: its tools, then its messages (or its prompt)."""
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        return ""
    if not isinstance(request, dict):
        return ""
    if "messages" in request:
        parts = [json.dumps(request.get("tools") or [], sort_keys=True)]
        for m in request.get("messages") or []:
            content = m.get("content") if isinstance(m, dict) else None
            parts.append(f"{m.get('role', '') if isinstance(m, dict) else ''}\n"
                         f"{content if isinstance(content, str) else json.dumps(content)}")
        return "\n".join(parts)
    prompt = request.get("prompt")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


def _common(a: Any, b: Any) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (a binary search over C-speed slice compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def by_tokens(calls: list[Call]) -> bool:
    """Tell whether every call's prompt tokens are known (else prompts are compared by the text sent)."""
    return bool(calls) and all(c.tokens is not None for c in calls)


def sent_size(call: Call, tokens: bool) -> int:
    return len(call.tokens or []) if tokens else len(call.text)


def shared_prefixes(calls: list[Call]) -> list[int]:
    """For each call, the longest leading part of its prompt that a call sent before it had sent.

    What a prefix cache without a size limit could at most have served of each prompt, given how swm
    lays its prompts out: the bound on prompt reuse that no serving choice can beat (a server that
    queues requests may evaluate an earlier one's prompt before a later one's, so only the order they
    were sent in is assumed). In tokens as the engine renders and tokenizes the prompts where every
    call's are known (llama-server), else in characters of the text sent (tools, then messages: the
    order a template renders them in may differ).
    """

    tokens = by_tokens(calls)
    sent = [c.tokens if tokens else c.text for c in calls]
    seen: list[Any] = []  # prompts sent so far, sorted: the longest match is a neighbour
    shared = [0] * len(calls)
    for i in sorted(range(len(calls)), key=lambda i: calls[i].start):
        at = bisect.bisect_left(seen, sent[i])
        shared[i] = max([_common(sent[i], seen[j]) for j in (at - 1, at) if 0 <= j < len(seen)] or [0])
        bisect.insort(seen, sent[i])
    return shared


_PROMPT_EVAL = re.compile(rb"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")


def python_server_evaluated(log_path: Path, offset: int) -> tuple[int, int]:
    """Read llama-cpp-python's server log from ``offset``: (prompt tokens evaluated, completions logged)."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read()
    except OSError:
        return 0, 0
    counts = [int(m.group(1)) for m in _PROMPT_EVAL.finditer(text)]
    return sum(counts), len(counts)


class Meters:
    """Every proxy this process put in front of an embedded server, and their calls in one list."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_upstream: dict[str, Meter] = {}

    def for_server(self, base_url: str, log_path: Path | None, tokenize: bool = False) -> Meter:
        parts = urlsplit(base_url)
        key = f"{parts.scheme}://{parts.netloc}"
        with self.lock:
            if key not in self.by_upstream:
                self.by_upstream[key] = Meter(key, log_path, tokenize=tokenize)
            return self.by_upstream[key]

    def forget(self) -> None:
        """Drop every call recorded so far (a new measurement in the same process)."""
        with self.lock:
            meters = list(self.by_upstream.values())
        for meter in meters:
            meter.settle()
            with meter.lock:
                meter.calls.clear()

    def calls(self) -> list[Call]:
        with self.lock:
            meters = list(self.by_upstream.values())
        for meter in meters:
            meter.settle()
        return [c for m in meters for c in list(m.calls)]

    def log_offsets(self) -> dict[str, int]:
        """Where each server's log ends now (to read what a workload added to it)."""
        out = {}
        for key, meter in list(self.by_upstream.items()):
            if meter.log_path is not None and meter.log_path.is_file():
                out[key] = meter.log_path.stat().st_size
        return out

    def evaluated_since(self, offsets: dict[str, int]) -> tuple[int, int]:
        """Prompt tokens the Python servers evaluated since ``offsets`` (a server started since: from its start),
        and the completions they logged."""
        evaluated = logged = 0
        for key, meter in list(self.by_upstream.items()):
            if meter.log_path is not None:
                e, n = python_server_evaluated(meter.log_path, offsets.get(key, 0))
                evaluated, logged = evaluated + e, logged + n
        return evaluated, logged


METERS = Meters()


def wrap_embedded() -> None:
    """Route every embedded server this process starts through a metering proxy (idempotent)."""

    if getattr(embedded.ensure_server, "_metered", False):
        return
    real = embedded.ensure_server

    def ensure_server(*args: Any, **kwargs: Any) -> Any:
        server = real(*args, **kwargs)
        meter = METERS.for_server(server.base_url, getattr(server, "log_path", None),
                                  tokenize=getattr(server, "engine", None) == embedded.ENGINE)  # llama-server
        return dataclasses.replace(server, base_url=meter.proxied(server.base_url))

    ensure_server._metered = True  # type: ignore[attr-defined]
    embedded.ensure_server = ensure_server  # type: ignore[assignment]
