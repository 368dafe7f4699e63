"""Aggregate scored rows into the benchmark table, and write it as Markdown, CSV and JSON."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from swm.stats import bounded_mean_interval, wilson_interval
from swm.tom import fantom
from swm.tom.confaide import confaide_scores as score_confaide_rows
from swm.tom.confaide import markdown_rows as confaide_rows
from swm.tom.items import BENCHMARKS
from swm.tom.rules import source_line

TEST_DOUBLES = ("fake@", "<injected")  # model specs of swm.testing's doubles: no reference number applies


def data_line(benchmark: str) -> str:
    """Return the report's licence and contamination line for a benchmark's data (its row's ``licence`` and
    ``public``); the simulator (no row) generates its stories from the seed."""
    row = BENCHMARKS.get(benchmark)
    if row is None:
        return "swm's simulator, stories generated from the seed: no licence terms, never seen in training"
    if row.public is None:
        return f"{row.licence}; contamination: generated fresh, never public"
    return (f"{row.licence}; contamination: {row.public}, so a model trained on web text since may have seen its "
            "items and answers: read its accuracy as an upper bound on what it infers")


SUMMARY_COLUMNS = ["mode", "qtype", "n", "acc", "ci_low", "ci_high", "exact", "loose", "strict", "hedged",
                   "reasoning_truncated", "calls_per_q",
                   "parse_calls_per_q", "qa_calls_per_q", "tokens_per_q", "distinct_stories", "parses_from_cache",
                   "answers_on_failed_parses", "answers_on_failed_parses_rate", "answers_without_state",
                   "answer_errors", "model_seconds_per_q", "failed"]
# the social states (`swm.graph_state.SocialStateUse`) of an S3AP-mode answer that no parse passing its check stood
# on: the best of attempts that each failed it, or no parse at all (answered from the story alone)
FAILED_PARSE_STATES = ("failed check", "none")


def _summarise(rows: list[dict[str, Any]], mode: str, qtype: str) -> dict[str, Any]:
    n = len(rows)
    f1_only = bool(rows) and all(r["kind"] == "fantom_fact" for r in rows)
    if f1_only:
        values = [float(r["value"]) for r in rows]
        acc = sum(values) / n
        low, high = bounded_mean_interval(values)
    else:
        correct = sum(int(r["correct"]) for r in rows)
        acc = correct / n if n else 0.0
        low, high = wilson_interval(correct, n)
    parse_rows = [r for r in rows if r["mode"] in ("s3ap", "s3ap_only")]
    on_failed = sum(1 for r in parse_rows if r.get("social_state") in FAILED_PARSE_STATES)
    return {
        "mode": mode, "qtype": qtype, "n": n, "acc": round(acc, 4), "ci_low": round(low, 4), "ci_high": round(high, 4),
        "exact": round(sum(int(r["exact"]) for r in rows) / n, 4) if n else 0.0,
        "loose": round(sum(int(r["loose"]) for r in rows) / n, 4) if n else 0.0,
        "strict": round(sum(int(r.get("strict") or 0) for r in rows) / n, 4) if n else 0.0,
        "hedged": sum(int(r.get("hedged") or 0) for r in rows),
        "reasoning_truncated": sum(int(r.get("reasoning_truncated") or 0) for r in rows),
        "calls_per_q": round(sum(r["calls"] for r in rows) / n, 3) if n else 0.0,
        "parse_calls_per_q": round(sum(r["parse_calls"] for r in rows) / n, 3) if n else 0.0,
        "qa_calls_per_q": round(sum(r["qa_calls"] for r in rows) / n, 3) if n else 0.0,
        "tokens_per_q": round(sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows) / n, 1) if n else 0.0,
        # calls whose server sent no usable token counts: their tokens are unknown, not in tokens_per_q
        "calls_without_usage": sum(int(r.get("unknown_usage") or 0) for r in rows),
        "distinct_stories": len({r["story_hash"] for r in rows if r.get("story_hash")}),
        "parses_from_cache": sum(int(r["parse_cached"]) for r in parse_rows),
        # None in a mode that parses nothing; rows stored before the state was recorded count in neither
        "answers_on_failed_parses": on_failed if parse_rows else None,
        "answers_on_failed_parses_rate": round(on_failed / len(parse_rows), 4) if parse_rows else None,
        "answers_without_state": sum(1 for r in parse_rows if r.get("social_state") == "none") if parse_rows else None,
        "social_state_unknown": sum(1 for r in parse_rows if not r.get("social_state")),
        "answer_errors": sum(1 for r in rows if r.get("answer_error")),
        "model_seconds_per_q": round(sum(float(r["model_seconds"]) for r in rows) / n, 2) if n else 0.0,
    }


def summarise(rows: list[dict[str, Any]], modes: Iterable[str]) -> dict[str, Any]:
    """Return the per-mode and per-(mode, question type) tables, and FANToM's and ConfAIde's own metrics."""
    overall: list[dict[str, Any]] = []
    by_type: list[dict[str, Any]] = []
    fantom_sets: dict[str, dict[str, Any]] = {}
    confaide_scores: dict[str, dict[str, Any]] = {}
    for mode in modes:
        # an item whose model call failed after its retries has no answer to score: counted apart
        failed = sum(1 for r in rows if r["mode"] == mode and r.get("status") == "failed")
        mode_rows = [r for r in rows if r["mode"] == mode and r.get("status") != "failed"]
        if not mode_rows:
            if failed:
                overall.append(_summarise([], mode, "all") | {"failed": failed})
            continue
        scored = [r for r in mode_rows if r["kind"] != "fantom_fact"] or mode_rows
        overall.append(_summarise(scored, mode, "all") | {
            # cost columns count every question, FANToM's fact questions included
            k: v for k, v in _summarise(mode_rows, mode, "all").items()
            if k in ("calls_per_q", "parse_calls_per_q", "qa_calls_per_q", "tokens_per_q", "distinct_stories",
                     "parses_from_cache", "answers_on_failed_parses", "answers_on_failed_parses_rate",
                     "answers_without_state", "social_state_unknown", "model_seconds_per_q")} | {"failed": failed})
        for qtype in sorted({r["qtype"] for r in mode_rows}):
            by_type.append(_summarise([r for r in mode_rows if r["qtype"] == qtype], mode, qtype))
        if any(r["kind"].startswith("fantom") for r in mode_rows):
            fantom_sets[mode] = {t: fantom.fantom_scores(mode_rows, t) for t in ("inaccessible", "accessible")}
            fantom_sets[f"{mode} (swm-lenient)"] = {t: fantom.fantom_scores(mode_rows, t, reading="swm-lenient")
                                                    for t in ("inaccessible", "accessible")}
        if any(r["kind"].startswith("confaide") for r in mode_rows):
            confaide_scores[mode] = score_confaide_rows(mode_rows)
    return {"overall": overall, "by_type": by_type, "fantom_sets": fantom_sets, "confaide": confaide_scores,
            "readings": readings(rows, modes)}


def readings(rows: list[dict[str, Any]], modes: Iterable[str]) -> list[dict[str, Any]]:
    """Per mode: the headline rule's accuracy and each named variant's, on the same scored answers.

    FANToM's fact questions (token F1) are left out, as in the headline accuracy.
    """
    out = []
    for mode in modes:
        scored = [r for r in rows if r["mode"] == mode and r.get("status") != "failed" and r["kind"] != "fantom_fact"]
        if not scored:
            continue
        rule = ", ".join(sorted({str(r.get("rule") or "swm") for r in scored}))
        entry = {"mode": mode, "reading": f"{rule} (headline)", "n": len(scored),
                 "acc": sum(int(r["correct"]) for r in scored) / len(scored)}
        out.append(entry)
        names = sorted({k for r in scored for k in _variants(r) if ":" not in k})
        for name in names:
            verdicts = [_variants(r)[name] for r in scored if name in _variants(r)]
            out.append({"mode": mode, "reading": name, "n": len(verdicts), "acc": sum(verdicts) / len(verdicts)})
    return out


def _variants(row: dict[str, Any]) -> dict[str, int]:
    value = row.get("variants") or {}
    return json.loads(value) if isinstance(value, str) else dict(value)


def markdown(summary: dict[str, Any], benchmark: str, header: dict[str, Any]) -> str:
    """Render the summary as the Markdown report: the header (with where the scorer comes from and the data's
    licence and contamination), the tables, and the paper's Table 1 beside them only for a real model."""
    lines = [f"# {benchmark}: theory-of-mind QA", ""]
    lines += [f"- {k}: {v}" for k, v in header.items()]
    lines += [f"- official scorer: {source_line(benchmark)}", f"- data licence: {data_line(benchmark)}"]
    if summary.get("fantom_sets"):
        lines += ["", "FANToM's own metrics (the headline is **All**, set-level: a question set counts only when "
                      "every belief-choice, list and yes/no question in it is right; 95% Wilson interval over sets). "
                      "Target `inaccessible` is FANToM's score, `accessible` its control task. All* also needs "
                      "the free-form belief questions, which are not run (FANToM scores them by cosine similarity "
                      "under a sentence embedder swm does not ship), so it is n/a rather than a copy of All.", ""]
        lines += fantom.markdown_rows(summary["fantom_sets"])
    if summary.get("confaide"):
        lines += [""] + confaide_rows(summary["confaide"])
    lines += _per_question(summary)
    if summary.get("readings"):
        lines += ["", "Scorer readings of the same answers (the headline rule first; the others are named variants, "
                      "see docs/protocols.md):", "", "| mode | reading | n | acc |", "|---|---|---|---|"]
        lines += [f"| {r['mode']} | {r['reading']} | {r['n']} | {r['acc']:.3f} |" for r in summary["readings"]]
    lines += ["", "Per question type:", "", "| mode | question type | n | acc | 95% CI |", "|---|---|---|---|---|"]
    for r in summary["by_type"]:
        lines.append(f"| {r['mode']} | {r['qtype']} | {r['n']} | {r['acc']:.3f} | "
                     f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] |")
    row = BENCHMARKS.get(benchmark)
    reference = row.paper if row is not None else None
    if reference and not any(double in str(header.get("models", "")) for double in TEST_DOUBLES):
        metric = " (FANToM: compare with All above)" if benchmark == "fantom" else ""
        lines += ["", f"Paper Table 1 reference (GPT-4o, different data sample and model){metric}: "
                      f"CoT {reference[0]:.3f} → S3AP {reference[1]:.3f}."]
    lines += ["", "acc: per question, by the benchmark's headline rule (ToMi/ParaToMi: the gold location is a "
                  "substring of the answer, as the S3AP repository scores it; Hi-ToM/MMToM-QA: the answer is the "
                  "option letter, as there; FANToM and ConfAIde: their official evaluators' per-item rules, FANToM's "
                  "fact questions excluded). 95% CI: Wilson score interval (FANToM fact questions, scored by token F1: "
                  "percentile bootstrap of the mean, Wilson's interval of the summed F1 when every F1 is "
                  "equal). exact: normalised exact match (options: the headline verdict). "
                  "gold-in-answer: swm's whole-word, normalised reading (options: swm's lenient option reading). "
                  "strict (ToMi/ParaToMi): the gold named and no other candidate location of the story; hedged: "
                  "answers right by the whole-word reading and wrong by the strict one. reasoning truncated: replies "
                  "whose reasoning ran past 1,000 characters and was cut (the answer kept). calls, tokens: every model "
                  "call made for the question, parse calls included (a cached parse costs none). on failed parses "
                  "(S3AP modes): answers that stood on no parse passing its check, as a count and a share of the "
                  "mode's answers: the best of attempts that each failed the check (social state `failed check`), "
                  "or no usable parse at all (`none`, answered from the story alone; how many in brackets). "
                  "failed: questions whose model call still failed after its retries (HTTP 5xx/429, timeout, "
                  "dropped connection): not scored; rerun with the same --thread-id to retry only them."]
    return "\n".join(lines) + "\n"


