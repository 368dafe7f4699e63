"""The shared statistics: Student's t at every n, Wilson at n = 0, one token F1 with a named tokenisation, and the
tests of a comparison: exact McNemar when paired, the z-test (and saying so) when not, Welch, paired t, bootstrap,
Newcombe's intervals of a difference of rates (paired and not), Holm's adjustment of many p-values."""

from __future__ import annotations

import math

import pytest

from swm.stats import (
    bootstrap_interval,
    compare_outcomes,
    fantom_tokens,
    holm,
    mcnemar_exact,
    mean_ci,
    mean_interval,
    paired_interval,
    paired_rate_difference,
    rate_difference,
    t95,
    token_f1,
    two_proportion_test,
    welch_interval,
    wilson_interval,
    words,
)


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


def test_mcnemar_is_the_exact_two_sided_binomial_test_of_the_discordant_pairs() -> None:
    a = [True] * 2 + [False] * 10 + [True] * 5
    b = [False] * 2 + [True] * 10 + [True] * 5
    only_a, only_b, p = mcnemar_exact(a, b)
    assert (only_a, only_b) == (2, 10)
    assert p == pytest.approx(2 * (1 + 12 + 66) / 2**12, abs=1e-12)  # P(X <= 2), X ~ Bin(12, 1/2), doubled
    assert mcnemar_exact([True, False], [True, False]) == (0, 0, 1.0)
    assert mcnemar_exact([True], [False])[2] == 1.0  # one discordant item: p = min(1, 2 * 1/2)
    with pytest.raises(ValueError, match="same items"):
        mcnemar_exact([True], [True, False])


def test_the_same_questions_are_compared_paired_and_different_ones_unpaired_and_said_so() -> None:
    # 40 questions both runs got right, 10 only the second: unpaired the z-test sees 80% vs 100% on 50 each...
    first = {f"q{i}": i < 40 for i in range(50)}
    second = dict.fromkeys(first, True)
    paired = compare_outcomes(first, second)
    assert paired.paired and (paired.only_first, paired.only_second, paired.shared) == (0, 10, 50)
    assert paired.p == pytest.approx(2 / 2**10)  # both tails of Bin(10, 1/2) at 0 and 10
    assert "paired, exact McNemar on 50 shared items" in paired.note
    # ...while the pooled z-test on the same counts gives another p: the paired test is the one that ran
    assert paired.p != pytest.approx(two_proportion_test(40, 50, 50, 50)[1])
    other = {f"r{i}": True for i in range(50)}
    unpaired = compare_outcomes(first, other)
    assert not unpaired.paired and unpaired.shared == 0 and unpaired.z is not None
    assert unpaired.p == pytest.approx(two_proportion_test(40, 50, 50, 50)[1])
    assert "unpaired" in unpaired.note and "different items (0 shared of 50 and 50)" in unpaired.note


def test_welch_and_paired_intervals_by_hand() -> None:
    a, b = [1.0, 2.0, 3.0], [2.0, 4.0, 6.0]  # means 2 and 4; variances of the means 1/3 and 4/3
    diff, low, high = welch_interval(a, b) or (0, 0, 0)
    se = math.sqrt(1 / 3 + 4 / 3)
    df = se**4 / ((1 / 3) ** 2 / 2 + (4 / 3) ** 2 / 2)  # 2.94: t(2) = 4.303
    assert int(df) == 2 and diff == 2.0
    assert (low, high) == (pytest.approx(2 - 4.303 * se), pytest.approx(2 + 4.303 * se))
    assert welch_interval([1.0], b) is None
    d, lo, hi = paired_interval(list(zip(a, b, strict=True))) or (0, 0, 0)  # differences 1, 2, 3: mean 2, s = 1
    assert d == 2.0 and (lo, hi) == (pytest.approx(2 - 4.303 / math.sqrt(3)), pytest.approx(2 + 4.303 / math.sqrt(3)))
    assert paired_interval([(1.0, 2.0)]) is None


def test_the_bootstrap_of_a_mean_is_seeded_inside_the_values_and_honest_about_no_spread() -> None:
    values = [0.0, 0.5, 1.0, 0.25, 0.75] * 4
    low, high = bootstrap_interval(values)
    assert 0.0 <= low < 0.5 < high <= 1.0 and bootstrap_interval(values) == (low, high)
    assert bootstrap_interval([1.0, 1.0, 1.0]) == (1.0, 1.0)
    assert bootstrap_interval([]) == (0.0, 1.0)


