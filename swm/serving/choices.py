"""Samples of one prompt asked for together go out as one request with ``n`` choices: one prompt evaluation.

Two requests for the same prompt sent side by side are each evaluated in full: a slot's prompt
cache serves only the requests that come after it, and llama.cpp's server does not share a prefix
between slots that evaluate at the same time. Asked for ``n`` choices in one request, it (like vLLM
and SGLang) evaluates the prompt once in one slot, copies that slot's KV cache into ``n - 1`` more,
and samples each with its own seed: the request's, then seed + 1, seed + 2, ... So the samples of a
decision (``samples_per_task`` of them, seeds that follow each other: `swm.lifelong.decision_play`)
cost one prompt evaluation instead of one each.

`Gather` joins the calls of this process that ask for the same prompt with the same settings: the
first to arrive (the *leader*) waits until as many as expected have joined, or `WAIT` seconds; the
members are then cut into runs of seeds that follow each other (at most ``limit`` a run, the
server's slots) and each run's lowest seed sends one request for the run. A choice's seed is the one
its own request would have carried, so what a call gets does not depend on whether it was joined
(up to the floating-point order of a batch, which concurrent slots have anyway). Calls in other
processes (workers) are not joined: they send their own requests, as before.
``SWM_EMBEDDED_SHARED_SAMPLES=0`` turns joining off (`enabled`): every sample its own request.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

WAIT = 0.5  # seconds the leader waits for the expected samples of its prompt to join


def enabled() -> bool:
    """Tell whether samples of one prompt may share a request (``SWM_EMBEDDED_SHARED_SAMPLES``, default on)."""
    return os.environ.get("SWM_EMBEDDED_SHARED_SAMPLES", "1").strip().lower() not in ("0", "false", "no", "off")


@dataclass(eq=False)
class _Member(Generic[T]):
    seed: int
    woken: threading.Event = field(default_factory=threading.Event)
    run: list[_Member[T]] | None = None  # set when this member is to send the request of its run
    result: tuple[T, int, int] | None = None  # (its choice, its place in the request, choices in the request)
    error: BaseException | None = None


@dataclass(eq=False)
class _Group(Generic[T]):
    expected: int
    members: list[_Member[T]]
    full: threading.Event = field(default_factory=threading.Event)


def runs(seeds: Sequence[int], limit: int) -> list[list[int]]:
    """Cut ``seeds`` into runs that follow each other (s, s + 1, ...), sorted, at most ``limit`` a run."""
    out: list[list[int]] = []
    for seed in sorted(seeds):
        if out and seed == out[-1][-1] + 1 and len(out[-1]) < limit:
            out[-1].append(seed)
        else:
            out.append([seed])
    return out


class Gather(Generic[T]):
    """Joins concurrent calls for one prompt into requests with ``n`` choices (see the module's docstring)."""

    def __init__(self, wait: float = WAIT) -> None:
        self.wait = wait
        self._open: dict[Hashable, _Group[T]] = {}
        self._lock = threading.Lock()

    def call(self, key: Hashable, seed: int, expected: int, limit: int,
             send: Callable[[int, int], Sequence[T | BaseException]]) -> tuple[T, int, int]:
        """Return this call's choice, its place in the request that carried it, and that request's choices.

        ``send(seed, n)`` sends one request for ``n`` choices drawn from ``seed`` on and returns
        them in order, an exception in the place of a choice that failed (raised to its call only; a
        failed request fails every call of it); ``expected`` is how many calls of this key to wait for
        (1: send at once), ``limit`` the most choices one request may ask for.
        """
        if expected <= 1 or limit <= 1:
            alone = send(seed, 1)[0]
            if isinstance(alone, BaseException):
                raise alone
            return alone, 0, 1
        me: _Member[T] = _Member(seed)
        with self._lock:
            group = self._open.get(key)
            leader = group is None or len(group.members) >= min(group.expected, limit)
            if leader:
                group = _Group(expected=min(expected, limit), members=[me])
                self._open[key] = group
            else:
                assert group is not None
                group.members.append(me)
                if len(group.members) >= group.expected:
                    group.full.set()
        assert group is not None
        if leader:
            group.full.wait(self.wait)
            with self._lock:
                if self._open.get(key) is group:
                    del self._open[key]
                members = list(group.members)
            by_seed: dict[int, list[_Member[T]]] = {}
            for member in members:
                by_seed.setdefault(member.seed, []).append(member)
            mine = None
            for run_seeds in runs(list(by_seed), limit):
                run = [by_seed[s].pop(0) for s in run_seeds]
                if me in run:
                    mine = run
                else:
                    run[0].run = run
                    run[0].woken.set()
            for left in (m for ms in by_seed.values() for m in ms):  # a seed asked for twice: sent alone
                left.run = [left]
                left.woken.set()
            assert mine is not None
            self._send(mine, send)
        else:
            me.woken.wait()
            if me.run is not None:
                self._send(me.run, send)
        if me.error is not None:
            raise me.error
        assert me.result is not None
        return me.result

    @staticmethod
    def _send(run: list[_Member[T]], send: Callable[[int, int], Sequence[T | BaseException]]) -> None:
        try:
            choices = send(run[0].seed, len(run))
            if len(choices) != len(run):
                raise ValueError(f"asked for {len(run)} choices, the server answered {len(choices)}")
            for place, (member, choice) in enumerate(zip(run, choices, strict=True)):
                if isinstance(choice, BaseException):
                    member.error = choice
                else:
                    member.result = (choice, place, len(run))
        except BaseException as exc:  # noqa: BLE001 - every member of the run gets the request's failure
            for member in run:
                member.error = exc
        finally:
            for member in run:
                member.woken.set()
