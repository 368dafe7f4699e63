"""The statistics every benchmark shares: one interval per kind of number, one test per kind of comparison,
one token F1.

* A proportion (accuracy, pass rate): the 95% Wilson score interval, `wilson_interval`. With no
  data (n = 0) it is (0, 1): anything is possible, which is also the formula's limit as n → 0.
* A mean (a judge score, token F1): Student's t, `mean_ci` and `mean_interval`. Benchmarks here
  often average a handful of episodes or questions, where the normal z understates the interval
  (t(4) = 2.78 against z = 1.96); t tends to z as n grows, so it is right at every n. Below two
  values there is no spread to estimate: `mean_ci` gives no half-width and `mean_interval` the
  whole range of the metric.
* Two rates on the **same** items (two runs, or two modes, answering the same questions; two arms
  on the same test tasks): the exact McNemar test, `mcnemar_exact`, on the items only one side got
  right. Two rates on **different** items: the pooled two-proportion z-test, `two_proportion_test`.
  `compare_outcomes` takes each side's outcome per item id and picks the test, saying which it ran
  and, when it could not pair, how many items the two sides share.
* The difference of two rates, with its 95% interval: Newcombe's square-and-add of the two Wilson
  intervals, paired (`paired_rate_difference`, his method 10: the two sides' correlation on the same
  items narrows it) or on different items (`rate_difference`, his hybrid score interval). Both stay
  inside [−1, 1] and are sensible at 0% and 100%, where the Wald interval collapses to a point.
* Many tests on one page: Holm's step-down adjustment, `holm` (each p multiplied by the number of
  tests not yet rejected, kept monotone), which holds the chance of any false positive among them at
  5% whatever their dependence; the rows of one table (a question type and its ``all`` row) are not
  independent, which Benjamini–Hochberg's plain form would need.
* Two means: paired by item (two policies on the same scenario and seat), the t interval of the
  differences, `paired_interval`; unpaired, Welch's interval, `welch_interval`. Either is
  significant at 5% when it leaves out 0.
* An F1 or any other mean of scores in [0, 1], where a t interval would claim too much (a handful of
  items, all 0 or all 1: ``[0.000, 0.000]``): the percentile bootstrap, `bootstrap_interval` (seeded, so a
  report reprints the same), and Wilson's interval where the sample shows no spread at all
  (`bounded_mean_interval`).
* Word overlap: `token_f1`, the bag-of-words F1 of SQuAD and FANToM, with the tokenisation a
  parameter so a benchmark can keep its official rule (see `fantom_tokens`).

No scipy (it is not in the lock, and nothing else needs it): a t table for 1..30 degrees of freedom, then
the Cornish–Fisher expansion (within 0.001 of the exact value beyond 30); McNemar's exact p is a
binomial sum (`math.comb`); tests/test_stats.py checks each against numbers worked by hand.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054  # the two-sided 95% quantile of the standard normal

# Two-sided 95% critical values of Student's t for 1..30 degrees of freedom.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def t95(df: int) -> float:
    """Return the two-sided 95% critical value of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError("Student's t needs at least one degree of freedom")
    if df <= len(_T95):
        return _T95[df - 1]
    z = Z95
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_ci(values: Iterable[float | None]) -> tuple[float | None, float | None, int]:
    """Return (mean, 95% half-width, n) over the non-missing values; the half-width is None for n < 2.

    The half-width is t(n-1) · s / √n with s the sample standard deviation.
    """
    xs = [float(v) for v in values if v is not None]
    n = len(xs)
    if n == 0:
        return None, None, 0
    mean = sum(xs) / n
    if n < 2:
        return mean, None, n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return mean, t95(n - 1) * sd / math.sqrt(n), n


def mean_interval(values: Iterable[float | None], bounds: tuple[float, float] = (0.0, 1.0)) -> tuple[float, float]:
    """Return the 95% t interval of a mean, clipped to the metric's ``bounds`` (the whole range below n = 2)."""
    mean, half, _ = mean_ci(values)
    low, high = bounds
    if mean is None or half is None:
        return low, high
    return max(low, mean - half), min(high, mean + half)


