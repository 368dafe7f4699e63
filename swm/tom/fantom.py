"""FANToM's own metrics over scored rows, as its ``eval_fantom.py`` computes them.

The headline is set-level: a question set counts only when every question of it is right.
Everything is computed per target (``inaccessible`` is FANToM's score, ``accessible`` its
control task) over the ToM questions whose ``missed_info_accessibility`` is that target:

* ``all`` (FANToM's "All", the S3AP paper's "All Question Types"): every belief multiple-choice,
  answerability list and binary, info-accessibility list and binary question of the set right;
* ``all_star`` (FANToM's "All*"): every ToM question of the set right, the free-form belief
  questions included. swm does not run the free-form belief questions (FANToM scores them by
  cosine similarity under a sentence embedder, ``all-roberta-large-v1``, which swm does not
  ship), so without scored free-form rows All* is reported as not computed rather than as a
  copy of All;
* ``belief_mc``: accuracy of the belief multiple-choice questions;
* ``answerability_all`` / ``info_accessibility_all``: every question of that family in the set
  right (list and binary); ``*_list``: accuracy of the list question; ``*_binary_f1``: the
  support-weighted F1 of the yes/no questions over the labels yes=1, no=0 and unparsable=-1
  (scikit-learn's ``f1_score(average="weighted")``, which FANToM calls through ``evaluate``);
* ``fact_f1``: mean token F1 of the fact questions (all of them, as FANToM does).

Rows are the ``tom_results`` rows: ``kind``, ``qtype``, ``group_id``, ``access``, ``correct``,
``value``, ``gold`` and ``answer``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from swm.stats import wilson_interval
from swm.tom.rules import fantom_response, fantom_yes_no_official
from swm.tom.scoring import binary_answer

ALL_KINDS = ("fantom_belief_mc", "fantom_list", "fantom_binary")
TOM_KINDS = (*ALL_KINDS, "fantom_belief_free")
_YES_NO = {"yes": 1, "no": 0, "no:long": 0}


def weighted_f1(references: Sequence[int], predictions: Sequence[int]) -> float | None:
    """Return the support-weighted F1 over every label seen (scikit-learn's ``average="weighted"``).

    Each label's F1 is weighted by how often it is the reference; a label never predicted has
    F1 0 (scikit-learn's zero_division default), so unparsable answers (-1) pull it down.
    """
    if not references:
        return None
    support = Counter(references)
    predicted = Counter(predictions)
    hits = Counter(r for r, p in zip(references, predictions, strict=True) if r == p)
    total = 0.0
    for label, count in support.items():
        precision = hits[label] / predicted[label] if predicted[label] else 0.0
        recall = hits[label] / count
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        total += count * f1
    return total / len(references)


def _sets(rows: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    sets: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        sets.setdefault(str(row.get("group_id")), []).append(row)
    return sets


def _set_rate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Share of sets whose rows are all correct, with its Wilson interval."""
    sets = _sets(rows)
    ok = sum(all(int(r["correct"]) for r in rs) for rs in sets.values())
    low, high = wilson_interval(ok, len(sets))
    return {"value": ok / len(sets) if sets else None, "n": len(sets), "ci_low": low, "ci_high": high}


def _accuracy(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = sum(int(r["correct"]) for r in rows)
    low, high = wilson_interval(ok, len(rows))
    return {"value": ok / len(rows) if rows else None, "n": len(rows), "ci_low": low, "ci_high": high}


def _binary_f1(rows: list[dict[str, Any]], reading: str) -> dict[str, Any]:
    references = [_YES_NO.get(str(r.get("gold")), -1) for r in rows]
    if reading == "swm-lenient":
        predictions = [binary_answer(r.get("answer")) for r in rows]
    else:  # eval_fantom.py: parse_response, then map_binary_answer_to_int
        predictions = [fantom_yes_no_official(fantom_response(r.get("answer"))) for r in rows]
    return {"value": weighted_f1(references, predictions), "n": len(rows)}


def as_read(rows: Iterable[dict[str, Any]], reading: str) -> list[dict[str, Any]]:
    """Return the rows with ``correct`` set to a named reading's verdict (the headline's when it has none)."""
    out = []
    for r in rows:
        variants = r.get("variants") or {}
        variants = json.loads(variants) if isinstance(variants, str) else variants
        out.append({**r, "correct": variants.get(reading, r["correct"])} if reading in variants else r)
    return out


def fantom_scores(rows: list[dict[str, Any]], target: str = "inaccessible",
                  reading: str = "fantom-official") -> dict[str, Any]:
    """Return FANToM's metrics for one target (see the module docstring), each with its ``n``.

    ``reading`` is ``fantom-official`` (the headline: FANToM's own per-item rules) or
    ``swm-lenient`` (swm's reading of the same answers, `swm.tom.rules.VARIANTS`).
    """
    rows = as_read(rows, reading) if reading != "fantom-official" else rows
    tom = [r for r in rows if r.get("kind") in TOM_KINDS and r.get("access") == target]
    family = {name: [r for r in tom if f":{name}:" in f"{r.get('qtype')}:"]
              for name in ("answerability", "info_accessibility")}
    has_free = any(r["kind"] == "fantom_belief_free" for r in tom)
    star = _set_rate(tom) if has_free else {"value": None, "n": 0, "ci_low": None, "ci_high": None,
                                            "why": "needs the free-form belief questions, which are not run"}
    facts = [float(r["value"]) for r in rows if r.get("kind") == "fantom_fact"]
    scores: dict[str, Any] = {
        "target": target, "reading": reading, "sets": len(_sets(tom)),
        "all": _set_rate([r for r in tom if r["kind"] in ALL_KINDS]), "all_star": star,
        "belief_mc": _accuracy([r for r in tom if r["kind"] == "fantom_belief_mc"]),
        "fact_f1": {"value": sum(facts) / len(facts) if facts else None, "n": len(facts)},
    }
    for name, members in family.items():
        scores[f"{name}_all"] = _set_rate(members)
        scores[f"{name}_list"] = _accuracy([r for r in members if r["kind"] == "fantom_list"])
        scores[f"{name}_binary_f1"] = _binary_f1([r for r in members if r["kind"] == "fantom_binary"], reading)
    return scores


COLUMNS = [("all", "All"), ("all_star", "All*"), ("belief_mc", "belief choice"),
           ("answerability_all", "answerab. All"), ("answerability_list", "answerab. list"),
           ("answerability_binary_f1", "answerab. y/n F1"), ("info_accessibility_all", "info-acc. All"),
           ("info_accessibility_list", "info-acc. list"), ("info_accessibility_binary_f1", "info-acc. y/n F1"),
           ("fact_f1", "fact token F1")]


def markdown_rows(by_mode: dict[str, dict[str, Any]]) -> list[str]:
    """Render one table row per (mode, target): every metric with its n, All with its 95% interval."""
    lines = ["| mode | target | sets | " + " | ".join(label for _, label in COLUMNS) + " |",
             "|---|---|---|" + "---|" * len(COLUMNS)]
    for mode, targets in by_mode.items():
        for target, s in targets.items():
            cells = []
            for key, _ in COLUMNS:
                m = s[key]
                if m["value"] is None:
                    cells.append("n/a")
                elif key == "all":
                    cells.append(f"**{m['value']:.3f}** [{m['ci_low']:.3f}, {m['ci_high']:.3f}]")
                else:
                    cells.append(f"{m['value']:.3f} (n={m['n']})")
            lines.append(f"| {mode} | {target} | {s['sets']} | " + " | ".join(cells) + " |")
    return lines
