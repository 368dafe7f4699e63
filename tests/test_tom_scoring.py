"""Scorers on hand-checked cases."""

from __future__ import annotations

import pytest

from swm.tom.loaders import TomItem
from swm.tom.scoring import (
    binary_answer,
    choose_option,
    contains_match,
    exact_match,
    location_candidates,
    normalise,
    score_answer,
    strict_match,
    token_f1,
    wilson_interval,
)


def test_normalise() -> None:
    assert normalise("The Green_Box.") == "green box"
    assert normalise("a red-basket") == "red basket"
    assert normalise("  An   apple ") == "apple"


@pytest.mark.parametrize(("answer", "exact", "loose", "headline"), [
    ("green_box", True, True, True),
    ("The green box.", True, True, False),  # the S3AP repository's substring rule: "green_box" is not in it
    ("Mia will look in the green_box", False, True, True),
    ("green", False, False, False),
    ("green_boxes", False, False, True),    # a raw substring counts there
    ("red_basket", False, False, False),
    ("", False, False, False),
])
def test_location_rules(answer: str, exact: bool, loose: bool, headline: bool) -> None:
    assert exact_match(answer, "green_box") is exact
    assert contains_match(answer, "green_box") is loose
    item = TomItem(id="x", story="", question="", answer="green_box", qtype="q", benchmark="tomi")
    assert score_answer(item, answer) == {
        "exact": exact, "loose": loose, "strict": loose, "value": float(headline), "chosen": None, "rule": "s3ap-repo",
        "variants": {"swm-contains": int(loose), "swm-strict": int(loose), "exact": int(exact)}}


HEDGE_STORY = ("Ann entered the kitchen.\nBob entered the kitchen.\nThe ball is in the basket.\n"
               "The basket is in the kitchen.\nBob exited the kitchen.\nAnn moved the ball to the green_box.\n"
               "The green_box is in the kitchen")


def test_location_candidates_split_rooms_and_containers() -> None:
    assert location_candidates(HEDGE_STORY) == {"rooms": {"kitchen"}, "containers": {"basket", "green box"}}


@pytest.mark.parametrize(("answer", "loose", "strict"), [
    ("basket", True, True),
    ("Bob will look in the basket in the kitchen.", True, True),  # the room is not a rival container
    ("Not the basket, the green box", True, False),                # the hedge
    ("the basket or the green_box", True, False),
    ("the green box", False, False),
])
def test_strict_rule_rejects_hedges(answer: str, loose: bool, strict: bool) -> None:
    item = TomItem(id="h", story=HEDGE_STORY, question="Where will Bob look for the ball?", answer="basket",
                   qtype="first_order_tom", benchmark="tomi")
    score = score_answer(item, answer)
    assert (score["loose"], score["strict"], score["value"]) == (loose, strict, float(loose))
    assert strict_match(answer, "basket", HEDGE_STORY) is strict or not loose


def test_strict_rule_ignores_a_candidate_inside_the_gold_name() -> None:
    story = "The ball is in the box.\nAnn moved the ball to the green_box."
    assert strict_match("the green box", "green_box", story) is True
    assert strict_match("the box, no, the green box", "green_box", story) is False


def test_options_hitom_letters_and_text() -> None:
    options = {"A": "red_box", "B": "blue_crate", "C": "green_drawer"}
    assert choose_option("B", options) == "B"
    assert choose_option("B. blue_crate", options) == "B"
    assert choose_option("It is in the blue crate.", options) == "B"
    assert choose_option("red box or blue crate", options) is None  # two options named: no choice
    assert choose_option("E", options) is None


def test_options_mmtom_negation_is_not_confused() -> None:
    options = {"a": "Ana thinks that the cupcake is not inside the fridge.",
               "b": "Ana thinks that the cupcake is inside the fridge."}
    assert choose_option("a", options) == "a"
    assert choose_option("(b)", options) == "b"
    assert choose_option("The answer is (b).", options) == "b"
    assert choose_option("Ana thinks that the cupcake is not inside the fridge", options) == "a"
    assert choose_option("a cupcake", options) is None  # the article is not the letter a
    item = TomItem(id="m", story="", question="", answer=options["b"], qtype="t", benchmark="mmtom", kind="choice",
                   options=options, answer_letter="b")
    assert score_answer(item, "b")["value"] == 1.0 and score_answer(item, "a")["value"] == 0.0


def test_fantom_rules() -> None:
    assert binary_answer("Yes, she does.") == 1 and binary_answer("no") == 0
    assert binary_answer("Zoe does not know about it") == 0 and binary_answer("maybe") == -1
    listing = TomItem(id="l", story="", question="", answer=["Kai", "Lu"], wrong_answer=["Zoe"], qtype="t",
                      benchmark="fantom", kind="fantom_list")
    assert score_answer(listing, "Kai and Lu")["value"] == 1.0
    assert score_answer(listing, "Kai, Lu and Zoe")["value"] == 0.0
    assert score_answer(listing, "Kai")["value"] == 0.0
    assert token_f1("rex is a beagle", "Kai's dog Rex is a beagle.") == pytest.approx(2 * 0.75 * 0.5 / 1.25)


def test_wilson_interval_hand_checked() -> None:
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert wilson_interval(0, 0) == (0.0, 1.0)  # no data: anything is possible
