"""The typed social state: S3AP round trips, tags, perspectives, validation."""

from __future__ import annotations

import pytest

from swm.state import SocialStep, SocialWorld
from swm.validation import validate_s3ap

# The paper's Figure 4 example (the incorrect parse of the error analysis), completed with the
# required timestep and actions fields, in the model-facing list form.
FIGURE_4 = {
    "agents_names": ["Evelyn", "Amelia"],
    "socialized_context": [
        {
            "timestep": "3",
            "state": "Evelyn moved persimmon to bucket. Amelia is away.",
            "observations": ["Evelyn: <same_as_state />", "Amelia: <same_as_state />"],
            "actions": ["Evelyn: none", "Amelia: none"],
        }
    ],
}

SALLY_ANNE = {
    "agents_names": ["Sally", "Anne"],
    "socialized_context": [
        {"timestep": "0", "state": "Sally and Anne are in the room. The marble is in the basket.",
         "observations": {"Sally": "<same_as_state />", "Anne": "<same_as_state />"},
         "actions": {"Sally": "leaves the room", "Anne": "none"}},
        {"timestep": "1", "state": "Anne is in the room. The marble is in the basket.",
         "observations": {"Sally": "<same_as_last_action_0 /> <mental_state>The marble is in the basket."
                                   "</mental_state>",
                          "Anne": "<same_as_state /> <same_as_last_action_0 />"},
         "actions": {"Sally": "none", "Anne": "moves the marble to the box"}},
        {"timestep": "2", "state": "Anne is in the room. The marble is in the box.",
         "observations": {"Sally": "none", "Anne": "<same_as_state /> <same_as_last_action />"},
         "actions": {"Sally": "none", "Anne": "none"}},
    ],
    # dialogue is swm's extension of the dict form; it must survive the round trip
}


def test_figure_4_list_form_reads_and_round_trips() -> None:
    world = SocialWorld.from_s3ap(FIGURE_4)
    assert world.agents == ["Evelyn", "Amelia"]
    step = world.steps[0]
    assert step.scene == "Evelyn moved persimmon to bucket. Amelia is away."
    assert step.observations == {"Evelyn": "<same_as_state />", "Amelia": "<same_as_state />"}
    dict_form = world.to_s3ap()
    assert dict_form["socialized_context"][0]["observations"]["Amelia"] == "<same_as_state />"
    assert SocialWorld.from_s3ap(dict_form) == world
    assert SocialWorld.from_s3ap(world.to_model_form()) == world


def test_bare_list_infers_agents_in_order() -> None:
    world = SocialWorld.from_s3ap(FIGURE_4["socialized_context"])
    assert world.agents == ["Evelyn", "Amelia"]


def test_round_trip_keeps_mental_states_and_dialogue() -> None:
    world = SocialWorld.from_s3ap(SALLY_ANNE)
    world.steps[1].dialogue["Anne"] = "I'll hide it."
    assert world.steps[1].mental_states == {"Sally": "The marble is in the basket."}
    assert world.steps[1].observations["Sally"] == "<same_as_last_action_0 />"
    again = SocialWorld.from_s3ap(world.to_s3ap())
    assert again == world
    assert SocialWorld.from_s3ap(again.to_model_form()) == world


def test_mental_state_only_observation_round_trips() -> None:
    raw = {"agents_names": ["A"], "socialized_context": [
        {"timestep": "0", "state": "s", "observations": {"A": "<mental_state>worried</mental_state>"},
         "actions": {"A": "none"}}]}
    world = SocialWorld.from_s3ap(raw)
    assert world.steps[0].observations["A"] == "none"
    assert world.steps[0].mental_states["A"] == "worried"
    assert world.to_s3ap()["socialized_context"][0]["observations"]["A"] == "<mental_state>worried</mental_state>"


def test_expand_tags_honours_the_agent_index() -> None:
    world = SocialWorld.from_s3ap({
        "agents_names": ["Ann", "Bob", "Cy"],
        "socialized_context": [
            {"timestep": "0", "state": "kitchen",
             "observations": {"Ann": "<same_as_state />", "Bob": "<same_as_state />", "Cy": "none"},
             "actions": {"Ann": "opens the fridge", "Bob": "waves", "Cy": "none"}},
            {"timestep": "1", "state": "fridge open",
             "observations": {"Ann": "<same_as_last_action_1 />", "Bob": "<same_as_last_action_0 />",
                              "Cy": "<same_as_last_action />"},
             "actions": {"Ann": "none", "Bob": "none", "Cy": "none"}},
        ],
    })
    expanded = world.expand_tags()
    assert expanded.steps[0].observations["Ann"] == "kitchen"
    assert expanded.steps[1].observations["Ann"] == "Bob: waves"
    assert expanded.steps[1].observations["Bob"] == "Ann: opens the fridge"
    assert expanded.steps[1].observations["Cy"] == "Ann: opens the fridge; Bob: waves"
    assert world.steps[1].observations["Ann"] == "<same_as_last_action_1 />", "expand_tags must copy"


