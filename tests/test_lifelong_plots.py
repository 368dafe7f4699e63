"""Every report plot, rendered from a small real lifelong run: distinct series, labelled axes with units, n shown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from test_lifelong_graph import PLAN, Agents, run  # noqa: E402

from swm.lifelong import store as ls  # noqa: E402
from swm.lifelong.metrics import curriculum_for, summary  # noqa: E402
from swm.lifelong.plots import forgetting_figure, r_figure  # noqa: E402


def _looks(ax: Any) -> list[tuple[Any, ...]]:
    """Each plotted series' look: colour, line style, marker and whether the marker is filled."""
    return [(line.get_color(), line.get_linestyle(), line.get_marker(), line.get_markerfacecolor() == "none")
            for line in ax.get_lines() if line.get_label() and not line.get_label().startswith("_")]


def _labels(ax: Any) -> list[str]:
    return [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]


def test_each_plot_of_a_small_run_shows_every_series_distinctly(tmp_path: Path) -> None:
    out, store, _ = run(tmp_path, Agents(), {**PLAN, "act_strategy": "plain"})
    levels = sorted({lv for _, lv in ls.matrix(store, "t1", "pass")})
    curriculum = curriculum_for(levels, max(c for c, _ in ls.matrix(store, "t1", "pass")))
    forgetting: dict[str, dict[str, Any]] = {}
    for metric in ("pass", "completion"):
        curves = {curve: ls.matrix(store, "t1", metric, curve) for curve in ("deployed", "candidate")}
        fig = r_figure(metric, curves, levels)
        ax = fig.axes[0]
        labels = _labels(ax)
        assert sorted(labels) == sorted(f"{j} ({c})" for j in levels for c in curves)
        looks = _looks(ax)
        assert len(set(looks)) == len(looks), "no two series look alike"
        xs = [tuple(line.get_xdata()) for line in ax.get_lines() if not line.get_label().startswith("_")]
        assert len(set(xs)) == len(xs), "equal values are shifted apart, never drawn on top of each other"
        assert "cycle" in ax.get_xlabel() and "share of test episodes" in ax.get_ylabel()
        assert "n = " in ax.get_title() and "test episodes per point" in ax.get_title()
        for curve, r in curves.items():
            found = summary(r, levels, curriculum)
            forgetting.setdefault(metric, {})[curve] = {int(k[2:]): v for k, v in found.items()
                                                        if k.startswith("F_") and v is not None}
    fig = forgetting_figure(forgetting, "n = 2 test episodes per point")
    ax = fig.axes[0]
    series = [(m, c) for m, by in forgetting.items() for c, fk in by.items()]
    assert len(ax.containers) == len(series) == 4, "one errorbar series per metric and curve"
    points = {tuple(cont.lines[0].get_xdata()) for cont in ax.containers}
    assert len(points) == 4, "the four series sit side by side at each k, none hidden"
    looks = {(cont.lines[0].get_color(), cont.lines[0].get_linestyle(), cont.lines[0].get_marker())
             for cont in ax.containers}
    assert len(looks) == 4
    assert "F_k" in ax.get_ylabel() and "−1 to 1" in ax.get_ylabel() and "cycle k" in ax.get_xlabel()
    assert "n = " in ax.get_title()
    assert Path(out["report_path"]).parent.joinpath("forgetting.png").stat().st_size > 0
