"""bench.mutation's verdicts: a mutant whose tests time out on a busy machine is run again, alone, before it
counts, so a survivor cannot hide behind a timeout (issue "The house", item 2)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bench.mutation import mutant_budget, run_settled


def scripted(first: list[str], again: list[str], calls: list[tuple[int, int, float]]) -> Callable[..., list[str]]:
    """A stand-in for run_all: the first call answers ``first``, the second ``again``; records (n, jobs, timeout)."""
    answers = [first, again]

    def run(work: Sequence[object], jobs: int, timeout: float,
            on_verdict: Callable[[int, str], None] = lambda i, v: None) -> list[str]:
        calls.append((len(work), jobs, timeout))
        out = answers[len(calls) - 1]
        assert len(out) == len(work)
        for i, verdict in enumerate(out):
            on_verdict(i, verdict)
        return list(out)
    return run


def test_a_timeout_is_run_again_alone_with_twice_the_time_and_a_survivor_shows() -> None:
    calls: list[tuple[int, int, float]] = []
    seen: dict[int, str] = {}
    work = [(None, ("t",))] * 4
    verdicts = run_settled(work, 2, 100.0, lambda i, v: seen.__setitem__(i, v),
                           run=scripted(["killed", "timeout", "survived", "timeout"], ["survived", "timeout"], calls))
    assert verdicts == ["killed", "survived", "survived", "timeout"]
    assert calls == [(4, 2, 100.0), (2, 1, 200.0)]
    assert seen == {0: "killed", 1: "survived", 2: "survived", 3: "timeout"}  # each said once, with its last verdict


def test_no_timeout_runs_once() -> None:
    calls: list[tuple[int, int, float]] = []
    assert run_settled([(None, ("t",))] * 2, 2, 50.0, run=scripted(["killed", "survived"], [], calls)) == [
        "killed", "survived"]
    assert calls == [(2, 2, 50.0)]


def test_the_budget_follows_a_slow_unmutated_run() -> None:
    assert mutant_budget(120.0, 10.0) == 120.0
    assert mutant_budget(120.0, 60.0) == 300.0
