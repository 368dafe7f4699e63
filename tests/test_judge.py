"""SOTOPIA-EVAL judging: exact ranges in prompt and schema, lenient reading, repair or rejection."""

from __future__ import annotations

from typing import Any

import pytest
from test_episode_scripts import evaluation, loose, scenario

from swm.context import SWMContext
from swm.nodes.judge import judge_agent
from swm.social.judgement import DIMENSIONS, Judgement, SotopiaEvaluation, read_scores
from swm.testing import ScriptedChatModel

RANGES = {"believability": (0, 10), "relationship": (-5, 5), "knowledge": (0, 10), "secret": (-10, 0),
          "social_rules": (-10, 0), "financial_and_material_benefits": (-5, 5), "goal": (0, 10)}


def judge_with(*replies: Any) -> tuple[Judgement, ScriptedChatModel]:
    llm = ScriptedChatModel(replies=list(replies))
    judgement, _, _ = judge_agent(SWMContext(llm=llm), scenario(), "Ann", "Turn #0: Ann said: hi", "turn limit")
    return judgement, llm


def test_dimensions_and_ranges_are_exact() -> None:
    assert DIMENSIONS == RANGES
    schema = SotopiaEvaluation.model_json_schema()
    for name, (low, high) in RANGES.items():
        assert (schema["properties"][name]["minimum"], schema["properties"][name]["maximum"]) == (low, high)
        assert schema["properties"][f"{name}_reasoning"]["maxLength"] <= 1000


def test_prompt_states_every_range() -> None:
    judgement, llm = judge_with(evaluation())
    prompt = llm.prompts[0][1]
    for name, (low, high) in RANGES.items():
        assert f"{name} (integer {low}..{high})" in prompt
    assert judgement.rejected == [] and judgement.repairs == []
    assert judgement.overall == pytest.approx(sum((lo + hi) // 2 for lo, hi in RANGES.values()) / 7, abs=1e-3)


def test_out_of_range_scores_are_refused_and_asked_once_more() -> None:
    """No clamping or rounding: a score out of range (or not an integer) is asked for again, then rejected."""
    repair = loose(goal=9, goal_reasoning="r", secret=-1, secret_reasoning="r", relationship=11, knowledge=6.6)
    judgement, llm = judge_with(evaluation(goal=14, secret=3, relationship="-7", knowledge=6.6), repair)
    assert llm.calls == 2 and "no valid score for: relationship, knowledge, secret, goal" in llm.prompts[1][1]
    assert (judgement.goal, judgement.secret, judgement.relationship, judgement.knowledge) == (9, -1, None, None)
    assert judgement.rejected == ["relationship", "knowledge"] and judgement.overall is None
    assert "goal: 14 refused (an integer in 0..10 is required)" in " | ".join(judgement.repairs)
    assert judgement.protocol == "swm"


def test_missing_dimension_gets_one_repair_call() -> None:
    repair = loose(goal=8, goal_reasoning="did it", secret=-2, secret_reasoning="hinted")
    judgement, llm = judge_with(evaluation(drop=("goal", "secret")), repair)
    assert llm.calls == 2
    assert "no valid score for: secret, goal" in llm.prompts[1][1] and "goal (integer 0..10)" in llm.prompts[1][1]
    assert (judgement.goal, judgement.secret) == (8, -2) and judgement.rejected == []
    assert any("supplied by the repair call" in r for r in judgement.repairs)


def test_still_missing_after_repair_is_rejected_not_dropped() -> None:
    judgement, llm = judge_with(evaluation(drop=("goal",)), "I cannot score that")
    assert llm.calls == 2
    assert judgement.goal is None and judgement.rejected == ["goal"] and judgement.overall is None
    assert judgement.error  # the repair reply's problem is kept


def test_read_scores_accepts_nested_and_text_forms() -> None:
    scores, reasons, repairs, missing = read_scores({"goal": {"score": "7/10", "reasoning": "r"},
                                                     "secret": "−3", "believability": None})
    assert scores["goal"] == 7 and reasons["goal"] == "r" and scores["secret"] == -3
    assert "believability" in missing and len(missing) == 5


def test_judgement_dump_round_trip_keeps_overall() -> None:
    j = Judgement(agent="A", **{d: 0 for d in RANGES})
    assert j.model_dump()["overall"] == 0.0


def test_replies_that_do_not_fit_are_kept_in_failed_replies() -> None:
    from swm.checkpoints import ExperienceStore

    store = ExperienceStore(":memory:")
    llm = ScriptedChatModel(replies=[evaluation(drop=("goal",)), loose(other=1)])
    judgement, _, _ = judge_agent(SWMContext(llm=llm, store=store), scenario(), "Ann", "Turn #0: Ann said: hi",
                                  "turn limit", key="ep-1")
    assert judgement.rejected == ["goal"]
    kept = store.failed_replies("ep-1")
    assert [r["node"] for r in kept] == ["judge", "judge_repair"] and all(r["raw"] for r in kept)
