"""The exact parser score: gold scores 1.0, paraphrase is fine, observing while absent is not."""

from __future__ import annotations

import json

import pytest

from swm.tom.parser_score import CORRUPTIONS, corrupt, score_parse
from swm.tom.simulator import generate_stories, generate_story


def test_gold_scores_one_and_corruptions_score_less() -> None:
    stories = generate_stories(25, seed=3)
    for story in stories:
        assert score_parse(story.gold_s3ap(), story).overall == 1.0
    for how in CORRUPTIONS:
        corrupted = [(corrupt(story, how, seed=i), story) for i, story in enumerate(stories)]
        scores = [score_parse(parse, story).overall for parse, story in corrupted if parse is not None]
        assert len(scores) >= 20 and max(scores) < 1.0, how


def test_paraphrased_list_form_parse_scores_one() -> None:
    story = generate_story(3)  # Tom, Yuki; hat yellow_suitcase -> blue_bucket; Tom exits
    parse = {"agents_names": ["Tom", "Yuki"], "socialized_context": [
        {"timestep": "t0", "state": "The hallway is empty.", "observations": ["Tom: none", "Yuki: none"],
         "actions": ["Tom: walks into the hallway", "Yuki: none"]},
        {"timestep": "t1", "state": "Tom is in the hallway.", "observations": ["Tom: I am now in the hallway.",
                                                                               "Yuki: none"],
         "actions": ["Tom: none", "Yuki: steps into the hallway"]},
        {"timestep": "t2", "state": "Tom and Yuki are in the hallway. The hat is inside the yellow suitcase.",
         "observations": ["Tom: <same_as_state />", "Yuki: <same_as_state />"],
         "actions": ["Tom: none", "Yuki: puts the hat into the blue bucket"]},
        {"timestep": "t3", "state": "Tom and Yuki are in the hallway. The hat is in the blue bucket.",
         "observations": ["Tom: I saw Yuki put the hat in the blue bucket.",
                          "Yuki: <same_as_state /> <mental_state>I dislike carrots.</mental_state>"],
         "actions": ["Tom: leaves", "Yuki: none"]},
        {"timestep": "t4", "state": "Yuki is in the hallway.",
         "observations": ["Tom: I left the hallway.", "Yuki: I see Tom leave the hallway."],
         "actions": ["Tom: none", "Yuki: none"]},
    ]}
    score = score_parse(parse, story)
    assert score.observation == 1.0 and score.structural == 1.0 and score.overall == 1.0, score.wrong


def test_observing_an_event_after_leaving_lowers_the_score() -> None:
    story = generate_story(7)  # Ravi exits the garden, then Jack moves the key
    move = next(e for e in story.events if e.kind == "move")
    assert "Ravi" not in move.witnesses
    parse = json.loads(json.dumps(story.gold_s3ap()))
    parse["socialized_context"][move.step]["observations"]["Ravi"] = "<same_as_state />"
    score = score_parse(parse, story)
    assert score.structural == 1.0
    assert score.observation < 1.0 and score.overall == pytest.approx(0.3 + 0.7 * score.observation)
    assert any(w.startswith("Ravi should not observe: Jack moves it to the red_bucket") for w in score.wrong)


def test_missing_parse_and_missing_agent() -> None:
    story = generate_story(7)
    assert score_parse(None, story).overall == 0.0
    parse = json.loads(json.dumps(story.gold_s3ap()))
    for step in parse["socialized_context"]:
        step["observations"].pop("Sally", None)
    score = score_parse(parse, story)
    assert score.structural < 1.0 and score.observation < 1.0