def test_newcombes_paired_interval_by_hand() -> None:
    z = 1.959963984540054
    # 10 items: 5 right on both sides, 5 only in the second; (b + d) = 0, so φ = 0. The rates are 0.5 and 1.0
    # with Wilson intervals 0.5 ± z√(0.025 + z²/400)/(1 + z²/10) and [1/(1 + z²/10), 1]
    half = z * math.sqrt(0.025 + z * z / 400) / (1 + z * z / 10)  # 0.263407
    l2 = 1 / (1 + z * z / 10)  # 0.722467
    diff, low, high = paired_rate_difference(5, 0, 5, 0)
    assert diff == 0.5
    assert low == pytest.approx(0.5 - math.sqrt((1 - l2) ** 2 + half**2)) == pytest.approx(0.117367, abs=1e-6)
    assert high == pytest.approx(0.5 + half) == pytest.approx(0.763407, abs=1e-6)
    # 161 items: a = 59, b = 6, c = 16, d = 80; ad − bc = 4624 is above n/2, so φ = (4624 − 80.5)/√(65·96·75·86)
    phi = (59 * 80 - 6 * 16 - 161 / 2) / math.sqrt(65 * 96 * 75 * 86)  # 0.716
    p1, (l1, u1) = 65 / 161, wilson_interval(65, 161)
    p2, (l2, u2) = 75 / 161, wilson_interval(75, 161)
    diff, low, high = paired_rate_difference(59, 6, 16, 80)
    assert diff == pytest.approx(10 / 161)
    assert low == pytest.approx(diff - math.sqrt((p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    assert high == pytest.approx(diff + math.sqrt((u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2))
    assert (round(low, 4), round(high, 4)) == (0.0046, 0.1186)  # narrower than the unpaired (−0.046, 0.169)
    assert rate_difference(65, 161, 75, 161)[1] < -0.04
    # 0 <= ad − bc <= n/2: φ is taken as 0 and the interval is the one for different items of the same sizes
    assert paired_rate_difference(1, 1, 7, 12) == pytest.approx(rate_difference(2, 21, 8, 21))
    assert paired_rate_difference(0, 0, 0, 0) == (0.0, -1.0, 1.0)
    none_right = wilson_interval(0, 7)[1]  # no item right on either side: ± the Wilson upper bound of 0 of 7
    assert paired_rate_difference(0, 0, 0, 7) == pytest.approx((0.0, -none_right, none_right))


def test_newcombes_interval_for_different_items_by_hand() -> None:
    # 1 of 34 against 7 of 34: d = 6/34, [d − √((p2 − l2)² + (u1 − p1)²), d + √((u2 − p2)² + (p1 − l1)²)]
    p1, (l1, u1) = 1 / 34, wilson_interval(1, 34)
    p2, (l2, u2) = 7 / 34, wilson_interval(7, 34)
    diff, low, high = rate_difference(1, 34, 7, 34)
    assert diff == pytest.approx(6 / 34)
    assert low == pytest.approx(diff - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2))
    assert high == pytest.approx(diff + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2))
    assert (round(low, 4), round(high, 4)) == (0.0189, 0.3404)
    assert rate_difference(0, 10, 10, 10)[2] == 1.0 and rate_difference(10, 10, 0, 10)[1] == -1.0  # within [−1, 1]


def test_holm_multiplies_the_kth_smallest_p_by_the_tests_left_and_keeps_them_in_order() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04: × 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 → the last raised to 0.06 (monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0] and holm([0.02]) == [0.02] and holm([]) == []


def test_a_comparison_carries_the_interval_of_its_own_test() -> None:
    first = {f"q{i}": i < 40 for i in range(50)}  # 40 right on both, 10 only in the second
    paired = compare_outcomes(first, dict.fromkeys(first, True))
    assert paired.difference == pytest.approx(0.2)
    assert (paired.low, paired.high) == pytest.approx(paired_rate_difference(40, 0, 10, 0)[1:])
    assert 0 < paired.low < 0.2 < paired.high  # McNemar's p = 0.002: the interval leaves out 0 too
    unpaired = compare_outcomes(first, {f"r{i}": True for i in range(50)})
    assert (unpaired.low, unpaired.high) == pytest.approx(rate_difference(40, 50, 50, 50)[1:])
    # the same rates on correlated items (a = 40, b = 0, c = 5, d = 5: φ > 0) give a narrower paired interval
    correlated = compare_outcomes(first, {k: v or int(k[1:]) % 2 == 0 for k, v in first.items()})
    assert (correlated.only_first, correlated.only_second) == (0, 5)
    unpaired = compare_outcomes(first, {f"r{i}": i < 45 for i in range(50)})
    assert unpaired.high - unpaired.low > correlated.high - correlated.low > 0
