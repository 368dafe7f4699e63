"""`swm.serving.choices.Gather`: samples of one prompt asked for at once go out as one request with n choices."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from swm.serving.choices import Gather, runs


class Server:
    """A stand-in for a server that answers ``n`` choices from ``seed`` on (choice i drawn with seed + i)."""

    def __init__(self, fail: bool = False) -> None:
        self.requests: list[tuple[int, int]] = []
        self.lock = threading.Lock()
        self.fail = fail

    def send(self, seed: int, n: int) -> list[str]:
        with self.lock:
            self.requests.append((seed, n))
        if self.fail:
            raise RuntimeError("HTTP 500")
        return [f"drawn with {seed + i}" for i in range(n)]


def _together(gather: Gather[str], server: Server, seeds: list[int], expected: int, limit: int = 8,
              key: Any = "prompt") -> list[Any]:
    def one(seed: int) -> Any:
        try:
            return gather.call(key, seed, expected, limit, server.send)
        except RuntimeError as exc:
            return exc

    with ThreadPoolExecutor(len(seeds)) as pool:
        return list(pool.map(one, seeds))


def test_samples_asked_for_at_once_share_one_request_and_each_gets_the_choice_of_its_own_seed() -> None:
    server = Server()
    out = _together(Gather(wait=30.0), server, [12, 10, 11], expected=3)
    assert server.requests == [(10, 3)]  # one request: the lowest seed, three choices
    assert [text for text, _, _ in out] == ["drawn with 12", "drawn with 10", "drawn with 11"]
    assert sorted(place for _, place, _ in out) == [0, 1, 2] and {n for _, _, n in out} == {3}


def test_a_lone_sample_is_sent_at_once_when_it_expects_no_siblings() -> None:
    server = Server()
    assert Gather(wait=30.0).call("prompt", 5, 1, 8, server.send) == ("drawn with 5", 0, 1)
    assert server.requests == [(5, 1)]


def test_a_sample_whose_siblings_never_come_is_sent_alone_after_the_wait() -> None:
    server = Server()
    assert Gather(wait=0.05).call("prompt", 5, 2, 8, server.send) == ("drawn with 5", 0, 1)
    assert server.requests == [(5, 1)]


def test_seeds_that_do_not_follow_each_other_go_out_as_separate_requests() -> None:
    server = Server()
    out = _together(Gather(wait=30.0), server, [1, 2, 7], expected=3)
    assert sorted(server.requests) == [(1, 2), (7, 1)]
    assert [text for text, _, _ in out] == ["drawn with 1", "drawn with 2", "drawn with 7"]


def test_a_request_asks_for_no_more_choices_than_the_server_has_slots() -> None:
    server = Server()
    out = _together(Gather(wait=0.2), server, [1, 2, 3, 4, 5], expected=5, limit=2)
    assert max(n for _, n in server.requests) == 2 and sum(n for _, n in server.requests) == 5
    assert [text for text, _, _ in out] == [f"drawn with {s}" for s in (1, 2, 3, 4, 5)]


def test_different_prompts_are_never_joined() -> None:
    server, gather = Server(), Gather[str](wait=0.05)
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda k: gather.call(k, 1, 2, 8, server.send), ["a", "b"]))
    assert got == [("drawn with 1", 0, 1)] * 2 and server.requests == [(1, 1), (1, 1)]


def test_a_failed_request_fails_every_sample_it_carried() -> None:
    server = Server(fail=True)
    out = _together(Gather(wait=30.0), server, [3, 4], expected=2)
    assert server.requests == [(3, 2)]
    assert all(isinstance(o, RuntimeError) for o in out)


@pytest.mark.parametrize(("seeds", "limit", "expected"), [
    ([4, 2, 3], 8, [[2, 3, 4]]),
    ([1, 3, 5], 8, [[1], [3], [5]]),
    ([1, 2, 3, 4, 5], 2, [[1, 2], [3, 4], [5]]),
    ([2, 2, 3], 8, [[2], [2, 3]]),
])
def test_runs_cut_sorted_seeds_where_they_stop_following_each_other(seeds: list[int], limit: int,
                                                                    expected: list[list[int]]) -> None:
    assert runs(seeds, limit) == expected
