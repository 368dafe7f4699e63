"""Retention metrics over the matrix R[cycle, level], each with a 95% confidence interval.

R[c, j] is a rate (completion or pass) on level j's *test* split after cycle c; row 0 is the
initial policy (the baseline b_j). The loop fills two such matrices, one per curve: *deployed*
(row c: the policy in service after cycle c) and *candidate* (row c: the policy trained in cycle
c, deployed or refused), each row from that policy's own evaluated episodes. ``curriculum[c-1]``
is the level cycle c trained on (or the set of columns it trained, where R's columns are finer than
levels: `cell_schedule` gives a curriculum's level × family columns). With T the last cycle
(Lopez-Paz & Ranzato 2017, GEM; Chaudhry et al. 2018, RWalk):

* ACC = mean_j R[T, j] over every evaluated level;
* BWT = mean over levels j last trained at a cycle c_j < T of R[T, j] − R[c_j, j];
* FWT = mean over levels j first trained at a cycle c_j ≥ 2 of R[c_j − 1, j] − R[0, j];
* F_k = mean over levels j trained before cycle k of max_{1 ≤ l < k} R[l, j] − R[k, j];
* transfer to a column never trained, R[T, j] − R[0, j] (`change`, for any column and cycles).

Confidence intervals: a cell is a binomial proportion over its episodes, with its Wilson
interval. A metric is a linear combination Σ w_i p_i of cells from independent episode sets; its
interval is the MOVER one (Newcombe 1998, method 10, for one difference; Zou & Donner 2008 for
any linear combination): with (l_i, u_i) each cell's Wilson interval,

    low  = L − sqrt(Σ_{w_i>0} w_i² (p_i − l_i)² + Σ_{w_i<0} w_i² (u_i − p_i)²)
    high = L + sqrt(Σ_{w_i>0} w_i² (u_i − p_i)² + Σ_{w_i<0} w_i² (p_i − l_i)²)

Each square root is at most the sum of its terms, so the interval never leaves the metric's own
range: [0, 1] for ACC, [−1, 1] for BWT, FWT and F_k (a Wald interval ±1.96 σ did: BWT −1.000
[−1.561, −0.439] from one task per level). It is asymmetric where a rate sits at 0 or 1, as a
Wilson interval is. Two cells that are the same episodes (a cell's ``source`` names its episode
set, e.g. the deployed curve's row after a refused candidate is the incumbent's own evaluation)
are one term with their weights summed, so R[T, j] − R[c, j] of an unchanged policy is exactly
0 [0, 0] rather than 0 ± the noise of two draws. For F_k the maximising cell is treated as fixed
(an approximation, stated here). With few episodes the intervals are wide, as they should be.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from swm.stats import wilson_interval

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Cell:
    """A rate: successes out of n episodes."""

    successes: int
    n: int
    source: str | None = field(default=None, compare=False)  # names its episode set (None: its own)

    @property
    def rate(self) -> float:
        return self.successes / self.n if self.n else 0.0

    @property
    def variance(self) -> float:
        """The squared standard error implied by the cell's Wilson interval (nonzero at 0/n and n/n)."""
        w = wilson(self.successes, self.n)
        return ((w.high - w.low) / (2 * Z95)) ** 2


@dataclass(frozen=True)
class Estimate:
    """A metric's value and its 95% interval."""

    value: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.value:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


def wilson(successes: int, n: int, z: float = Z95) -> Estimate:
    """Return a proportion with its Wilson score interval."""
    if n == 0:
        return Estimate(0.0, 0.0, 1.0)
    low, high = wilson_interval(successes, n, z)
    return Estimate(successes / n, low, high)


def _combine(terms: Sequence[tuple[float, Cell]]) -> Estimate | None:
    """Return Σ w_i p_i with its MOVER interval (see the module docstring)."""
    if not terms:
        return None
    value = sum(w * c.rate for w, c in terms)
    merged: dict[object, tuple[float, Cell]] = {}
    for i, (w, c) in enumerate(terms):
        key = c.source if c.source is not None else i
        merged[key] = (merged[key][0] + w, c) if key in merged else (w, c)
    below = above = 0.0
    for w, c in merged.values():
        cell = wilson(c.successes, c.n)
        down, up = (cell.value - cell.low) ** 2, (cell.high - cell.value) ** 2
        below += w * w * (down if w > 0 else up)
        above += w * w * (up if w > 0 else down)
    return Estimate(round(value, 6), round(value - math.sqrt(below), 6), round(value + math.sqrt(above), 6))


