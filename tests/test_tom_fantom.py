"""FANToM's own metrics on a hand-checked pair of question sets."""

from __future__ import annotations

from typing import Any

import pytest

from swm.tom.fantom import fantom_scores, weighted_f1
from swm.tom.report import markdown, summarise


def _row(group: str, kind: str, qtype: str, correct: int, gold: str = "", answer: str = "",
         access: str = "inaccessible") -> dict[str, Any]:
    return {"group_id": group, "kind": kind, "qtype": qtype, "correct": correct, "gold": gold, "answer": answer,
            "access": access, "value": float(correct)}


def _two_sets(with_free_form: bool) -> list[dict[str, Any]]:
    rows = [
        # set s1: every question right except one info-accessibility yes/no (gold no, said yes)
        _row("s1", "fantom_belief_mc", "tom:belief:inaccessible:multiple-choice", 1),
        _row("s1", "fantom_list", "tom:answerability:list", 1),
        _row("s1", "fantom_binary", "tom:answerability:binary", 1, "no", "no"),
        _row("s1", "fantom_binary", "tom:answerability:binary", 1, "yes", "yes"),
        _row("s1", "fantom_list", "tom:info_accessibility:list", 1),
        _row("s1", "fantom_binary", "tom:info_accessibility:binary", 0, "no", "yes, she knows"),
        # set s2: every scored question right
        _row("s2", "fantom_belief_mc", "tom:belief:inaccessible:multiple-choice", 1),
        _row("s2", "fantom_list", "tom:answerability:list", 1),
        _row("s2", "fantom_binary", "tom:answerability:binary", 1, "no", "I think no."),
        _row("s2", "fantom_list", "tom:info_accessibility:list", 1),
        _row("s2", "fantom_binary", "tom:info_accessibility:binary", 1, "no", "no"),
        # the control task (accessible) and a fact question never enter the inaccessible sets
        _row("s2", "fantom_binary", "tom:answerability:binary", 0, "yes", "no", access="accessible"),
        _row("s2", "fantom_fact", "fact", 0, access=""),
    ]
    rows[-1]["value"] = 0.4
    if with_free_form:  # s2's free-form belief answer is wrong: All keeps s2, All* drops it
        rows.append(_row("s2", "fantom_belief_free", "tom:belief:inaccessible", 0))
    return rows


def test_set_level_all_and_all_star_differ_when_a_free_form_answer_is_wrong() -> None:
    s = fantom_scores(_two_sets(with_free_form=True))
    assert s["sets"] == 2
    assert s["all"]["value"] == 0.5 and s["all"]["n"] == 2      # s1 fails on its info-accessibility yes/no
    assert s["all_star"]["value"] == 0.0                          # s2 also fails once free-form counts
    assert s["answerability_all"]["value"] == 1.0 and s["info_accessibility_all"]["value"] == 0.5
    assert s["answerability_list"]["value"] == 1.0 and s["belief_mc"]["value"] == 1.0
    assert s["answerability_binary_f1"]["value"] == pytest.approx(1.0)
    # info-accessibility yes/no: references [no, no], predictions [yes, no] -> label "no": P 1/1, R 1/2, F1 2/3
    assert s["info_accessibility_binary_f1"]["value"] == pytest.approx(2 / 3)
    assert s["fact_f1"]["value"] == pytest.approx(0.4)


def test_all_star_is_not_a_copy_of_all_without_free_form_answers() -> None:
    s = fantom_scores(_two_sets(with_free_form=False))
    assert s["all"]["value"] == 0.5 and s["all_star"]["value"] is None and "free-form" in s["all_star"]["why"]
    control = fantom_scores(_two_sets(with_free_form=False), "accessible")
    assert control["sets"] == 1 and control["all"]["value"] == 0.0


def test_weighted_f1_hand_checked() -> None:
    # references 1,1,0,0; predictions 1,0,0,-1: label 1 P=1/1 R=1/2 F1=2/3; label 0 P=1/2 R=1/2 F1=1/2;
    # weighted by support (2 and 2): (2 * 2/3 + 2 * 1/2) / 4 = 7/12
    assert weighted_f1([1, 1, 0, 0], [1, 0, 0, -1]) == pytest.approx(7 / 12)
    # references 1,0,0; predictions 1,1,0: label 1 P=1/2 R=1 F1=2/3 (weight 1); label 0 P=1 R=1/2 F1=2/3 (weight 2)
    assert weighted_f1([1, 0, 0], [1, 1, 0]) == pytest.approx(2 / 3)
    assert weighted_f1([1, 0], [1, 0]) == 1.0 and weighted_f1([], []) is None


def test_weighted_f1_matches_scikit_learn() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    import random

    rng = random.Random(0)
    for _ in range(50):
        refs = [rng.choice([0, 1]) for _ in range(rng.randint(1, 12))]
        preds = [rng.choice([-1, 0, 1]) for _ in refs]
        expected = metrics.f1_score(refs, preds, average="weighted", zero_division=0)
        assert weighted_f1(refs, preds) == pytest.approx(expected)


def test_report_makes_all_the_fantom_headline() -> None:
    rows = [{**r, "mode": "cot", "exact": r["correct"], "loose": r["correct"], "strict": r["correct"],
             "calls": 1, "parse_calls": 0, "qa_calls": 1, "prompt_tokens": 1, "completion_tokens": 1,
             "model_seconds": 0.0, "parse_cached": 0, "story_hash": "h"} for r in _two_sets(with_free_form=False)]
    summary = summarise(rows, ["cot"])
    text = markdown(summary, "fantom", {})
    assert "| cot | inaccessible | 2 | **0.500**" in text
    assert "compare with All above" in text and "a diagnostic, not the benchmark's own score" in text
