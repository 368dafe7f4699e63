"""The run report: both curves' R matrices and ACC/BWT/FWT/F_k with 95% CIs, policies, deploys, cost, plots.

The protocol it reports: the deploy gate chose on the *dev* split; R is filled from the *test*
split, which chose nothing. The *deployed* curve is the policy in service after each cycle, the
*candidate* curve the policy each cycle trained (refused ones included), each row from its own
policy's episodes. Plots need matplotlib (the ``viz`` extra); without it the Markdown report is
still written and says which plots are missing and how to get them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from swm.checkpoints.store import StoreRecords
from swm.credentials import redact_text
from swm.lifelong import store as ls
from swm.lifelong.gate import RULES
from swm.lifelong.metrics import Cell, Estimate, curriculum_for, summary, wilson
from swm.lifelong.plan import LifelongPlan
from swm.lifelong.plots import plot
from swm.serving import draws
from swm.usage import add_stats, empty_stats, total_usage

METRICS = ("completion", "pass")
CURVES = ("deployed", "candidate")


def _matrix_table(r: Mapping[tuple[int, str], Cell], levels: Sequence[str], curriculum: Sequence[str],
                  policies: Mapping[int, tuple[str, int | None]]) -> str:
    cycles = sorted({c for c, _ in r})
    head = ("| cycle (trained on) | policy (test played in cycle) | " + " | ".join(levels) + " |\n|---|---|"
            + "---|" * len(levels) + "\n")
    rows = []
    for c in cycles:
        label = f"{c} ({curriculum[c - 1]})" if c >= 1 else "0 (baseline)"
        version, played = policies.get(c, ("?", None))
        cells = [f"{version} ({'–' if played is None else played})"]
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


def served_as(policy: Mapping[str, object], played: Sequence[str], fallback: str) -> str:
    """Name the model spec a policy was served as: its own record, else what its episodes recorded."""
    if policy.get("served_as"):
        return str(policy["served_as"])
    return ", ".join(played) if played else fallback


def policy_listing(store: StoreRecords, run: str, agent_spec: str) -> list[dict[str, Any]]:
    """List every policy of a run: version, kind, cycle, parent, deployed, adapter path, spec served as."""
    played = ls.agent_specs(store, run)
    return [{"version": p["version"], "kind": p["kind"], "cycle": p["cycle"], "parent": p.get("parent"),
             "deployed": True if p["version"] == "p0" else p["deployed"],
             "adapter": p.get("adapter") or p.get("checkpoint"), "adapter_gguf": p.get("adapter_gguf"),
             "served_as": served_as(p, played.get(p["version"], []), agent_spec),
             "pairs_used": p.get("pairs_used", 0), "train": p.get("train")} for p in ls.policies(store, run)]


def _training(train: Mapping[str, Any] | None) -> str:
    """Summarise a policy's training run in one table cell."""
    if not train:
        return "–"
    loss = train.get("loss") or []
    curve = f", loss {loss[0]:.3f}→{loss[-1]:.3f}" if loss else ""
    return (f"{train.get('method')}: {train.get('steps', 0)} steps{curve}, {train.get('seconds', 0):.0f} s, "
            f"{train.get('tokens_per_s', 0):.0f} tok/s")


def _policies_section(store: StoreRecords, run: str, agent_spec: str) -> list[str]:
    rows = ["## Policies", "", "| version | cycle | kind | parent | deployed | served as | adapter | pairs used | "
            "training |", "|---|---|---|---|---|---|---|---|---|"]
    for p in policy_listing(store, run, agent_spec):
        deployed = {None: "–", True: "yes", False: "refused"}[p["deployed"]]
        rows.append(f"| {p['version']} | {p['cycle']} | {p['kind']} | {p['parent'] or '–'} | {deployed} | "
                    f"`{p['served_as']}` | {p['adapter'] or '–'} | {p['pairs_used']} | {_training(p['train'])} |")
    return [*rows, ""]