Matrix = Mapping[tuple[int, str], Cell]
# what each cycle trained, in order: a level name, or the set of R's columns it trained
Curriculum = Sequence[str | Collection[str]]


def last_cycle(r: Matrix) -> int:
    return max(c for c, _ in r)


def trained_at(curriculum: Curriculum) -> tuple[dict[str, int], dict[str, int]]:
    """Return each column's first and last training cycle (cycles count from 1)."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for c, trained in enumerate(curriculum, start=1):
        for column in ([trained] if isinstance(trained, str) else sorted(trained)):
            first.setdefault(column, c)
            last[column] = c
    return first, last


def column(level: str, family: str) -> str:
    """Return the name of R's level × family column."""
    return f"{level}/{family}"


def cell_schedule(curriculum: Sequence[str], families: Sequence[str]) -> list[frozenset[str]]:
    """Return the level × family columns each cycle trains: its level, for every trained family."""
    return [frozenset(column(level, f) for f in families) for level in curriculum]


def change(r: Matrix, j: str, after: int, before: int = 0) -> Estimate | None:
    """Return R[after, j] − R[before, j] with its interval (transfer to an untrained column: after T, before 0)."""
    if (after, j) not in r or (before, j) not in r:
        return None
    return _combine([(1.0, r[(after, j)]), (-1.0, r[(before, j)])])


def acc(r: Matrix, levels: Sequence[str]) -> Estimate | None:
    t = last_cycle(r)
    cells = [r[(t, j)] for j in levels if (t, j) in r]
    return _combine([(1 / len(cells), c) for c in cells]) if cells else None


def bwt(r: Matrix, levels: Sequence[str], curriculum: Curriculum) -> Estimate | None:
    t = last_cycle(r)
    _, last = trained_at(curriculum[:t])
    js = [j for j in levels if j in last and last[j] < t and (t, j) in r and (last[j], j) in r]
    if not js:
        return None
    w = 1 / len(js)
    return _combine([term for j in js for term in ((w, r[(t, j)]), (-w, r[(last[j], j)]))])


def fwt(r: Matrix, levels: Sequence[str], curriculum: Curriculum) -> Estimate | None:
    t = last_cycle(r)
    first, _ = trained_at(curriculum[:t])
    js = [j for j in levels if j in first and first[j] >= 2 and (first[j] - 1, j) in r and (0, j) in r]
    if not js:
        return None
    w = 1 / len(js)
    return _combine([term for j in js for term in ((w, r[(first[j] - 1, j)]), (-w, r[(0, j)]))])


def forgetting(r: Matrix, levels: Sequence[str], curriculum: Curriculum, k: int) -> Estimate | None:
    """Return F_k, the mean drop from each earlier-trained level's best rate to its rate after cycle k."""
    first, _ = trained_at(curriculum[: k - 1])
    js = [j for j in levels if j in first and (k, j) in r]
    terms: list[tuple[float, Cell]] = []
    for j in js:
        history = [(c, r[(c, j)]) for c in range(1, k) if (c, j) in r]
        if not history:
            continue
        best = max(history, key=lambda h: (h[1].rate, -h[0]))[1]
        terms += [(1.0, best), (-1.0, r[(k, j)])]
    if not terms:
        return None
    n = len(terms) // 2
    return _combine([(w / n, c) for w, c in terms])


def summary(r: Matrix, levels: Sequence[str], curriculum: Curriculum) -> dict[str, Estimate | None]:
    """Return ACC, BWT, FWT and F_k for every cycle k ≥ 2 of a matrix."""
    out: dict[str, Estimate | None] = {"ACC": acc(r, levels), "BWT": bwt(r, levels, curriculum),
                                       "FWT": fwt(r, levels, curriculum)}
    for k in range(2, last_cycle(r) + 1):
        out[f"F_{k}"] = forgetting(r, levels, curriculum, k)
    return out


def curriculum_for(levels: Sequence[str], cycles: int) -> list[str]:
    """Return the level each cycle trains on: one level per cycle, the last repeated."""
    return [levels[min(c, len(levels) - 1)] for c in range(cycles)]
