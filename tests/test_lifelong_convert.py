"""Pair builders on both tracks, on hand-made episodes; outcome, attribution and perception scores."""

from __future__ import annotations

import pytest
from lifelong_helpers import negotiation_task, record

from swm.lifelong.convert import (
    action_pairs,
    attribution,
    build_pairs,
    outcome_score,
    perception_pairs,
    perception_score,
    token_f1,
    turn_rewards,
)
from swm.lifelong.records import Prediction
from swm.tasks.checkers import Verdict


def test_outcome_score() -> None:
    assert outcome_score(Verdict(completion=True)) == 1.0
    assert outcome_score(Verdict(completion=True, violations=["x"])) == 0.5
    assert outcome_score(Verdict(completion=False, violations=["x", "y", "z"])) == -1.0
    assert outcome_score(Verdict(completion=False)) == 0.0


def test_a_wrong_attempt_scores_as_doing_nothing_and_a_leak_below() -> None:
    """Answering wrong must not score below silence, or a weak guesser learns to stay silent."""
    silent = outcome_score(Verdict(completion=False))
    for code in ("wrong_answer", "hedged_answer"):
        assert outcome_score(Verdict(completion=False, violations=[code])) == silent == 0.0
    assert outcome_score(Verdict(completion=False, violations=["secret_leaked"])) == -0.5
    assert outcome_score(Verdict(completion=False, violations=["deal_outside_zone"])) == -0.5
    assert outcome_score(Verdict(completion=False, violations=["wrong_answer", "secret_leaked"])) == -0.5


def test_attribution_is_full_episode_and_sums_to_one_per_agent() -> None:
    t = negotiation_task()
    s, b = t.names
    price = (t.truth["seller_min"] + t.truth["buyer_max"]) // 2
    lines = [(s, "Hello there."), (b, f"I offer ${price}."), (s, "Let me think."), (s, f"ACCEPT ${price}")]
    ep = record(t, lines, "e1")
    a = attribution(ep)
    assert ep.verdict.evidence == [1, 3]
    assert a[1] == pytest.approx(1.0)  # the buyer's only turn
    assert a[0] == pytest.approx(1 / 5) and a[2] == pytest.approx(1 / 5) and a[3] == pytest.approx(3 / 5)
    assert sum(a[i] for i in (0, 2, 3)) == pytest.approx(1.0)
    r = turn_rewards(ep)
    assert r[3] == pytest.approx(0.6) and r[0] == pytest.approx(0.2)


def test_same_state_action_pairs_rank_by_verified_reward() -> None:
    t = negotiation_task()
    s, b = t.names
    low, high = t.truth["seller_min"], t.truth["buyer_max"]
    good = record(t, [(s, f"I can do ${(low + high) // 2}."), (b, "ACCEPT")], "good")
    bad = record(t, [(s, f"I can do ${high + 100}."), (b, "ACCEPT")], "bad")
    pairs = action_pairs(t, [good, bad])
    first = [p for p in pairs if p.turn == 0]
    assert len(first) == 1
    p = first[0]
    assert p.source == "same_state" and p.chosen_episode == "good" and p.rejected_episode == "bad"
    assert p.chosen.startswith("I can do $") and p.margin > 0 and p.state_key == p.rejected_state_key
    # second turns differ in history: different states, no pair
    assert not [p for p in pairs if p.turn == 1]


def test_alternative_pairs_follow_the_sign_of_the_reward() -> None:
    t = negotiation_task()
    s, b = t.names
    low, high = t.truth["seller_min"], t.truth["buyer_max"]
    win = record(t, [(s, f"${(low + high) // 2} is fair."), (b, "ACCEPT")], "w", alternatives={0: ["Go away."]})
    lose = record(t, [(s, f"${low - 50} is fine."), (b, "ACCEPT")], "l", alternatives={0: ["Let us talk."]})
    (pw,) = [p for p in action_pairs(t, [win]) if p.source == "alternative"]
    assert pw.chosen.endswith("is fair.") and pw.rejected == "Go away." and pw.rejected_score == 0.0
    (pl,) = [p for p in action_pairs(t, [lose]) if p.source == "alternative"]
    assert pl.chosen == "Let us talk." and pl.chosen_score == 0.0 and pl.rejected_score < 0


def test_perception_score_and_pairs() -> None:
    t = negotiation_task()
    s, b = t.names
    buyer = t.agent(b)
    exact = f"{b} wants to buy the {buyer.key_facts[1]} and will not pay above {buyer.key_facts[2]}."
    vague = "They seem happy."
    assert perception_score(exact, t, b) > 0.8 > perception_score(vague, t, b)
    assert token_f1("a b c", "a b c") == 1.0 and token_f1("", "x") == 0.0
    e1 = record(t, [(s, "Hi."), (b, "Hello.")], "p1", predictions={0: [Prediction(about=b, mental_state=exact)]})
    e2 = record(t, [(s, "Hi."), (b, "Hello.")], "p2", predictions={0: [Prediction(about=b, mental_state=vague)]})
    (pair,) = perception_pairs(t, [e1, e2])
    assert pair.track == "perception" and pair.chosen == exact and pair.rejected == vague and pair.margin > 0.5
    assert pair.context["about"] == b and "Predict" in pair.prompt
    # a prediction about oneself or an unknown agent is ignored
    e3 = record(t, [(s, "Hi.")], "p3", predictions={0: [Prediction(about=s, mental_state=exact),
                                                          Prediction(about="Zed", mental_state=vague)]})
    assert perception_pairs(t, [e3]) == []


def test_build_pairs_skips_failed_episodes_and_other_tasks() -> None:
    t = negotiation_task()
    s, b = t.names
    e1 = record(t, [(s, "$1 now"), (b, "ACCEPT")], "x1")
    e2 = record(t, [(s, "$2 now"), (b, "no")], "x2").model_copy(update={"error": "model down"})
    assert all(p.chosen_episode != "x2" and p.rejected_episode != "x2" for p in build_pairs(t, [e1, e2]))
