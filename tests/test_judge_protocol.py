"""The default SOTOPIA-EVAL judge is sotopia's own evaluator: full rubric, one call for all agents, no clamping.

The rule is sotopia-lab/sotopia ``sotopia/envs/evaluators.py`` @ 850d4417a5ff7e50181bd192157fc051b6d3b850
(``SotopiaDimensions``, ``ReachGoalLLMEvaluator``) with ``generate.py``'s ``format_bad_output``
retry; the reference model below writes its dimension validators again for this test.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ValidationError, field_validator
from test_episode_scripts import env_response, loose, model, scenario

from swm.context import SWMContext
from swm.nodes.judge import judge_all_agents
from swm.social.judgement import DIMENSIONS
from swm.social.models import Scenario
from swm.social.sotopia_eval import OFFICIAL_RUBRIC, AgentEvaluation
from swm.state import SocialStep
from swm.testing import ScriptedChatModel

# sha256 (first 16 hex) and word count of each SotopiaDimensions description, checked against the file cited above
RUBRIC_PRINTS = {"believability": ("906ae0235528f3fa", 116), "relationship": ("47e172ec402962b2", 146),
                 "knowledge": ("8111bf5fa509965b", 88), "secret": ("74a37702316e81d9", 65),
                 "social_rules": ("5c4858a2f1a9d647", 63), "financial_and_material_benefits": ("526a2f162316eb0a", 87),
                 "goal": ("ef289d85bd982a5a", 85)}


def steps() -> list[SocialStep]:
    return [SocialStep(timestep="0", actions={"Ann": 'Ann said: "Forty for the lamp?"'}),
            SocialStep(timestep="1", actions={"Bob": "Bob did nothing"}),
            SocialStep(timestep="2", actions={"Bob": 'Bob said: "Fifty."'})]


def judge(*replies: Any) -> tuple[dict[str, Any], ScriptedChatModel]:
    llm = ScriptedChatModel(replies=list(replies))
    found, _, _ = judge_all_agents(SWMContext(llm=llm), scenario(), steps(), key="ep")
    return {n: j.model_dump() for n, j in found.items()}, llm


def test_the_rubric_is_sotopias_word_for_word() -> None:
    prints = {k: (hashlib.sha256(v.encode()).hexdigest()[:16], len(v.split())) for k, v in OFFICIAL_RUBRIC.items()}
    assert prints == RUBRIC_PRINTS


def test_the_default_prompt_carries_every_dimensions_full_rubric_and_no_end_reason() -> None:
    judgements, llm = judge(env_response(2))
    tool, prompt = llm.prompts[0]
    assert tool == "EnvResponse" and llm.calls == 1
    for name, text in OFFICIAL_RUBRIC.items():
        assert text in prompt, name
    assert "Based on previous interactions, evaluate how well participants achieve their goals." in prompt
    assert "did nothing" not in prompt and "Turn #1" in prompt and 'Bob said: "Fifty."' in prompt
    assert "ended because" not in prompt and "turn limit" not in prompt
    assert "agent_1_evaluation: Ann" not in prompt and "Participants: Ann and Bob" in prompt  # no block of swm's
    assert set(judgements) == {"Ann", "Bob"} and {j["protocol"] for j in judgements.values()} == {"sotopia"}


def reference_background(name: str, first: str, age: int, gender: str, occupation: str, pronoun: str, public: str,
                         values: str, secret: str) -> str:
    """sotopia/envs/parallel.py _agent_profile_to_friendabove_self, viewer tags removed (the environment's view);
    ``name`` stands for its "{first_name} {last_name}", which is the participant's name there."""
    adj = {"Man": "male", "Woman": "female", "Nonbinary": "nonbinary"}[gender] if gender else ""
    return " ".join([f"{name} is a {age}-year-old {adj} {occupation.lower()}.", f"{pronoun} pronouns.",
                     public, "Personality and values description:", values, f"{first}'s secrets:", secret])


def test_the_default_judge_prompt_is_sotopias_template_with_its_backgrounds_and_tuple_format() -> None:
    """ReachGoalLLMEvaluator's template after format_docstring, the ScriptBackground with sotopia's profile text,
    and each dimension a [reasoning, score] pair (SotopiaDimensions' tuple[str, int])."""
    seats = scenario().model_dump()
    seats["agents"][0]["profile"].update(gender="Woman", gender_pronoun="She/her",
                                         personality_and_values="Ann is frugal.")
    llm = ScriptedChatModel(replies=[env_response(2)])
    judge_all_agents(SWMContext(llm=llm), Scenario.model_validate(seats), steps(), key="ep")
    prompt = llm.prompts[0][1]
    body = prompt.split('<data name="history">\n', 1)[1]
    history, rest = body.split("\n</data>", 1)
    assert rest.startswith(",\nBased on previous interactions, evaluate how well participants achieve their goals.\n"
                           "Please following the format:\n")  # "{history},", sotopia's wording, typo included
    ann = reference_background("Ann", "Ann", 30, "Woman", "trader", "She/her", "Ann likes lamps.", "Ann is frugal.",
                               "SECRET-ANN-x1 the lamp is broken")
    assert history.splitlines()[:4] == ["Here is the context of this interaction:",
                                        "Scenario: A lamp is for sale at a flea market.", "Participants: Ann and Bob",
                                        f"Ann's background: {ann}"]
    assert "Bob's secrets: SECRET-BOB-y2" in history and "Your secret" not in prompt
    schema = json.loads(prompt.split("```", 2)[1].removeprefix("\n")) if "```" in prompt else None
    assert schema is not None
    goal = schema["$defs"]["EvaluationBySocialDimensions"]["properties"]["goal"]
    assert goal["type"] == "array" and [p["type"] for p in goal["prefixItems"]] == ["string", "integer"]
    assert goal["minItems"] == goal["maxItems"] == 2 and goal["description"] == OFFICIAL_RUBRIC["goal"]
    judgements, _ = judge(env_response(2, agent_1_goal=8))
    assert judgements["Ann"]["goal"] == 8 and judgements["Ann"]["reasoning"]["goal"] == "why goal"


def test_the_earlier_judge_prompt_still_renders_when_pinned() -> None:
    """judge_sotopia_eval@v1 (a block naming the seats, "Please follow") stays loadable for recorded runs."""
    llm = ScriptedChatModel(replies=[env_response(2)])
    judge_all_agents(SWMContext(llm=llm, prompt_versions={"judge_sotopia_eval": "v1"}), scenario(), steps(), key="e")
    assert "agent_1_evaluation: Ann\nagent_2_evaluation: Bob" in llm.prompts[0][1]


def test_a_reply_in_swms_earlier_object_form_is_not_sotopias_format() -> None:
    """{reasoning, score} objects do not validate as [reasoning, score]: reformatted once, then scored."""
    old = env_response(2).model_dump()
    old["agent_1_evaluation"] = {d: {"reasoning": r, "score": v} for d, (r, v) in old["agent_1_evaluation"].items()}
    judgements, llm = judge(loose(**old), env_response(2, agent_1_goal=6))
    assert llm.calls == 2 and judgements["Ann"]["goal"] == 6


def test_one_call_judges_both_agents_in_seat_order() -> None:
    judgements, llm = judge(env_response(2, agent_1_goal=9, agent_2_goal=2, agent_2_secret=-4))
    assert llm.calls == 1
    assert (judgements["Ann"]["goal"], judgements["Bob"]["goal"], judgements["Bob"]["secret"]) == (9, 2, -4)
    assert judgements["Ann"]["overall"] == pytest.approx((5 + 0 + 5 - 5 - 5 + 0 + 9) / 7, abs=1e-3)


def test_an_out_of_range_reply_is_reformatted_once_then_scored() -> None:
    judgements, llm = judge(env_response(2, agent_1_goal=11), env_response(2, agent_1_goal=10))
    assert llm.calls == 2
    tool, second = llm.prompts[1]
    assert "reformat it to a string that can be parsed by json parser" in second
    assert '"goal": ["why goal", 11]' in second  # sotopia's [reasoning, score]
    assert judgements["Ann"]["goal"] == 10 and judgements["Ann"]["rejected"] == []


def test_an_out_of_range_reply_twice_leaves_the_episode_unscored() -> None:
    judgements, llm = judge(env_response(2, agent_2_relationship=7), env_response(2, agent_2_relationship=-6))
    assert llm.calls == 2
    for j in judgements.values():  # not clamped: nobody is scored
        assert j["overall"] is None and j["goal"] is None and j["rejected"] == list(DIMENSIONS)
        assert j["error"].startswith("unscored:")


class Reference(BaseModel):
    """One dimension as ``SotopiaDimensions`` types and validates it: ``tuple[str, int]`` and its range check."""

    low: int
    high: int
    value: tuple[str, int]

    @field_validator("value")
    @classmethod
    def in_range(cls, v: tuple[str, int], info: Any) -> tuple[str, int]:
        assert info.data["low"] <= v[1] <= info.data["high"]
        return v


@pytest.mark.parametrize("score", [0, 5, 10, 11, -1, 7.0, 6.6, "7", "seven", None, 10**9])
@pytest.mark.parametrize("name", ["goal", "secret", "relationship"])
def test_scores_are_accepted_exactly_when_sotopia_accepts_them(name: str, score: Any) -> None:
    low, high = DIMENSIONS[name]
    try:
        Reference(low=low, high=high, value=("r", score))
        expected = True
    except ValidationError:
        expected = False
    args = {d: ["r", (lo + hi) // 2] for d, (lo, hi) in DIMENSIONS.items()}
    args[name] = ["r", score]
    try:
        AgentEvaluation(**args)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted is expected


def test_bench_sotopia_counts_unscored_episodes(tmp_path: Path) -> None:
    from swm.cli import main

    def judge_reply(prompt: str, tool: str | None) -> Any:
        assert tool == "EnvResponse"
        return env_response(2, goal=14)  # out of range every time

    judge_llm = ScriptedChatModel(respond=judge_reply)
    out = tmp_path / "out"
    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "2", "--max-turns", "1",
            "--seats", "first", "--concurrency", "1", "--db", str(tmp_path / "u.db"), "--out", str(out),
            "--no-progress"]
    result = CliRunner().invoke(main, args, obj={"llm": model(), "chat_models": {"judge": judge_llm}})
    assert result.exit_code == 0, result.output
    assert judge_llm.calls == 4  # each episode: the call and one reformatting call
    row = next(r for r in json.loads((out / "sotopia.json").read_text())["table"] if r["group"] == "all")
    assert row["unscored"] == 2 and row["goal"]["n"] == 0 and row["judge_protocols"] == "sotopia"
    assert "Judge protocol: sotopia" in (out / "sotopia.md").read_text()


def test_bench_sotopia_swm_protocol_judges_each_agent(tmp_path: Path) -> None:
    from swm.cli import main

    judge_llm = model()
    out = tmp_path / "out"
    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "1", "--max-turns", "1",
            "--seats", "first", "--judge-protocol", "swm", "--db", str(tmp_path / "w.db"), "--out", str(out),
            "--no-progress"]
    result = CliRunner().invoke(main, args, obj={"llm": model(), "chat_models": {"judge": judge_llm}})
    assert result.exit_code == 0, result.output
    assert [t for t, _ in judge_llm.prompts] == ["SotopiaEvaluation", "SotopiaEvaluation"]
    data = json.loads((out / "sotopia.json").read_text())
    assert data["meta"]["judge_protocol"] == "swm" and data["table"][0]["judge_protocols"] == "swm"
    episode = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
    assert episode["judge_protocol"] == "swm"