def _per_question(summary: dict[str, Any]) -> list[str]:
    """The per-question table (one row a mode) and its notes on answers of unknown state and calls without usage."""
    per_question = "Per question" + (" (a diagnostic, not the benchmark's own score)"
                                     if summary.get("fantom_sets") or summary.get("confaide") else "") + ":"
    lines = ["", per_question, "",
              "| mode | n | acc | 95% CI | exact | gold-in-answer | strict | hedged | reasoning truncated | calls/q | "
              "parse/q | QA/q | tokens/q | stories | parses from cache | on failed parses | answer errors | failed |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["overall"]:
        lines.append(f"| {r['mode']} | {r['n']} | {r['acc']:.3f} | [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
                     f"{r['exact']:.3f} | {r['loose']:.3f} | {r['strict']:.3f} | {r['hedged']} | "
                     f"{r['reasoning_truncated']} | {r['calls_per_q']:.2f} | {r['parse_calls_per_q']:.2f} | "
                     f"{r['qa_calls_per_q']:.2f} | {r['tokens_per_q']:.0f} | {r['distinct_stories']} | "
                     f"{r['parses_from_cache']} | {_on_failed_parses(r)} | {r['answer_errors']} | "
                     f"{r.get('failed', 0)} |")
    unknown_states = sum(r.get("social_state_unknown") or 0 for r in summary["overall"])
    if unknown_states:
        lines += ["", f"{unknown_states} S3AP-mode answer(s) were stored before the social state they stood on was "
                      "recorded: counted in neither side of `on failed parses`."]
    unknown = sum(r.get("calls_without_usage", 0) for r in summary["overall"])
    if unknown:
        lines += ["", f"{unknown} call(s) came back without a usable token count from the server (missing or "
                      "negative `usage`): counted as 0 tokens, so tokens/q is a lower bound."]
    return lines


def _on_failed_parses(row: dict[str, Any]) -> str:
    """Render a mode's answers on failed parses: ``count (share)``, with those without any state; ``-`` when the
    mode parses nothing."""
    count, rate = row.get("answers_on_failed_parses"), row.get("answers_on_failed_parses_rate")
    if count is None or rate is None:
        return "-"
    without = row.get("answers_without_state") or 0
    return f"{count} ({rate:.3f})" + (f" [{without} none]" if without else "")


def csv_text(summary: dict[str, Any]) -> str:
    """Render both tables as one CSV (``qtype`` = ``all`` for the per-mode rows)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=SUMMARY_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in summary["overall"] + summary["by_type"]:
        writer.writerow(row)
    return buffer.getvalue()


def write_reports(out_dir: str | Path, benchmark: str, summary: dict[str, Any], header: dict[str, Any],
                  rows: list[dict[str, Any]]) -> dict[str, Path]:
    """Write ``tom_<benchmark>.md``, ``.csv`` and ``.json`` (summary, header and every scored row)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {ext: out / f"tom_{benchmark}.{ext}" for ext in ("md", "csv", "json")}
    paths["md"].write_text(markdown(summary, benchmark, header), encoding="utf-8")
    paths["csv"].write_text(csv_text(summary), encoding="utf-8")
    paths["json"].write_text(json.dumps({"benchmark": benchmark, "header": header, "summary": summary,
                                         "rows": rows}, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    return paths
