"""The run report: R matrices, ACC/BWT/FWT/F_k with 95% CIs, gate counts, deploys, cost, plots.

Plots need matplotlib (the ``viz`` extra); without it the Markdown report is still written and
says which plots are missing and how to get them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from swm.lifelong import store as ls
from swm.lifelong.gate import RULES
from swm.lifelong.metrics import Cell, Estimate, curriculum_for, summary, wilson
from swm.usage import total_usage

METRICS = ("completion", "pass")


def _matrix_table(r: Mapping[tuple[int, str], Cell], levels: Sequence[str], curriculum: Sequence[str]) -> str:
    cycles = sorted({c for c, _ in r})
    head = "| cycle (trained on) | " + " | ".join(levels) + " |\n|---|" + "---|" * len(levels) + "\n"
    rows = []
    for c in cycles:
        label = f"{c} ({curriculum[c - 1]})" if c >= 1 else "0 (baseline)"
        cells = []
        for j in levels:
            cell = r.get((c, j))
            if cell is None:
                cells.append("–")
                continue
            w = wilson(cell.successes, cell.n)
            cells.append(f"{cell.rate:.2f} ({cell.successes}/{cell.n}; {w.low:.2f}–{w.high:.2f})")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return head + "\n".join(rows)


def _fmt(e: Estimate | None) -> str:
    return "n/a (too few cycles)" if e is None else str(e)


def plot(r_by_metric: Mapping[str, Mapping[tuple[int, str], Cell]], levels: Sequence[str],
         forgetting: Mapping[str, Mapping[int, Estimate]], out_dir: Path) -> list[Path]:
    """Draw one PNG of R curves per metric and one of F_k; raise ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for metric, r in r_by_metric.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        cycles = sorted({c for c, _ in r})
        for j in levels:
            xs = [c for c in cycles if (c, j) in r]
            ys = [r[(c, j)].rate for c in xs]
            lo = [wilson(r[(c, j)].successes, r[(c, j)].n).low for c in xs]
            hi = [wilson(r[(c, j)].successes, r[(c, j)].n).high for c in xs]
            ax.plot(xs, ys, marker="o", label=j)
            ax.fill_between(xs, lo, hi, alpha=0.15)
        ax.set(xlabel="cycle (0 = baseline)", ylabel=f"{metric} rate", ylim=(-0.05, 1.05),
               title=f"Held-out {metric} rate per level")
        ax.set_xticks(cycles)
        ax.legend()
        path = out_dir / f"r_{metric}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    fig, ax = plt.subplots(figsize=(6, 4))
    for metric, fk in forgetting.items():
        ks = sorted(fk)
        ax.errorbar(ks, [fk[k].value for k in ks], yerr=[[fk[k].value - fk[k].low for k in ks],
                                                         [fk[k].high - fk[k].value for k in ks]],
                    marker="o", capsize=3, label=metric)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(sorted({k for fk in forgetting.values() for k in fk}) or [2])
    ax.set(xlabel="cycle k", ylabel="forgetting F_k", title="Forgetting (Chaudhry et al.)")
    ax.legend()
    path = out_dir / "forgetting.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [*paths, path]


def write_report(store: Any, plan: Mapping[str, Any], usage: Mapping[str, Any] | None = None) -> Path:
    """Compute and store the metrics, then write ``report.md`` (and plots) under ``plan.out_dir``."""
    run, levels = plan["run_id"], list(plan["levels"])
    curriculum = curriculum_for(levels, plan["cycles"])
    out_dir = Path(plan["out_dir"]).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    r_by_metric = {m: ls.matrix(store, run, m) for m in METRICS}
    sections = [f"# Lifelong run `{run}`", "",
                f"Cycles {plan['cycles']}, levels {', '.join(levels)} (curriculum: "
                f"{', '.join(f'{i + 1}:{lv}' for i, lv in enumerate(curriculum))}), families "
                f"{', '.join(plan['families'])}; {plan['episodes_per_level']} training episodes per cycle "
                f"({plan['samples_per_task']} samples per task), held-out {plan['heldout_per_cell']} task(s) per "
                f"family and level; collection policy `{plan['policy']}`, evaluation policy `{plan['eval_policy']}`, "
                f"{'self-play' if plan['self_play'] else 'fixed partners'}, update `{plan['update']}`, gating "
                f"{'on' if plan['gating'] else 'OFF (ablation)'}, replay {'on' if plan['replay'] else 'off'}, "
                f"ε = {plan['epsilon']}, max turns {plan['max_turns']}.", ""]
    forgetting: dict[str, dict[int, Estimate]] = {}
    metric_rows = []
    for metric, r in r_by_metric.items():
        if not r:
            sections += [f"## R[cycle, level] — {metric}", "", "(no evaluations recorded)", ""]
            continue
        sections += [f"## R[cycle, level] — {metric} rate (Wilson 95% CI)", "", _matrix_table(r, levels, curriculum),
                     ""]
        found = summary(r, levels, curriculum)
        forgetting[metric] = {int(k[2:]): v for k, v in found.items() if k.startswith("F_") and v is not None}
        sections += [f"### Metrics — {metric} (value [95% CI])", ""]
        sections += [f"* **{name}**: {_fmt(est)}" for name, est in found.items()]
        sections.append("")
        metric_rows += [{"run_id": run, "metric": metric, "name": name, "value": e.value if e else None,
                         "low": e.low if e else None, "high": e.high if e else None} for name, e in found.items()]
    if metric_rows:
        store.insert_all("lifelong_metrics", metric_rows, pk=("run_id", "metric", "name"), replace=True)
    counts = ls.gate_counts(store, run)
    sections += ["## Gate", "", f"Pairs built {counts.get('_total', 0)}, kept {counts.get('_kept', 0)}. Rejects by "
                 "rule (a pair failing two rules counts for each):", ""]
    sections += [f"* `{rule}`: {counts.get(rule, 0)}" for rule in RULES]
    sections += ["", "## Deploys", ""]
    if store.has_table("lifelong_deploys"):
        for row in store.rows("select * from lifelong_deploys where run_id = ? order by cycle", [run]):
            verdict = "deployed" if row["deployed"] else "refused"
            sections.append(f"* cycle {row['cycle']}: {row['candidate']} {verdict} (incumbent {row['incumbent']}); "
                            f"reasons {row['reasons']}; deltas {row['deltas']}")
    total = total_usage(usage)
    episodes = ls.count_episodes(store, run)
    sections += ["", "## Cost", "", f"Episodes recorded {episodes} (collect {ls.count_episodes(store, run, 'collect')},"
                 f" eval {ls.count_episodes(store, run, 'eval')}); model calls {total['calls']}, tokens "
                 f"{total['prompt_tokens']}+{total['completion_tokens']}, model time {total['seconds']:.1f} s, "
                 f"replies that did not fit {total['failures']}.", ""]
    try:
        paths = plot(r_by_metric, levels, forgetting, out_dir)
        sections += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in paths]
    except ImportError:
        sections += ["## Plots", "", "matplotlib is not installed, so no plots were drawn: "
                     "`pip install -e '.[viz]'` and rerun `swm learn` on the same --db and --thread-id "
                     "(it redraws from the store without new model calls)."]
    path = out_dir / "report.md"
    path.write_text("\n".join(sections) + "\n", encoding="utf-8")
    return path