def test_perspective_is_the_agents_memory_without_none_steps() -> None:
    world = SocialWorld.from_s3ap(SALLY_ANNE)
    sally = world.perspective("sally")  # case-insensitive
    assert [e.timestep for e in sally] == ["0", "1"]
    assert sally[0].observation == "Sally and Anne are in the room. The marble is in the basket."
    assert sally[1].observation == "Sally: leaves the room"
    assert sally[1].mental_state == "The marble is in the basket."
    anne = world.perspective("Anne")
    assert [e.timestep for e in anne] == ["0", "1", "2"]
    assert "moves the marble to the box" in anne[2].observation
    assert "The marble is in the box." in anne[2].observation
    with pytest.raises(KeyError, match="unknown agent 'Bob'"):
        world.perspective("Bob")


def test_validate_scores_a_good_parse_fully() -> None:
    report = validate_s3ap(SALLY_ANNE)
    assert report.structural_score == 1.0
    assert report.ok, report.issues
    assert validate_s3ap(SocialWorld.from_s3ap(SALLY_ANNE)).ok


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda s: s[0]["observations"].update({"Anne": "<peeks />"}), "unknown_tag"),
        (lambda s: s[0]["actions"].update({"Sally": "leaves <mental_state>sad</mental_state>"}),
         "mental_state_misplaced"),
        (lambda s: s[0]["actions"].update({"Sally": "none"}), "no_actions"),
        (lambda s: s[1]["observations"].update({"Sally": "none", "Anne": "none"}), "no_observations"),
        (lambda s: s[2]["actions"].update({"Anne": "sings"}), "actions_at_last_step"),
        (lambda s: s[1].pop("actions"), "missing_field"),
        (lambda s: s[1]["observations"].pop("Anne"), "missing_agent"),
        (lambda s: s[1]["observations"].update({"Bobby": "hi"}), "unknown_agent"),
        (lambda s: s[1]["observations"].update({"Anne": "<same_as_last_action_7 />"}), "bad_tag_index"),
    ],
)
def test_rule_checks_report_each_problem(mutate, code) -> None:  # type: ignore[no-untyped-def]
    import copy

    raw = copy.deepcopy(SALLY_ANNE)
    mutate(raw["socialized_context"])
    report = validate_s3ap(raw)
    assert code in {i.code for i in report.issues}
    if code not in {"actions_at_last_step"}:
        assert not report.ok


def test_structural_score_drops_with_missing_fields() -> None:
    import copy

    raw = copy.deepcopy(SALLY_ANNE)
    del raw["socialized_context"][0]["state"]
    del raw["socialized_context"][1]["observations"]
    score = validate_s3ap(raw).structural_score
    assert 0 < score < 1
    assert validate_s3ap({"socialized_context": []}).structural_score == 0.0
    assert validate_s3ap("not json").structural_score == 0.0


def test_names_differing_in_case_or_spacing_are_normalised() -> None:
    raw = {"agents_names": ["Mary Jane", "Tom"], "socialized_context": [
        {"timestep": "0", "state": "s", "observations": ["mary jane: <same_as_state />", "TOM: none"],
         "actions": ["MaryJane: waves", "tom : none"]}]}
    world = SocialWorld.from_s3ap(raw)
    assert set(world.steps[0].observations) == {"Mary Jane", "Tom"}
    assert world.steps[0].actions == {"Mary Jane": "waves", "Tom": "none"}
    assert validate_s3ap(raw).unknown_agents == []


def test_unknown_names_are_kept_and_reported() -> None:
    raw = {"agents_names": ["Sally"], "socialized_context": [
        {"timestep": "0", "state": "s", "observations": ["Sally: x", "Sally_1: y"], "actions": ["Sally: z"]}]}
    world = SocialWorld.from_s3ap(raw)
    assert world.agents == ["Sally"]
    assert world.steps[0].observations["Sally_1"] == "y"
    assert validate_s3ap(world).unknown_agents == ["Sally_1"]


def test_social_step_forbids_unknown_fields() -> None:
    with pytest.raises(ValueError):
        SocialStep(timestep="0", sceen="typo")  # type: ignore[call-arg]
