"""A total deadline per HTTP request to a model endpoint, not a bound on each socket read.

httpx's timeouts bound each phase and each read: a server that drips one byte every 0.2 s never
trips a 2 s read timeout, and an endless drip holds the call forever. `DeadlineTransport` gives
each request ``seconds`` from the moment it is sent: the connect, write and header reads are bounded
by ``seconds`` each (a silent server trips the read timeout as before), and once the headers are
in, every read of the body is bounded by the time left, and a body still arriving when the time is
up is abandoned with the client's own ``ReadTimeout``, so the OpenAI client retries it as any
timeout and swm reports `swm.errors.ModelTimeout`. A call then costs at most about
``(max_retries + 1) × seconds`` plus the backoff between attempts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai

# The HTTP library of the installed OpenAI client: openai 3 runs on httpx2, openai 2 (swm's lock, for verifiers)
# on httpx. A transport or an exception class of the other one is not the client's: its timeouts would not retry.
if int(openai.__version__.split(".")[0]) >= 3:  # pragma: no cover - the lock holds openai 2
    import httpx2 as httpx
else:
    import httpx  # type: ignore[no-redef]


class _DeadlineStream(httpx.SyncByteStream):
    """A response body that raises ``ReadTimeout`` once its request's deadline has passed."""

    def __init__(self, inner: Any, request: httpx.Request, deadline: float, seconds: float) -> None:
        self._inner, self._request, self._deadline, self._seconds = inner, request, deadline, seconds

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            if time.monotonic() > self._deadline:
                self.close()
                raise httpx.ReadTimeout(f"the reply took longer than {self._seconds:g} s in all",
                                        request=self._request)
            yield chunk

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


class DeadlineTransport(httpx.BaseTransport):
    """An HTTP transport whose every request must be answered in full within ``seconds``."""

    def __init__(self, seconds: float, inner: httpx.BaseTransport | None = None) -> None:
        self.seconds = seconds
        # the OpenAI client's own pool limits (its default client's): a transport given to a client replaces them
        self._inner = inner or httpx.HTTPTransport(limits=httpx.Limits(max_connections=1000,
                                                                      max_keepalive_connections=100))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self.seconds
        response = self._inner.handle_request(request)
        left = deadline - time.monotonic()
        if left <= 0:
            response.close()
            raise httpx.ReadTimeout(f"no reply within {self.seconds:g} s", request=request)
        # the body's reads start after this returns and read their timeout then: give them what is left
        request.extensions["timeout"] = {**request.extensions.get("timeout", {}), "read": left}
        return httpx.Response(response.status_code, headers=response.headers, request=request,
                              stream=_DeadlineStream(response.stream, request, deadline, self.seconds),
                              extensions=response.extensions)

    def close(self) -> None:
        self._inner.close()


def deadline_client(seconds: float) -> httpx.Client:
    """Return an HTTP client for the OpenAI client whose requests each have a total deadline of ``seconds``."""
    return httpx.Client(transport=DeadlineTransport(seconds), timeout=seconds, follow_redirects=True)
