"""What every advantage estimator's row declares, checked against what it does (one suite for every row of
`ESTIMATORS`, including rows registered later): a token advantage per generated token, and running state kept in
``baselines`` only by a row that says ``stateful`` — the self-play loop loads and saves that state by the flag,
so an undeclared one would silently start from nothing each iteration."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from swm.training import advantages as adv
from swm.training.advantages import ESTIMATORS, AdvantageConfig, Estimator, assign_advantages
from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn


def batch() -> list[Rollout]:
    """Two tasks × two rollouts of a two-seat exchange, rewards varied, value estimates filled."""
    out = []
    for task in ("t1", "t2"):
        for g, reward in enumerate((1.0, 0.0)):
            seats = [SeatTrajectory(seat=name, role=role, turns=[
                SeatTurn(turn=k, prompt="", text="x", prompt_ids=[0], token_ids=[1] * (k + 2),
                         logprobs=[-1.0] * (k + 2), values=[0.1] * (k + 2), reward=reward + 0.5 * k)])
                for k, (name, role) in enumerate([("A", "opener"), ("B", "finder")])]
            out.append(Rollout(rollout_id=f"{task}/g{g}", task_id=task, family="f", iteration=0, sample=g,
                               seats=seats))
    return out


@pytest.mark.parametrize("name", ESTIMATORS.names())
def test_every_estimator_gives_one_advantage_per_token_and_keeps_state_only_as_declared(name: str) -> None:
    row = adv.estimator(name)
    rollouts = batch()
    baselines: dict[str, float] = {}
    assign_advantages(rollouts, AdvantageConfig(estimator=name), baselines)
    for r in rollouts:
        for seat in r.seats:
            for t in seat.turns:
                assert t.advantages == [] or len(t.advantages) == len(t.token_ids), (name, t.advantages)
    assert bool(baselines) == row.stateful, (
        f"estimator {name!r} {'keeps' if baselines else 'keeps no'} running state in baselines but its row says "
        f"stateful={row.stateful}: self-play loads and saves baselines by that flag")


@contextmanager
def registered(row: Estimator) -> Iterator[Estimator]:
    adv.register_estimator(row)
    try:
        yield row
    finally:
        ESTIMATORS.pop(row.name, None)


def test_a_new_estimator_that_keeps_state_without_saying_so_fails_the_suite() -> None:
    """The suite's own check on a row registered later: a running mean that does not declare ``stateful``."""

    def running(rollouts: list[Rollout], cfg: AdvantageConfig, baselines: dict[str, float]) -> None:
        for r in rollouts:
            for seat in r.seats:
                b = baselines.get(seat.role, 0.0)
                for t in seat.turns:
                    t.advantages, t.returns = [t.reward - b] * len(t.token_ids), [t.reward] * len(t.token_ids)
                baselines[seat.role] = 0.9 * b + 0.1 * seat.turns[-1].reward

    with registered(Estimator("running-test", "a running mean per role", running, centre=False)):
        with pytest.raises(AssertionError, match="stateful=False"):
            test_every_estimator_gives_one_advantage_per_token_and_keeps_state_only_as_declared("running-test")
    with registered(Estimator("running-test", "a running mean per role", running, centre=False, stateful=True)):
        test_every_estimator_gives_one_advantage_per_token_and_keeps_state_only_as_declared("running-test")