def format_ci(mean: float | None, half: float | None, digits: int = 2) -> str:
    """Render ``mean ± half`` (``n/a`` for what is missing)."""
    if mean is None:
        return "n/a"
    return f"{mean:.{digits}f}" + (f" ± {half:.{digits}f}" if half is not None else " ± n/a")


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Return the 95% Wilson score interval of a proportion (well-behaved at 0, 1 and small n); (0, 1) at n = 0."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def two_proportion_test(s1: float, n1: int, s2: float, n2: int) -> tuple[float, float]:
    """Return (z, two-sided p) of the pooled two-proportion z-test of s2/n2 against s1/n1.

    z > 0 when the second rate is higher. With no data on either side, or no variance in the
    pooled rate (both 0% or both 100%), there is no evidence of a difference: (0, 1).
    """
    if n1 <= 0 or n2 <= 0:
        return 0.0, 1.0
    pooled = (s1 + s2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return 0.0, 1.0
    z = (s2 / n2 - s1 / n1) / se
    return z, math.erfc(abs(z) / math.sqrt(2))


def mcnemar_exact(first: Sequence[bool], second: Sequence[bool]) -> tuple[int, int, float]:
    """Return (right only in ``first``, right only in ``second``, two-sided exact p) of paired outcomes.

    Under the null each discordant item is a fair coin: p = min(1, 2 · P(Binomial(b + c, ½) ≤ min(b, c))),
    1 with no discordant item.
    """
    if len(first) != len(second):
        raise ValueError("McNemar's test pairs outcomes item by item: the two sides need the same items")
    only_first = sum(1 for a, b in zip(first, second, strict=True) if a and not b)
    only_second = sum(1 for a, b in zip(first, second, strict=True) if b and not a)
    n = only_first + only_second
    tail = sum(math.comb(n, k) for k in range(min(only_first, only_second) + 1)) / 2**n
    return only_first, only_second, min(1.0, 2 * tail)


def _square_and_add(second: tuple[float, float, float], first: tuple[float, float, float],
                    phi: float = 0.0) -> tuple[float, float, float]:
    """Return second − first with Newcombe's interval from each rate and its Wilson interval ``(rate, low, high)``
    and their correlation ``phi`` (0 on different items)."""
    p2, l2, u2 = second
    p1, l1, u1 = first
    diff = p2 - p1
    low = diff - math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    high = diff + math.sqrt(max(0.0, (u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2))
    return diff, max(-1.0, low), min(1.0, high)


def rate_difference(s1: float, n1: int, s2: float, n2: int) -> tuple[float, float, float]:
    """Return s2/n2 − s1/n1 with its 95% interval on different items: Newcombe's hybrid score interval.

    With each rate's Wilson interval (l, u): [d − √((p2 − l2)² + (u1 − p1)²), d + √((u2 − p2)² + (p1 − l1)²)]
    (Newcombe 1998, Stat Med 17:873, method 10). A side with no data has the interval (0, 1) and rate 0.
    """
    first = (s1 / n1 if n1 > 0 else 0.0, *wilson_interval(s1, n1))
    second = (s2 / n2 if n2 > 0 else 0.0, *wilson_interval(s2, n2))
    return _square_and_add(second, first)


def paired_rate_difference(both: int, only_first: int, only_second: int, neither: int) -> tuple[float, float, float]:
    """Return the second side's rate minus the first's on the same items, with Newcombe's 95% paired interval.

    The items fall in a 2×2 table: right on both sides (a), only the first (b), only the second (c), neither
    (d), n = a + b + c + d; the rates are (a + b)/n and (a + c)/n. The interval squares and adds the two Wilson
    intervals as for different items, less the correlation of the two rates, φ = (ad − bc) / √((a + b)(c + d)
    (a + c)(b + d)), taken as (ad − bc − n/2)/√… above n/2, 0 between 0 and n/2, as it is below 0, and 0 when a
    margin is empty (Newcombe 1998, Stat Med 17:2635, method 10; Fagerland, Lydersen & Laake, *Statistical
    Analysis of Contingency Tables*, 2017, §8.5). No item: the difference 0 in [−1, 1].
    """
    a, b, c, d = both, only_first, only_second, neither
    n = a + b + c + d
    if n <= 0:
        return 0.0, -1.0, 1.0
    margins = (a + b) * (c + d) * (a + c) * (b + d)
    cross = a * d - b * c
    phi = 0.0
    if margins > 0 and (cross > n / 2 or cross < 0):
        phi = (cross - n / 2 if cross > 0 else cross) / math.sqrt(margins)
    first = ((a + b) / n, *wilson_interval(a + b, n))
    second = ((a + c) / n, *wilson_interval(a + c, n))
    return _square_and_add(second, first, phi)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Return Holm's adjusted p-values, in the order given: the k-th smallest p times (m − k + 1), never below
    the one before it, at most 1. An adjusted p under 0.05 is significant with the chance of any false positive
    among all m tests held at 5% (Holm 1979)."""
    m = len(pvalues)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: pvalues[j])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class RateComparison:
    """Two rates compared: the test run (``mcnemar`` paired, or ``z`` unpaired), its p and what it stood on, and
    the difference (second − first) with its 95% Newcombe interval, paired or not as the test."""

    test: str
    p: float
    first: float
    second: float
    n_first: int
    n_second: int
    shared: int  # items both sides answered
    only_first: int | None = None  # McNemar: items right only in the first
    only_second: int | None = None
    z: float | None = None
    low: float = -1.0
    high: float = 1.0

    @property
    def difference(self) -> float:
        return self.second - self.first

    @property
    def paired(self) -> bool:
        return self.test == "mcnemar"

    @property
    def note(self) -> str:
        """Say which test ran, and why when it is the unpaired one."""
        if self.paired:
            return f"paired, exact McNemar on {self.shared} shared items ({self.only_first} right only in the " \
                   f"first, {self.only_second} only in the second)"
        return (f"unpaired two-proportion z-test: the two sides answered different items ({self.shared} shared of "
                f"{self.n_first} and {self.n_second})")


def compare_outcomes(first: Mapping[str, bool], second: Mapping[str, bool]) -> RateComparison:
    """Compare two sides' success rates from their outcome per item id: paired (exact McNemar) when they
    answered the same items, else the unpaired pooled z-test, which `RateComparison.note` then names."""
    shared = first.keys() & second.keys()
    r1 = sum(map(bool, first.values())) / len(first) if first else 0.0
    r2 = sum(map(bool, second.values())) / len(second) if second else 0.0
    if first and first.keys() == second.keys():
        keys = sorted(shared)
        b, c, p = mcnemar_exact([bool(first[k]) for k in keys], [bool(second[k]) for k in keys])
        a = sum(1 for k in keys if first[k] and second[k])
        _, low, high = paired_rate_difference(a, b, c, len(keys) - a - b - c)
        return RateComparison("mcnemar", p, r1, r2, len(first), len(second), len(shared), b, c, low=low, high=high)
    s1, s2 = sum(map(bool, first.values())), sum(map(bool, second.values()))
    z, p = two_proportion_test(s1, len(first), s2, len(second))
    _, low, high = rate_difference(s1, len(first), s2, len(second))
    return RateComparison("z", p, r1, r2, len(first), len(second), len(shared), z=z, low=low, high=high)


def welch_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float] | None:
    """Return mean(b) − mean(a) with its 95% Welch interval (Student's t at Welch's degrees of freedom, rounded
    down); None without two values on each side."""
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return mb - ma, mb - ma, mb - ma
    df = se ** 4 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = t95(max(1, int(df))) * se
    return mb - ma, mb - ma - half, mb - ma + half


def paired_interval(pairs: Sequence[tuple[float, float]]) -> tuple[float, float, float] | None:
    """Return the mean of ``second − first`` over paired values with its 95% t interval; None below two pairs."""
    mean, half, _ = mean_ci([b - a for a, b in pairs])
    if mean is None or half is None:
        return None
    return mean, mean - half, mean + half


def bootstrap_interval(values: Sequence[float], resamples: int = 2000, seed: int = 0,
                       bounds: tuple[float, float] = (0.0, 1.0)) -> tuple[float, float]:
    """Return the 95% percentile-bootstrap interval of a mean (the whole of ``bounds`` with no value).

    Resamples the values with replacement ``resamples`` times (seeded); with every value equal the
    interval is that value: the data show no spread, and the report prints n beside it.
    """
    xs = [float(v) for v in values]
    if not xs:
        return bounds
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(sum(rng.choices(xs, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * (resamples - 1))], means[int(math.ceil(0.975 * (resamples - 1)))]


def bounded_mean_interval(values: Sequence[float], seed: int = 0) -> tuple[float, float]:
    """Return the 95% interval of a mean of scores in [0, 1] (token F1, a per-scenario rate): the percentile
    bootstrap, or, where the sample shows no spread (every value equal, which a bootstrap or t interval would
    print as a zero-width interval), the Wilson interval of its sum over n — the widest a [0, 1] score's mean
    can honestly claim, since no score in [0, 1] varies more than a 0/1 one with the same mean."""
    xs = [float(v) for v in values]
    if not xs:
        return 0.0, 1.0
    if max(xs) == min(xs):
        return wilson_interval(sum(xs), len(xs))
    return bootstrap_interval(xs, seed=seed)


_WORD_RE = re.compile(r"[a-z0-9$']+")


def words(text: object) -> list[str]:
    """Split text into lowercase words (letters, digits, ``$`` and ``'``); punctuation separates."""
    return _WORD_RE.findall(str(text or "").casefold())


def fantom_tokens(text: object) -> list[str]:
    """FANToM's official tokenisation for fact F1: lowercase, split on whitespace (punctuation stays attached)."""
    return str(text or "").lower().split()


def token_f1(answer: object, gold: object, tokenize: Callable[[object], list[str]] = words) -> float:
    """Return the bag-of-words F1 between answer and gold (0 when either has no token)."""
    a, g = tokenize(answer), tokenize(gold)
    common = sum((Counter(a) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(a), common / len(g)
    return 2 * precision * recall / (precision + recall)
