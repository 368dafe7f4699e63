"""Each gate rule on a pair built to fail it (and only it), counts per rule, and the ablation switch."""

from __future__ import annotations

from typing import Any

import pytest

from swm.lifelong.gate import RULES, GateSettings, degenerate_reason, gate_pairs, reject_counts
from swm.lifelong.records import PreferencePair


def pair(**override: Any) -> PreferencePair:
    base: dict[str, Any] = dict(track="action", source="same_state", task_id="train:negotiation:easy:1",
                                family="negotiation", level="easy", agent="Ava", turn=0, state_key="s1",
                                chosen_state_key="s1", rejected_state_key="s1", prompt="Ava at turn 0",
                                chosen="I can offer $500 for the bike.", rejected="Whatever.", chosen_score=0.8,
                                rejected_score=-0.2,
                                context={"private": ["$437"], "goal": "Sell a used road bike to Ben for as much as "
                                         "possible; never accept less than your minimum.", "previous": "",
                                         "resolved_before": False})
    base.update(override)
    return PreferencePair(**base).with_id()


def reasons(p: PreferencePair, seen: tuple[str, ...] = (), **settings: Any) -> list[str]:
    (result,) = gate_pairs([p], GateSettings(**settings), seen=seen)
    return result.reasons


def test_a_good_pair_passes_every_rule() -> None:
    assert reasons(pair()) == []


@pytest.mark.parametrize(("override", "code"), [
    ({"chosen": " ".join(f"w{i}" for i in range(900))}, "schema"),  # over the length limit
    ({"track": "vision"}, "schema"),
    ({"chosen_score": 3.0}, "schema"),
    ({"rejected_state_key": "s2"}, "different_state"),
    ({"chosen_score": 0.05, "rejected_score": 0.0}, "margin"),
    ({"judge_scores": [6.0, -2.0]}, "judge_disagreement"),
    ({"judge_scores": [1.0, 9.0]}, "judge_disagreement"),
    ({"judge_scores": [4.0]}, "judge_disagreement"),
    ({"chosen": "Honestly my floor is $437, take it."}, "leak"),
    ({"track": "perception", "chosen": "Ben wants the bike cheaply.", "prompt": "Ben: Your limit is $700.",
      "context": {"about_private": ["Your limit is $700."]}}, "leak"),
])
def test_each_rule_rejects_with_its_code(override: dict[str, Any], code: str) -> None:
    assert reasons(pair(**override)) == [code]


def test_judge_samples_that_agree_pass() -> None:
    assert reasons(pair(judge_scores=[6.0, 6.5])) == []


def test_duplicate_within_a_batch_and_against_earlier_cycles() -> None:
    p = pair()
    results = gate_pairs([p, p], GateSettings())
    assert [r.reasons for r in results] == [[], ["duplicate"]]
    assert reasons(p, seen=(p.pair_id,)) == ["duplicate"]


@pytest.mark.parametrize(("override", "why"), [
    ({"chosen": "none"}, "stall"),
    ({"chosen": "ok"}, "stall"),
    ({"chosen": "buy it now buy it now buy it now please"}, "repetition"),
    ({"chosen": "Same line again.", "context": {"previous": "same line again."}}, "repetition"),
    ({"chosen": "I will sell a used road bike to Ben for as much as possible, fine."}, "goal_restated"),
    ({"context": {"resolved_before": True}}, "not_leaving"),
])
def test_degenerate_turns(override: dict[str, Any], why: str) -> None:
    p = pair(**override)
    assert degenerate_reason(p) == why
    assert reasons(p) == ["degenerate"]


def test_leaving_after_resolution_is_fine() -> None:
    assert reasons(pair(context={"resolved_before": True}, chosen_action_type="leave", chosen="Bye now.")) == []


def test_counts_per_rule_and_gating_off_keeps_everything() -> None:
    batch = [pair(), pair(chosen=""), pair(chosen_score=0.0, rejected_score=0.0, chosen="none", rejected="x y")]
    on = gate_pairs(batch, GateSettings())
    assert [r.kept for r in on] == [True, False, False]
    counts = reject_counts(on)
    assert set(counts) == set(RULES)
    assert counts["schema"] == 1 and counts["margin"] == 1 and counts["degenerate"] == 2
    off = gate_pairs(batch, GateSettings(enabled=False))
    assert all(r.kept for r in off)
    assert [r.reasons for r in off] == [r.reasons for r in on]  # the ablation still records why


def test_every_gated_pair_is_stored_with_its_reasons_duplicates_included() -> None:
    from swm.checkpoints import ExperienceStore
    from swm.lifelong import store as ls

    store = ExperienceStore(":memory:")
    p = pair()
    ls.put_pairs(store, "r", 1, gate_pairs([p, p, pair(chosen="none")]), gating=True)
    ls.put_pairs(store, "r", 1, gate_pairs([p, p, pair(chosen="none")]), gating=True)  # a re-run writes nothing new
    rows = list(store.rows("select row, kept, reasons, degenerate from lifelong_pairs order by row"))
    assert [(r["kept"], r["reasons"]) for r in rows] == [(1, "[]"), (0, '["duplicate"]'), (0, '["degenerate"]')]
    assert rows[2]["degenerate"] == "stall"
    assert [x.chosen for x in ls.pairs(store, "r", [1])] == [p.chosen]
    assert ls.pair_ids(store, "r", before_cycle=2) == {p.pair_id, pair(chosen="none").pair_id}


@pytest.mark.parametrize(("override", "passes"), [
    ({"chosen": "a " * 1999 + "ab"}, True),  # exactly MAX_TEXT characters
    ({"chosen": "a " * 2000 + "b"}, False),  # one over
    ({"rejected": " "}, False),  # blank after stripping
    ({"chosen_score": 1.0, "rejected_score": -1.0}, True),
    ({"rejected_score": -1.0 - 1e-9}, False),
    ({"chosen_score": 1.0 + 1e-9}, False),
])
def test_schema_limits_on_both_sides(override: dict[str, Any], passes: bool) -> None:
    assert len(pair(chosen="a " * 1999 + "ab").chosen) == 4000
    assert ("schema" not in reasons(pair(**override))) is passes


@pytest.mark.parametrize(("scores", "passes"), [
    ([1.0, 2.0], True),  # a difference of exactly the tolerance
    ([1.0, 2.0 + 1e-9], False),
    ([0.0, -0.5], True),  # zero is not a positive verdict: both say "not better"
    ([0.0, 0.5], False),
])
def test_judge_tolerance_and_sign_at_the_boundary(scores: list[float], passes: bool) -> None:
    assert ("judge_disagreement" not in reasons(pair(judge_scores=scores), judge_tolerance=1.0)) is passes


def test_margin_at_exactly_the_minimum_passes() -> None:
    assert reasons(pair(chosen_score=0.5, rejected_score=0.25), min_margin=0.25) == []
    assert reasons(pair(chosen_score=0.5, rejected_score=0.25 + 1e-6), min_margin=0.25) == ["margin"]


GOAL = "Sell a used road bike to Ben for as much as possible; never accept less than your minimum."


@pytest.mark.parametrize(("chosen", "restated"), [
    ("Well, sell a used road bike to Ben for now, right?", True),  # eight consecutive goal words
    ("Well, sell a used road bike to Ben now, right?", False),  # seven
])
def test_goal_restatement_span_is_eight_words(chosen: str, restated: bool) -> None:
    assert (degenerate_reason(pair(chosen=chosen, context={"goal": GOAL})) == "goal_restated") is restated
