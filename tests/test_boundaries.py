"""Boundaries that a mutation of the code once survived: each is pinned here by the case on the edge."""

from __future__ import annotations

import pytest
from test_lifelong_gate import pair, reasons
from test_lifelong_tasks import negotiation, says

from swm.state import SocialStep, SocialWorld
from swm.tasks.verify import check
from swm.tom.loaders import TomItem
from swm.tom.scoring import score_answer
from swm.tom.simulator import generate_stories
from swm.validation import validate_s3ap


def two_agents(tag: str) -> SocialWorld:
    return SocialWorld(agents=["Sally", "Anne"], steps=[
        SocialStep(timestep="0", scene="The marble is in the basket.",
                   observations={"Sally": "<same_as_state />", "Anne": "<same_as_state />"},
                   actions={"Sally": "moves the marble", "Anne": "leaves"}),
        SocialStep(timestep="1", scene="The marble is in the box.",
                   observations={"Sally": tag, "Anne": "none"}, actions={"Sally": "none", "Anne": "none"})])


@pytest.mark.parametrize("index, known", [(1, True), (2, False)])
def test_a_tag_index_equal_to_the_number_of_agents_is_out_of_range(index: int, known: bool) -> None:
    tag = f"<same_as_last_action_{index} />"
    expanded = two_agents(tag).expand_tags().steps[1].observations["Sally"]
    assert (expanded == "Anne: leaves") if known else (expanded == tag)
    report = validate_s3ap(two_agents(tag).to_s3ap())
    flagged = [i for i in report.issues if f"_{index}" in i.message]
    assert bool(flagged) != known, report.issues


def test_a_margin_exactly_at_the_minimum_passes_and_just_below_fails() -> None:
    assert reasons(pair(chosen_score=0.75, rejected_score=0.5), min_margin=0.25) == []  # margin 0.25 exactly
    assert reasons(pair(chosen_score=0.75, rejected_score=0.5), min_margin=0.2500001) == ["margin"]


@pytest.mark.parametrize("scores, agree", [
    ([0.5, 0.5], True), ([-0.5, -0.25], True),  # same side
    ([0.0, 0.5], False), ([0.5, 0.0], False),   # a tie is no preference: not the same side as a positive score
    ([-0.5, 0.5], False),
])
def test_judge_agreement_needs_both_samples_on_the_same_side_of_zero(scores: list[float], agree: bool) -> None:
    assert (reasons(pair(judge_scores=scores)) == []) == agree


def test_a_deal_exactly_at_the_sellers_minimum_or_the_buyers_limit_completes() -> None:
    t, s, b, low, high = negotiation()
    # each price is offered by the seat it is not private to (the seller saying its own minimum is a leak)
    for price, inside, offer, accept in ((low, True, b, s), (high, True, s, b), (low - 1, False, b, s),
                                         (high + 1, False, s, b)):
        verdict = check(t, says((offer, f"How about ${price}?"), (accept, "ACCEPT")))
        assert verdict.completion == inside, (price, verdict)
        assert ("deal_outside_zone" in verdict.violations) != inside


def fantom_binary(gold: str) -> TomItem:
    return TomItem(id="f", story="s", question="Does Kim know? Answer yes or no.", answer=gold, qtype="binary",
                   benchmark="fantom", kind="fantom_binary")


@pytest.mark.parametrize("gold, right, wrong", [("no:long", "no", "yes"), ("no", "no", "yes"),
                                                ("yes", "yes", "no")])
def test_fantom_binary_gold_no_long_means_no(gold: str, right: str, wrong: str) -> None:
    assert score_answer(fantom_binary(gold), right)["exact"]
    assert not score_answer(fantom_binary(gold), wrong)["exact"]


def test_the_simulator_writes_the_objects_location_only_for_witnesses() -> None:
    checked = 0
    for story in generate_stories(80, seed=5):
        placed = {e.step: set(e.witnesses) for e in story.events if e.kind == "place"}
        for event in story.events:
            if event.kind == "place":
                continue
            step = story.world.steps[event.step]
            for agent in story.agents:
                if agent in event.witnesses or agent in placed.get(event.step, set()):
                    continue
                seen = step.observations.get(agent, "none")
                assert f"The {story.obj} is in the" not in seen, (story.text, event, agent, seen)
                checked += 1
    assert checked > 50  # the property was exercised, not vacuous


def test_every_extra_graph_is_measured_by_the_perf_floor() -> None:
    from bench.cases import extra_cases

    found, gaps = extra_cases()
    assert gaps == [], "test_perf_floor would silently skip these graphs"
    assert {c.name.split(" ")[0] for c in found} >= {"foresee_act", "lookahead", "episode", "lifelong"}
