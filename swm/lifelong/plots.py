"""The lifelong report's plots: R curves per level (deployed solid, candidate dashed) and F_k per curve.

Each series has its own look: a colour per level (or metric), a line style and a marker per curve
(deployed: solid, filled circles; candidate: dashed, hollow squares), and a small sideways shift,
so two series with equal values stay visible side by side. Axes say what they count and in what
unit, and each figure says how many test episodes a point rests on. Needs matplotlib (the ``viz``
extra); `plot` raises ImportError without it and the report says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from swm.lifelong.metrics import Cell, Estimate, wilson

Curves = Mapping[str, Mapping[tuple[int, str], Cell]]  # curve -> R
Forgetting = Mapping[str, Mapping[str, Mapping[int, Estimate]]]  # metric -> curve -> k -> F_k
STYLE = {"deployed": "-", "candidate": "--"}
MARKER = {"deployed": "o", "candidate": "s"}
FILLED = {"deployed": True, "candidate": False}


def _pyplot() -> Any:
    import matplotlib  # optional: the [viz] extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional: the [viz] extra

    return plt


def _episodes(cells: Sequence[Cell]) -> str:
    ns = sorted({c.n for c in cells})
    if not ns:
        return "n = 0"
    return f"n = {ns[0]} test episodes per point" if len(ns) == 1 else f"n = {ns[0]}–{ns[-1]} test episodes per point"


def _series(ax: Any, xs: list[float], ys: list[float], curve: str, colour: object, label: str) -> Any:
    marker = MARKER.get(curve, "^")
    (line,) = ax.plot(xs, ys, STYLE.get(curve, ":"), marker=marker, color=colour, label=label,
                      markerfacecolor=colour if FILLED.get(curve, True) else "none", markersize=6)
    return line


def r_figure(metric: str, curves: Curves, levels: Sequence[str]) -> Any:
    """Return the figure of one metric's R curves: per level, the deployed and candidate rates by cycle."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    cycles: set[int] = set()
    cells_seen: list[Cell] = []
    n_series = max(1, len(levels) * len(curves))
    for k, (curve, r) in enumerate(curves.items()):
        for i, j in enumerate(levels):
            xs = sorted(c for c, lv in r if lv == j)
            if not xs:
                continue
            cycles.update(xs)
            cells = [r[(c, j)] for c in xs]
            cells_seen += cells
            slot = i * len(curves) + k  # every series its own small shift: equal values stay visible
            shifted = [x + 0.05 * (slot - (n_series - 1) / 2) for x in xs]
            colour = palette[i % len(palette)]
            _series(ax, shifted, [cell.rate for cell in cells], curve, colour, f"{j} ({curve})")
            if curve == "deployed":
                ax.fill_between(shifted, [wilson(cell.successes, cell.n).low for cell in cells],
                                [wilson(cell.successes, cell.n).high for cell in cells], color=colour, alpha=0.12)
    ax.set(xlabel="cycle (0 = the initial policy)", ylabel=f"{metric} rate (share of test episodes, 0–1)",
           ylim=(-0.05, 1.05), title=f"Test-split {metric} rate per level: deployed (band: 95% Wilson CI) "
                                     f"vs candidate\n{_episodes(cells_seen)}")
    ax.set_xticks(sorted(cycles) or [0])
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def forgetting_figure(forgetting: Forgetting, n_label: str) -> Any:
    """Return the figure of F_k by cycle: one series per metric and curve, with 95% intervals."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series = [(m, c, fk) for m, by_curve in forgetting.items() for c, fk in by_curve.items()]
    ticks: set[int] = set()
    for slot, (metric, curve, fk) in enumerate(series):
        ks = sorted(fk)
        ticks.update(ks)
        xs = [k + 0.08 * (slot - (len(series) - 1) / 2) for k in ks]
        colour = palette[list(forgetting).index(metric) % len(palette)]
        ax.errorbar(xs, [fk[k].value for k in ks], yerr=[[fk[k].value - fk[k].low for k in ks],
                                                         [fk[k].high - fk[k].value for k in ks]],
                    fmt=STYLE.get(curve, ":"), marker=MARKER.get(curve, "^"), color=colour, capsize=3,
                    markerfacecolor=colour if FILLED.get(curve, True) else "none", label=f"{metric} ({curve})")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(sorted(ticks) or [2])
    ax.set(xlabel="cycle k (F_k exists from cycle 2)", ylabel="forgetting F_k (drop in rate, −1 to 1)",
           ylim=(-1.05, 1.05), title=f"Forgetting (Chaudhry et al.) per metric and curve, 95% CI\n{n_label}")
    if ticks:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    return path


def plot(r_by_metric: Mapping[str, Curves], levels: Sequence[str], forgetting: Forgetting,
         out_dir: Path) -> list[Path]:
    """Draw one PNG of R curves per metric and one of F_k; raise ImportError without matplotlib.

    ``r_by_metric[metric][curve]`` is a curve's R matrix; ``forgetting[metric][curve][k]`` its F_k.
    """
    paths = [_save(r_figure(metric, curves, levels), out_dir / f"r_{metric}.png")
             for metric, curves in r_by_metric.items()]
    cells = [cell for curves in r_by_metric.values() for r in curves.values() for cell in r.values()]
    return [*paths, _save(forgetting_figure(forgetting, _episodes(cells)), out_dir / "forgetting.png")]
