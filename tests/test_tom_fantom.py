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


def _report_rows(kind: str, values: list[float]) -> list[dict[str, Any]]:
    return [{"group_id": f"s{i}", "kind": kind, "qtype": "fact" if kind == "fantom_fact" else "tom:belief",
             "correct": int(v), "value": v, "gold": "", "answer": "", "access": "inaccessible", "mode": "cot",
             "exact": int(v), "loose": int(v), "strict": int(v), "calls": 1, "parse_calls": 0, "qa_calls": 1,
             "prompt_tokens": 1, "completion_tokens": 1, "model_seconds": 0.0, "parse_cached": 0, "story_hash": "h"}
            for i, v in enumerate(values)]


def test_an_f1_with_no_spread_gets_an_interval_not_zero_width_and_a_spread_one_a_bootstrap() -> None:
    from swm.stats import bootstrap_interval, wilson_interval

    zero = summarise(_report_rows("fantom_fact", [0.0] * 5), ["cot"])["by_type"][0]
    assert (zero["ci_low"], zero["ci_high"]) == (0.0, round(wilson_interval(0, 5)[1], 4)) and zero["ci_high"] > 0.4
    spread = [0.0, 0.25, 0.5, 1.0, 0.75, 0.5]
    row = summarise(_report_rows("fantom_fact", spread), ["cot"])["by_type"][0]
    assert (row["ci_low"], row["ci_high"]) == tuple(round(x, 4) for x in bootstrap_interval(spread))


def test_the_report_header_names_the_official_scorer_its_commit_and_the_data_licence() -> None:
    summary = summarise(_report_rows("fantom_binary", [1.0, 0.0]), ["cot"])
    real = markdown(summary, "fantom", {"models": "parser=gpt-4o, qa=gpt-4o"})
    assert "- official scorer: skywalker023/fantom eval_fantom.py @ 9b41d616" in real
    assert "- data licence: " in real and "contamination: public since 2023" in real
    assert "Paper Table 1 reference" in real
    tomi = markdown(summarise(_report_rows("tomi", [1.0]), ["cot"]), "tomi", {})
    assert "XuhuiZhou/social-world-model social_world_model/task_modules/tomi.py @ 0332906d" in tomi
    assert "CC BY-NC 4.0" in tomi


@pytest.mark.parametrize("models", ["parser=fake@http://127.0.0.1:1/v1, qa=fake@http://127.0.0.1:1/v1",
                                    "parser=<injected ScriptedChatModel>, qa=<injected ScriptedChatModel>"])
def test_the_paper_s_table_1_is_not_printed_under_a_test_double(models: str) -> None:
    summary = summarise(_report_rows("fantom_binary", [1.0, 0.0]), ["cot"])
    assert "Paper Table 1 reference" not in markdown(summary, "fantom", {"models": models})
