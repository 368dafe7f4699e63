"""ACC, BWT, FWT and F_k against hand-computed matrices; Wilson intervals; the deploy gate."""

from __future__ import annotations

import math

import pytest

from swm.lifelong.deploy import decide
from swm.lifelong.metrics import Cell, acc, bwt, curriculum_for, forgetting, fwt, summary, wilson
from swm.stats import two_proportion_test

LEVELS = ["easy", "medium", "hard"]


def matrix(rows: dict[int, dict[str, int]], n: int = 10) -> dict[tuple[int, str], Cell]:
    return {(c, lv): Cell(s, n) for c, row in rows.items() for lv, s in row.items()}


R2 = matrix({0: {"easy": 2, "medium": 1}, 1: {"easy": 6, "medium": 3}, 2: {"easy": 5, "medium": 7}})
R3 = matrix({0: {"easy": 2, "medium": 1, "hard": 0}, 1: {"easy": 6, "medium": 3, "hard": 1},
             2: {"easy": 5, "medium": 7, "hard": 2}, 3: {"easy": 4, "medium": 7, "hard": 5}})


def up(s: int, n: int) -> float:
    """How far a cell's Wilson interval reaches above its rate."""
    w = wilson(s, n)
    return w.high - w.value


def down(s: int, n: int) -> float:
    """How far a cell's Wilson interval reaches below its rate."""
    w = wilson(s, n)
    return w.value - w.low


def test_curriculum() -> None:
    assert curriculum_for(LEVELS, 2) == ["easy", "medium"]
    assert curriculum_for(LEVELS, 4) == ["easy", "medium", "hard", "hard"]


def test_two_cycles_by_hand() -> None:
    cur = ["easy", "medium"]
    a = acc(R2, ["easy", "medium"])
    assert a is not None and a.value == pytest.approx(0.6)
    # MOVER: a positive weight reaches up by its cell's upper arm, a negative one by its lower arm
    assert a.high - a.value == pytest.approx(math.sqrt((up(5, 10) ** 2 + up(7, 10) ** 2) / 4), abs=1e-6)
    assert a.value - a.low == pytest.approx(math.sqrt((down(5, 10) ** 2 + down(7, 10) ** 2) / 4), abs=1e-6)
    b = bwt(R2, ["easy", "medium"], cur)
    assert b is not None and b.value == pytest.approx(-0.1)
    assert b.high - b.value == pytest.approx(math.hypot(up(5, 10), down(6, 10)), abs=1e-6)  # R[2,e] − R[1,e]
    assert b.value - b.low == pytest.approx(math.hypot(down(5, 10), up(6, 10)), abs=1e-6)
    f = fwt(R2, ["easy", "medium"], cur)
    assert f is not None and f.value == pytest.approx(0.2)
    f2 = forgetting(R2, ["easy", "medium"], cur, 2)
    assert f2 is not None and f2.value == pytest.approx(0.1)


def test_three_cycles_by_hand() -> None:
    cur = LEVELS
    out = summary(R3, LEVELS, cur)
    assert out["ACC"] is not None and out["ACC"].value == pytest.approx((0.4 + 0.7 + 0.5) / 3, abs=1e-6)
    assert out["BWT"] is not None and out["BWT"].value == pytest.approx(-0.1)  # easy -0.2, medium 0
    assert out["FWT"] is not None and out["FWT"].value == pytest.approx(0.2)  # medium +0.2, hard +0.2
    assert out["F_3"] is not None and out["F_3"].value == pytest.approx(0.1)  # easy 0.6-0.4, medium 0.7-0.7
    assert out["F_2"] is not None and out["F_2"].value == pytest.approx(0.1)


def test_metrics_undefined_with_one_cycle() -> None:
    r = matrix({0: {"easy": 1}, 1: {"easy": 3}})
    assert bwt(r, ["easy"], ["easy"]) is None and fwt(r, ["easy"], ["easy"]) is None
    assert summary(r, ["easy"], ["easy"])["ACC"] is not None


def test_all_zero_rates_still_have_an_interval() -> None:
    r = matrix({0: {"easy": 0}, 1: {"easy": 0}, 2: {"easy": 0}})
    a = acc(r, ["easy"])
    assert a is not None and a.value == 0.0 and a.high > 0.1