def _played_section(store: StoreRecords, run: str, agent_spec: str) -> list[str]:
    """Who collected each cycle's training episodes, served as which spec, and what came of the candidate."""
    spec_of = {p["version"]: p["served_as"] for p in policy_listing(store, run, agent_spec)}
    rows = ["## Who played each cycle", "", "| cycle | collected by | served as | candidate | dev gate |",
            "|---|---|---|---|---|"]
    if store.has_table("lifelong_deploys"):
        for d in store.rows("select * from lifelong_deploys where run_id = ? order by cycle", [run]):
            player = d["incumbent"]
            verdict = "baseline" if d["cycle"] == 0 else ("deployed" if d["deployed"] else f"refused {d['reasons']}")
            rows.append(f"| {d['cycle']} | {player if d['cycle'] else '– (evaluation only)'} | "
                        f"`{spec_of.get(player, agent_spec)}` | {d['candidate']} | {verdict} |")
    return [*rows, ""]


def _cost_section(store: StoreRecords, run: str, plan: LifelongPlan, usage: Mapping[str, Any] | None) -> list[str]:
    played = ls.episodes_played(store, run)
    splits = ls.split_ids(store, run)
    n_dev, n_test = len(splits.get("dev", [])), len(splits.get("test", []))
    rows = ["## Cost", "", "Evaluation episodes are cached per policy and task: a policy plays each dev and test "
            "task once, and a later cycle reuses the result, so a cycle plays only its candidate's "
            f"{n_dev} dev + {n_test} test episodes (without the cache, incumbent and candidate on both splits: "
            f"{2 * (n_dev + n_test)}). Episodes (model calls) per cycle:", "",
            "| cycle | collect | dev played | test played | evaluations reused | calls |", "|---|---|---|---|---|---|"]
    for c in range(plan.cycles + 1):
        counts = [played.get((c, ph), (0, 0)) for ph in ("collect", "dev", "test")]
        if not sum(n for n, _ in counts):
            continue
        calls = [k for _, k in counts]
        shown = [f"{n} ({'–' if k is None else k})" for n, k in counts]
        needed = n_dev + n_test if c == 0 else 2 * (n_dev + n_test)
        rows.append(f"| {c} | {' | '.join(shown)} | {max(needed - counts[1][0] - counts[2][0], 0)} | "
                    f"{'–' if None in calls else sum(k or 0 for k in calls)} |")
    by_phase: dict[str, Any] = {}
    for key, stats in (usage or {}).items():
        phase = key.split("/")[0] if "/" in key else key
        by_phase[phase] = add_stats(by_phase.get(phase, empty_stats()), stats)
    total = total_usage(usage)
    rows += ["", f"Episodes recorded {ls.count_episodes(store, run)}; model calls {total['calls']} ("
             + ", ".join(f"{ph} {st['calls']}" for ph, st in sorted(by_phase.items())) + f"), tokens "
             f"{total['prompt_tokens']}+{total['completion_tokens']}, model time {total['seconds']:.1f} s, "
             f"replies that did not fit {total['failures']}"
             + (f", calls whose server sent no usable token count (not in the tokens) {total['unknown_usage']}"
                if total["unknown_usage"] else "") + ".", ""]
    failed = ls.failures(store, run)
    if failed:
        rows += [f"Episodes that failed after their retries and are in no matrix or pair: {len(failed)}.", ""]
        rows += [f"* cycle {r['cycle']} {r['phase']} `{r['episode_id']}`: {r['error']}" for r in failed[:20]]
        rows += [f"* … and {len(failed) - 20} more" if len(failed) > 20 else "", ""]
    return rows


def _shift_section(store: StoreRecords, run: str, plan: LifelongPlan) -> list[str]:
    """Render the shifted test cells (``eval_shifts``) per policy, level, family and variant."""
    if not plan.eval_shifts or not store.has_table("lifelong_episodes"):
        return []
    cells: dict[tuple[str, str], list[int]] = {}
    for r in store.rows("select policy_version, task_id, level, family, passed from lifelong_episodes where "
                        "run_id = ? and phase = 'shift'", [run]):
        cell = f"{r['level']} / {r['family']} / {r['task_id'].rsplit(':', 1)[-1]}"
        cells.setdefault((r["policy_version"], cell), []).append(int(r["passed"]))
    return ["## Shifted test cells (in neither R nor the deploy gate)", "",
            f"Shifts {', '.join(plan.eval_shifts)}: test-split tasks drawn from a name pool no split uses "
            "(`names=unseen`) or with 8-10 friends a list (`friends=8-10`).", "",
            "| policy | level / family / variant | passed [Wilson 95%] |", "|---|---|---|",
            *(f"| {policy} | {cell} | {sum(v)}/{len(v)} = {wilson(sum(v), len(v))} |"
              for (policy, cell), v in sorted(cells.items())), ""]


