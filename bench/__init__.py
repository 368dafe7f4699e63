"""swm's performance suite: graph overhead, calls against the floor, concurrency, resume, store, embedded.

Run it with ``python -m bench`` (or ``swm bench perf`` from a source checkout). It lives beside
the package, not in it: the wheel ships no benchmark code. `swm.testing.server.FakeOpenAIServer`
is also the loopback OpenAI-compatible endpoint for integration tests.
"""

from swm.testing import FakeOpenAIServer

__all__ = ["FakeOpenAIServer"]