@pytest.mark.parametrize(("before", "after", "n"), [(1, 0, 1), (0, 1, 1), (3, 0, 3), (10, 0, 10), (2, 1, 2)])
def test_intervals_stay_inside_the_metrics_range(before: int, after: int, n: int) -> None:
    """BWT from one task per level was printed as −1.000 [−1.561, −0.439]: an interval outside [−1, 1]."""
    r = matrix({0: {"easy": 0, "medium": 0}, 1: {"easy": before, "medium": 0},
                2: {"easy": after, "medium": after}}, n=n)
    out = summary(r, ["easy", "medium"], ["easy", "medium"])
    for name, est in out.items():
        assert est is not None
        low_bound = 0.0 if name == "ACC" else -1.0
        assert low_bound <= est.low <= est.value <= est.high <= 1.0, (name, est)
    if (before, after, n) == (1, 0, 1):  # the case from the report: one task, solved then lost
        b = out["BWT"]
        assert b is not None and b.value == b.low == -1.0 and -1.0 < b.high < 1.0


def test_wilson() -> None:
    w = wilson(5, 10)
    assert (round(w.low, 4), round(w.high, 4)) == (0.2366, 0.7634)
    assert wilson(0, 10).low == 0.0 and wilson(0, 0).high == 1.0


def cells(n: int = 200, **successes: int) -> dict[str, Cell]:
    return {lv: Cell(s, n) for lv, s in successes.items()}


def test_deploy_refuses_an_earlier_level_regression_beyond_epsilon() -> None:
    d = decide(cells(easy=100, medium=50), cells(easy=70, medium=90), earlier=["easy"], current="medium",
               epsilon=0.05)
    assert not d.deploy and d.reasons == ["regressed:easy"] and d.deltas["easy"] == pytest.approx(-0.15)
    assert "kept the previous policy" in d.explain()


def test_deploy_tolerates_a_drop_within_epsilon_but_not_a_current_fall() -> None:
    ok = decide(cells(easy=100, medium=50), cells(easy=92, medium=60), earlier=["easy"], current="medium",
                epsilon=0.05)
    assert ok.deploy and ok.reasons == []
    fell = decide(cells(easy=100, medium=60), cells(easy=100, medium=35), earlier=["easy"], current="medium")
    assert not fell.deploy and fell.reasons == ["current_fell:medium"]


def test_a_dip_within_noise_refuses_nothing() -> None:
    """Two of twenty dev tasks lost: the point estimate fell, the interval did not exclude no change."""
    dip = decide(cells(20, easy=10, medium=5), cells(20, easy=8, medium=3), earlier=["easy"], current="medium")
    assert dip.deploy and dip.deltas["medium"] == pytest.approx(-0.1)
    assert two_proportion_test(5, 20, 3, 20)[1] > 0.05


def test_untrained_levels_do_not_block() -> None:
    d = decide(cells(easy=50, hard=90), cells(easy=60, hard=0), earlier=[], current="easy")
    assert d.deploy


def test_a_cell_counted_twice_is_one_term_not_two_draws() -> None:
    """R[T, j] − R[c, j] of an unchanged policy (the same episodes) is exactly 0 with no interval."""
    same = Cell(6, 10, source="p1/test/easy")
    r = {(0, "easy"): Cell(2, 10, source="p0/test/easy"), (1, "easy"): same, (2, "easy"): same,
         (0, "medium"): Cell(1, 10), (1, "medium"): Cell(3, 10, source="p1/test/medium"),
         (2, "medium"): Cell(3, 10, source="p1/test/medium")}
    b = bwt(r, ["easy", "medium"], ["easy", "medium"])
    assert b is not None and (b.value, b.low, b.high) == (0.0, 0.0, 0.0)
    independent = bwt(matrix({0: {"easy": 2}, 1: {"easy": 6}, 2: {"easy": 6}}), ["easy"], ["easy", "medium"])
    assert independent is not None and independent.value == 0.0 and independent.high > 0.3
    # one policy on two levels is two episode sets: independent terms, not merged
    a = acc({(1, "easy"): same, (1, "medium"): Cell(6, 10, source="p1/test/medium")}, ["easy", "medium"])
    assert a is not None and a.high - a.value == pytest.approx(up(6, 10) / math.sqrt(2), abs=1e-6)


def test_forgetting_compares_with_the_best_before_cycle_k_so_an_improving_level_forgets_negatively() -> None:
    r = matrix({0: {"easy": 1, "medium": 1}, 1: {"easy": 3, "medium": 2}, 2: {"easy": 8, "medium": 6}})
    f2 = forgetting(r, ["easy", "medium"], ["easy", "medium"], 2)
    assert f2 is not None and f2.value == pytest.approx(0.3 - 0.8)
