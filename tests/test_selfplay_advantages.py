"""The advantage estimators against values computed by hand (3 turns, 2 roles: buyer, seller, buyer)."""

from __future__ import annotations

import pytest

from swm.training.advantages import (
    AdvantageConfig,
    TurnInput,
    assign_advantages,
    broadcast,
    discounted_return,
    gae,
    group_normalised,
    hierarchical,
    normalise_per_role,
)

# Episode: turn 0 buyer, turn 1 seller, turn 2 buyer. Each seat's trajectory is its own turns.
BUYER = [TurnInput(reward=0.0, token_values=[0.1, 0.5]), TurnInput(reward=1.0, token_values=[0.2, 0.4])]
SELLER = [TurnInput(reward=-1.0, token_values=[0.3, -0.2, 0.0])]


def close(a: list[float], b: list[float]) -> bool:
    return a == pytest.approx(b, abs=1e-9)


def test_gamma_lambda_one_is_monte_carlo() -> None:
    out = hierarchical(BUYER, AdvantageConfig(gamma=1, lam=1, gamma_tok=1, lam_tok=1))
    # δ1 = 1 + 0 − 0.4 = 0.6; δ0 = 0 + 0.4 − 0.5 = −0.1; A0 = −0.1 + 0.6
    assert close(out.turn_advantages, [0.5, 0.6])
    assert close(out.turn_returns, [1.0, 1.0])
    # turn 0 tokens: rewards [0, R0=1], values [0.1, 0.5]: δ = [0.4, 0.5]
    assert close(out.token_advantages[0], [0.9, 0.5])
    assert close(out.token_advantages[1], [0.8, 0.6])
    assert close(out.token_returns[0], [1.0, 1.0])
    # the last token's advantage is the turn's advantage
    assert [t[-1] for t in out.token_advantages] == pytest.approx(out.turn_advantages)

    seller = hierarchical(SELLER, AdvantageConfig(gamma=1, lam=1, gamma_tok=1, lam_tok=1))
    assert close(seller.turn_advantages, [-1.0])
    assert close(seller.token_advantages[0], [-1.3, -0.8, -1.0])


def test_gamma_lambda_below_one() -> None:
    cfg = AdvantageConfig(gamma=0.9, lam=0.5, gamma_tok=0.9, lam_tok=0.5)
    out = hierarchical(BUYER, cfg)
    # δ1 = 0.6; δ0 = 0.9·0.4 − 0.5 = −0.14; A0 = −0.14 + 0.45·0.6 = 0.13
    assert close(out.turn_advantages, [0.13, 0.6])
    assert close(out.turn_returns, [0.63, 1.0])
    # turn 0 tokens: signal R0 = 0.63: δ_1 = 0.13, δ_0 = 0.9·0.5 − 0.1 = 0.35; a_0 = 0.35 + 0.45·0.13
    assert close(out.token_advantages[0], [0.4085, 0.13])


def test_literal_advantage_signal() -> None:
    cfg = AdvantageConfig(gamma=0.9, lam=0.5, gamma_tok=0.9, lam_tok=0.5, turn_signal="advantage")
    out = hierarchical(BUYER, cfg)
    # signal A0 = 0.13: δ_1 = 0.13 − 0.5 = −0.37; a_0 = 0.35 + 0.45·(−0.37)
    assert close(out.token_advantages[0], [0.1835, -0.37])


def test_critic_free_group_returns_per_role() -> None:
    cfg = AdvantageConfig(estimator="group")
    returns = [1.0, 0.0, 0.5, -1.0, 0.0, 0.0]  # three rollouts of one task: buyers, then sellers
    keys = [("task", "buyer")] * 3 + [("task", "seller")] * 3
    out = group_normalised(returns, keys, cfg)
    # buyer: mean 0.5, std √(0.5/3); seller: mean −1/3, std √(2/9)
    assert out == pytest.approx([1.2247448, -1.2247448, 0.0, -1.4142136, 0.7071068, 0.7071068], abs=1e-5)
    assert group_normalised(returns, keys, AdvantageConfig(group_scale="none")) == pytest.approx(
        [0.5, -0.5, 0.0, -2 / 3, 1 / 3, 1 / 3])
    assert group_normalised([2.0, 2.0], ["k", "k"], cfg) == [0.0, 0.0]
    assert discounted_return([0.0, 1.0], 0.9) == pytest.approx(0.9)
    assert broadcast(0.5, [2, 1]) == [[0.5, 0.5], [0.5]]


