"""95% intervals shared by every benchmark: Wilson for proportions, Student's t for small-sample means.

No scipy: a t table for 1..30 degrees of freedom, then the normal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# Two-sided 95% critical values of Student's t for 1..30 degrees of freedom.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def t95(df: int) -> float:
    """Return the two-sided 95% t critical value (1.96 beyond 30 degrees of freedom)."""
    return _T95[df - 1] if 1 <= df <= len(_T95) else 1.96


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


def format_ci(mean: float | None, half: float | None, digits: int = 2) -> str:
    if mean is None:
        return "n/a"
    return f"{mean:.{digits}f}" + (f" ± {half:.{digits}f}" if half is not None else " ± n/a")


def wilson_interval(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Return the 95% Wilson score interval of a proportion (well-behaved at 0, 1 and small n).

    With n = 0 there is no data; the interval is (0, 0) and callers that need "anything is
    possible" write their own (0, 1).
    """
    if n <= 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))