def heldout_results(store: StoreRecords, run: str) -> dict[str, Any]:
    """Return the test split's results as ``swm learn --json`` prints them, per metric and curve: ``R`` (cycle ->
    level or level/family column -> successes, n, rate and its Wilson 95% interval, and the policy counted) and
    ``metrics`` (ACC, BWT, FWT, F_k with their intervals, as `write_report` stored them)."""
    out: dict[str, Any] = {}
    stored = list(store.rows("select * from lifelong_metrics where run_id = ?", [run])) \
        if store.has_table("lifelong_metrics") else []
    for metric in METRICS:
        for curve in CURVES:
            r = ls.matrix(store, run, metric, curve)
            if not r:
                continue
            cells: dict[str, dict[str, Any]] = {}
            for (cycle, column), cell in sorted(r.items()):
                w = wilson(cell.successes, cell.n)
                cells.setdefault(str(cycle), {})[column] = {
                    "successes": cell.successes, "n": cell.n, "rate": w.value if cell.n else None, "low": w.low,
                    "high": w.high, "policy": (cell.source or "").split("/test/")[0]}
            out.setdefault(metric, {})[curve] = {
                "R": cells, "metrics": {row["name"]: {"value": row["value"], "low": row["low"], "high": row["high"]}
                                        for row in stored if row["metric"] == metric and row["curve"] == curve}}
    return out


def write_report(store: StoreRecords, plan: LifelongPlan, usage: Mapping[str, Any] | None = None,
                 agent_spec: str = "?", serving: Mapping[str, Any] | None = None) -> Path:
    """Compute and store both curves' metrics, then write ``report.md`` (and plots) under ``plan.out_dir``.

    ``agent_spec`` names the agent model when neither a policy nor its episodes record one;
    ``serving`` describes the embedded engine the run sampled on (engine, slots, concurrency).
    """
    run, levels = plan.run_id, list(plan.levels)
    curriculum = curriculum_for(levels, plan.cycles)
    out_dir = Path(plan.out_dir).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = _header_section(store, plan, levels, curriculum)
    sections += _policies_section(store, run, agent_spec) + _played_section(store, run, agent_spec)
    matrices, r_by_metric, forgetting = _matrix_sections(store, run, levels, curriculum)
    sections += matrices
    sections += _shift_section(store, run, plan)
    counts = ls.gate_counts(store, run)
    sections += ["## Pair gate", "", f"Pairs built {counts.get('_total', 0)}, kept {counts.get('_kept', 0)}. "
                 "Rejects by rule (a pair failing two rules counts for each):", ""]
    sections += [f"* `{rule}`: {counts.get(rule, 0)}" for rule in RULES]
    sections += ["", "## Deploys (dev split: candidate − incumbent per level)", ""]
    if store.has_table("lifelong_deploys"):
        for row in store.rows("select * from lifelong_deploys where run_id = ? order by cycle", [run]):
            verdict = "deployed" if row["deployed"] else "refused"
            sections.append(f"* cycle {row['cycle']}: {row['candidate']} {verdict} (incumbent {row['incumbent']}); "
                            f"reasons {row['reasons']}; deltas {row['deltas']}")
    sections += ["", *_cost_section(store, run, plan, usage)]
    if serving:
        sections += [f"Sampled on the embedded engine {serving.get('engine')} with {serving.get('slots')} slot(s) "
                     f"and {serving.get('concurrency')} episode(s) in flight"
                     + (f"; seeded moves drawn {draws.describe(serving['draw'])}" if serving.get("draw") else "")
                     + " (`swm.serving.draws`).", ""]
    try:
        paths = plot(r_by_metric, levels, forgetting, out_dir)
        sections += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in paths]
    except ImportError:
        sections += ["## Plots", "", "matplotlib is not installed, so no plots were drawn: "
                     "`pip install -e '.[viz]'` and rerun `swm learn` on the same --db and --thread-id "
                     "(it redraws from the store without new model calls)."]
    path = out_dir / "report.md"
    path.write_text(redact_text("\n".join(sections) + "\n"), encoding="utf-8")
    return path