def test_per_role_normalisation_is_separate() -> None:
    out = normalise_per_role([[1.0, 3.0], [5.0], [10.0, 10.0]], ["buyer", "buyer", "seller"])
    # buyer tokens 1, 3, 5: mean 3, std √(8/3); seller all 10: centred only
    s = (8 / 3) ** 0.5
    assert out[0] == pytest.approx([-2 / s, 0.0], abs=1e-5) and out[1] == pytest.approx([2 / s], abs=1e-5)
    assert out[2] == [0.0, 0.0]


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="rewards but"):
        gae([1.0], [0.0, 1.0], 1, 1)
    with pytest.raises(ValueError, match="no generated tokens"):
        hierarchical([TurnInput(reward=1.0, token_values=[])], AdvantageConfig())


def test_rejection_sampling_keeps_the_passing_seats_turns_only() -> None:
    """estimator rs: every token of a seat with a positive return gets 1, any other seat's turns none, so the
    update trains on the passing rollouts' turns alone (and on both seats of a passed joint task)."""
    from swm.training.ppo import training_samples
    from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

    def rollout(rid: str, reward: float) -> Rollout:
        seats = [SeatTrajectory(seat=name, role=role, turns=[
            SeatTurn(turn=k, prompt="", text="x", prompt_ids=[0], token_ids=[1] * (k + 2), logprobs=[-1.0] * (k + 2),
                     reward=reward)]) for k, (name, role) in enumerate([("A", "speaker"), ("B", "finder")])]
        return Rollout(rollout_id=rid, task_id="t", iteration=0, sample=0, seats=seats)

    passed, failed, penalised = rollout("p", 1.0), rollout("f", 0.0), rollout("n", -0.5)
    raw = assign_advantages([passed, failed, penalised], AdvantageConfig(estimator="rs"))
    assert [t.advantages for s in passed.seats for t in s.turns] == [[1.0, 1.0], [1.0, 1.0, 1.0]]
    assert all(t.advantages == [] for r in (failed, penalised) for s in r.seats for t in s.turns)
    assert raw == [1.0] * 5
    samples = training_samples([passed, failed, penalised])
    assert sorted(s.role for s in samples) == ["finder", "speaker"] and all(s.advantages for s in samples)


def test_group_turn_credits_each_turn_with_its_return_to_go_among_the_groups_same_turns() -> None:
    """estimator group-turn: turn k's advantage is its return-to-go normalised over the group's seats of its role at
    turn k; with only the final reward it equals the group estimator's."""
    from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

    def rollout(rid: str, rewards: list[float], task: str = "t") -> Rollout:
        turns = [SeatTurn(turn=2 * k, prompt="", text="x", prompt_ids=[0], token_ids=[1] * (k + 1),
                          logprobs=[-1.0] * (k + 1), reward=r) for k, r in enumerate(rewards)]
        return Rollout(rollout_id=rid, task_id=task, iteration=0, sample=0,
                       seats=[SeatTrajectory(seat="A", role="opener", turns=turns)])

    def advantages(rollouts: list[Rollout], estimator: str) -> list[list[list[float]]]:
        assign_advantages(rollouts, AdvantageConfig(estimator=estimator, whiten="off"))
        return [[t.advantages for t in r.seats[0].turns] for r in rollouts]

    # two rollouts: a first turn that earned 2.0 then failed, and one that earned nothing then passed
    out = advantages([rollout("a", [2.0, 0.0]), rollout("b", [0.0, 1.0])], "group-turn")
    # turn 0: returns-to-go 2 and 1 (mean 1.5, std 0.5); turn 1: 0 and 1 (mean 0.5, std 0.5)
    assert out == [[[pytest.approx(1.0, abs=1e-5)], [pytest.approx(-1.0, abs=1e-5)] * 2],
                   [[pytest.approx(-1.0, abs=1e-5)], [pytest.approx(1.0, abs=1e-5)] * 2]]
    seat_level = advantages([rollout("a", [2.0, 0.0]), rollout("b", [0.0, 1.0])], "group")
    assert seat_level[0][1] == [pytest.approx(1.0, abs=1e-5)] * 2  # the group estimator credits the first turn's 2.0
    outcome = [rollout("c", [0.0, 1.0]), rollout("d", [0.0, 0.0]), rollout("e", [0.0, 1.0], task="u")]
    assert advantages([r.model_copy(deep=True) for r in outcome], "group-turn") == advantages(outcome, "group")
    assert advantages(outcome, "group-turn")[2] == [[0.0], [0.0, 0.0]]  # a task alone in its group: no signal
