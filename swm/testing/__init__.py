"""Offline test doubles for code built on swm: a scripted chat model and a fake OpenAI-compatible server.

`ScriptedChatModel` replays scripted replies and supports ``with_structured_output`` (a
structured reply is a tool call named after the pydantic class; `as_structured` scripts one);
inject it through ``SWMContext(llm=...)``. `FakeOpenAIServer` is a loopback HTTP endpoint that
answers any schema with a valid instance, counts calls and injects faults (HTTP 500/429, hangs,
dropped connections, broken JSON); point a context at it with ``SWMContext(model=server.model_spec)``,
or run it alone with ``python -m swm.testing.server``. `scaled` stretches a test's wall-clock bound on a busy
machine (`swm.testing.slowdown`). See docs/testing.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swm.testing.slowdown import scaled, slowdown

if TYPE_CHECKING:
    from swm.testing.scripted import ScriptedChatModel, as_structured
    from swm.testing.server import FAULTS, FakeOpenAIServer

__all__ = ["FAULTS", "FakeOpenAIServer", "ScriptedChatModel", "as_structured", "scaled", "slowdown"]


def __getattr__(name: str) -> Any:
    # Imported on first use, so ``python -m swm.testing.server`` does not find it imported already, and a fake
    # server's process does not load the scripted model's langchain_core chat classes (~0.5 s of CPU a process).
    if name in ("FakeOpenAIServer", "FAULTS"):
        from swm.testing import server  # noqa: PLC0415 - see the comment above

        return getattr(server, name)
    if name in ("ScriptedChatModel", "as_structured"):
        from swm.testing import scripted  # noqa: PLC0415 - see the comment above

        return getattr(scripted, name)
    raise AttributeError(f"module 'swm.testing' has no attribute {name!r}")