def _header_section(store: StoreRecords, plan: LifelongPlan, levels: Sequence[str],
                    curriculum: Sequence[str]) -> list[str]:
    """The report's title, the run's settings and its evaluation protocol."""
    run = plan.run_id
    splits = ls.split_ids(store, run)
    return [f"# Lifelong run `{run}`", "",
            f"Cycles {plan.cycles}, levels {', '.join(levels)} (curriculum: "
            f"{', '.join(f'{i + 1}:{lv}' for i, lv in enumerate(curriculum))}), families "
            f"{', '.join(plan.families)}; {plan.episodes_per_level} training episodes per cycle "
            f"({plan.samples_per_task} samples per task); acting strategy `{plan.act_strategy}` in "
            f"training, `{plan.eval_act_strategy}` in evaluations, "
            f"{'self-play' if plan.self_play else 'fixed partners'}, update "
            f"`{plan.update}`, gating {'on' if plan.gating else 'OFF (ablation)'}, names "
            f"`{plan.names}`, kept-sample balance "
            f"{f'on (share {plan.balance_share})' if plan.balance else 'off'}, replay "
            f"{'on' if plan.replay else 'off'}, ε = {plan.epsilon}, max turns {plan.max_turns}.", "",
            "## Evaluation protocol", "",
            f"The deploy gate chooses on the **dev** split ({len(splits.get('dev', []))} tasks, "
            f"{plan.dev_per_cell} per family and level); R is filled from the **test** split "
            f"({len(splits.get('test', []))} tasks, {plan.heldout_per_cell} per family and level), which "
            "chooses nothing. Every candidate, deployed or refused, is evaluated on both. The *deployed* curve "
            "is the policy in service after each cycle; the *candidate* curve is the policy each cycle "
            "trained. Each row counts its own policy's test episodes (the policy column names them), so a "
            "refused candidate's loss shows in the candidate curve, and the deployed curve only stays flat "
            "where the same policy stayed in service. Task ids per split: table `lifelong_splits`.", ""]


Matrices = dict[str, dict[str, dict[tuple[int, str], Cell]]]  # metric → curve → R[cycle, level]
Forgetting = dict[str, dict[str, dict[int, Estimate]]]  # metric → curve → forgetting per level


def _matrix_sections(store: StoreRecords, run: str, levels: Sequence[str],
                     curriculum: Sequence[str]) -> tuple[list[str], Matrices, Forgetting]:
    """R[cycle, level] and its metrics per metric and curve (the metrics also stored in ``lifelong_metrics``);
    with the matrices and each curve's forgetting per level, which the plots draw."""
    sections: list[str] = []
    r_by_metric: Matrices = {}
    forgetting: Forgetting = {}
    metric_rows = []
    for metric in METRICS:
        for curve in CURVES:
            r = ls.matrix(store, run, metric, curve)
            title = f"## R[cycle, level] — {curve} curve — {metric} rate on the test split (Wilson 95% CI)"
            if not r:
                sections += [title, "", "(no evaluations recorded)", ""]
                continue
            r_by_metric.setdefault(metric, {})[curve] = r
            sections += [title, "", _matrix_table(r, levels, curriculum, ls.matrix_policies(store, run, curve)), ""]
            found = summary(r, levels, curriculum)
            forgetting.setdefault(metric, {})[curve] = {int(k[2:]): v for k, v in found.items()
                                                        if k.startswith("F_") and v is not None}
            sections += [f"### Metrics — {curve} curve, {metric} (value [95% CI])", ""]
            sections += [f"* **{name}**: {_fmt(est)}" for name, est in found.items()]
            sections.append("")
            metric_rows += [{"run_id": run, "curve": curve, "metric": metric, "name": name,
                             "value": e.value if e else None, "low": e.low if e else None,
                             "high": e.high if e else None} for name, e in found.items()]
    if metric_rows:
        store.insert_all("lifelong_metrics", metric_rows, pk=("run_id", "curve", "metric", "name"), replace=True)
    return sections, r_by_metric, forgetting
