"""Builders shared by the core tests: valid and broken scripted parses."""

from __future__ import annotations

from swm.schemas import S3APParse

STORY = ("Sally and Anne are in the room. The marble is in the basket. Sally leaves the room. "
         "Anne moves the marble to the box.")


def good_parse() -> S3APParse:
    return S3APParse(agents_names=["Sally", "Anne"], socialized_context=[
        {"timestep": "0", "state": "Sally and Anne are in the room. The marble is in the basket.",
         "observations": ["Sally: <same_as_state />", "Anne: <same_as_state />"],
         "actions": ["Sally: leaves the room", "Anne: none"]},
        {"timestep": "1", "state": "Anne is in the room. The marble is in the basket.",
         "observations": ["Sally: <mental_state>The marble is in the basket.</mental_state>",
                          "Anne: <same_as_state /> <same_as_last_action_0 />"],
         "actions": ["Sally: none", "Anne: moves the marble to the box"]},
        {"timestep": "2", "state": "The marble is in the box.",
         "observations": ["Sally: none", "Anne: <same_as_state />"],
         "actions": ["Sally: none", "Anne: none"]},
    ])


def wrong_agents_parse() -> S3APParse:
    """Schema-valid but with an agent the story never mentions (as SmolLM2 does)."""
    return S3APParse(agents_names=["Sally", "Sally_1"], socialized_context=[
        {"timestep": "0", "state": "room", "observations": ["Sally: <same_as_state />", "Sally_1: none"],
         "actions": ["Sally: none", "Sally_1: none"]},
    ])
