"""The lifelong report's plots: R curves per level (deployed solid, candidate dashed) and F_k per curve.

Needs matplotlib (the ``viz`` extra); `plot` raises ImportError without it and the report says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from swm.lifelong.metrics import Cell, Estimate, wilson

Curves = Mapping[str, Mapping[tuple[int, str], Cell]]  # curve -> R
STYLE = {"deployed": "-", "candidate": "--"}


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot(r_by_metric: Mapping[str, Curves], levels: Sequence[str],
         forgetting: Mapping[str, Mapping[str, Mapping[int, Estimate]]], out_dir: Path) -> list[Path]:
    """Draw one PNG of R curves per metric and one of F_k; raise ImportError without matplotlib.

    ``r_by_metric[metric][curve]`` is a curve's R matrix; ``forgetting[metric][curve][k]`` its F_k.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for metric, curves in r_by_metric.items():
        fig, ax = plt.subplots(figsize=(7, 4.5))
        colours: dict[str, Any] = {}
        cycles: set[int] = set()
        for curve, r in curves.items():
            for i, j in enumerate(levels):
                xs = sorted(c for c, lv in r if lv == j)
                if not xs:
                    continue
                cycles.update(xs)
                cells = [r[(c, j)] for c in xs]
                # levels with equal rates would hide each other: shift each a little sideways
                shifted = [x + 0.03 * (i - (len(levels) - 1) / 2) for x in xs]
                (line,) = ax.plot(shifted, [cell.rate for cell in cells], STYLE.get(curve, ":"), marker="o",
                                  color=colours.get(j), label=f"{j} ({curve})")
                colours.setdefault(j, line.get_color())
                if curve == "deployed":
                    ax.fill_between(shifted, [wilson(cell.successes, cell.n).low for cell in cells],
                                    [wilson(cell.successes, cell.n).high for cell in cells],
                                    color=colours[j], alpha=0.12)
        ax.set(xlabel="cycle (0 = baseline)", ylabel=f"{metric} rate (test split)", ylim=(-0.05, 1.05),
               title=f"Test-split {metric} rate per level: deployed (band: 95% CI) vs candidate")
        ax.set_xticks(sorted(cycles) or [0])
        ax.legend(fontsize=7)
        paths.append(_save(fig, out_dir / f"r_{metric}.png"))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ticks: set[int] = set()
    for metric, by_curve in forgetting.items():
        for curve, fk in by_curve.items():
            ks = sorted(fk)
            ticks.update(ks)
            ax.errorbar(ks, [fk[k].value for k in ks], yerr=[[fk[k].value - fk[k].low for k in ks],
                                                             [fk[k].high - fk[k].value for k in ks]],
                        fmt=STYLE.get(curve, ":"), marker="o", capsize=3, label=f"{metric} ({curve})")
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(sorted(ticks) or [2])
    ax.set(xlabel="cycle k", ylabel="forgetting F_k", title="Forgetting (Chaudhry et al.), per curve")
    if ticks:  # F_k exists from cycle 2 on
        ax.legend(fontsize=7)
    return [*paths, _save(fig, out_dir / "forgetting.png")]
