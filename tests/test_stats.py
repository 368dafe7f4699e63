"""The shared statistics: Student's t at every n, Wilson at n = 0, one token F1 with a named tokenisation."""

from __future__ import annotations

import math

import pytest

from swm.stats import fantom_tokens, mean_ci, mean_interval, t95, token_f1, wilson_interval, words


@pytest.mark.parametrize(("df", "exact"), [(1, 12.706), (4, 2.776), (30, 2.042), (31, 2.040), (40, 2.021),
                                           (60, 2.000), (120, 1.980), (1000, 1.962)])
def test_t95_matches_the_t_table(df: int, exact: float) -> None:
    assert t95(df) == pytest.approx(exact, abs=1e-3)


def test_t95_falls_towards_the_normal_without_a_jump() -> None:
    values = [t95(df) for df in range(1, 500)]
    assert all(a > b for a, b in zip(values, values[1:], strict=False))
    assert values[-1] > 1.959963984540054


def test_mean_interval_hand_checked() -> None:
    values = [0.2, 0.4, 0.6, 0.8]  # mean 0.5, s = 0.2582, t(3) = 3.182
    mean, half, n = mean_ci(values)
    assert (mean, n) == (pytest.approx(0.5), 4)
    assert half == pytest.approx(3.182 * math.sqrt(0.2 / 3) / 2, abs=1e-4)
    assert mean_interval(values) == (pytest.approx(0.5 - half), pytest.approx(0.5 + half))
    assert mean_interval([0.0, 0.0, 1.0]) == (0.0, pytest.approx(1.0))  # clipped to the metric's range
    assert mean_interval([0.7]) == (0.0, 1.0) and mean_interval([]) == (0.0, 1.0)  # no spread: the whole range
    assert mean_interval([3.0], bounds=(0.0, 10.0)) == (0.0, 10.0)
    assert mean_ci([None, 2.0]) == (2.0, None, 1)


def test_wilson_at_the_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(0, 5)
    assert low == 0.0 and 0.4 < high < 0.5
    assert wilson_interval(5, 5)[1] == pytest.approx(1.0)


def test_token_f1_tokenisations() -> None:
    # words: punctuation separates, so "beagle." matches "beagle"
    assert token_f1("rex is a beagle", "Kai's dog Rex is a beagle.") == pytest.approx(2 * 1.0 * 4 / 6 / (1 + 4 / 6))
    # FANToM's official rule keeps punctuation attached: "beagle." does not match "beagle"
    assert token_f1("rex is a beagle", "Kai's dog Rex is a beagle.", fantom_tokens) == pytest.approx(0.6)
    assert words("It's $45, OK?") == ["it's", "$45", "ok"]
    assert token_f1("", "x") == 0.0 and token_f1("a b", "c d") == 0.0
