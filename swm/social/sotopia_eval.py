"""SOTOPIA's own episode evaluator, re-expressed: one call judges every agent with sotopia's full rubric.

Read from ``sotopia-lab/sotopia`` ``sotopia/envs/evaluators.py`` @ 850d4417 (``SotopiaDimensions``,
the ICLR 2024 dimensions, and ``ReachGoalLLMEvaluator``) and ``sotopia/generation_utils/generate.py``
(``agenerate``, ``format_bad_output``):

* the judge sees the interaction's history: the omniscient context (scenario, every participant's
  background and goal) and every turn, with the turns that say "did nothing" filtered out; it is
  not told why the episode ended;
* one call rates every agent (``agent_1_evaluation``, ``agent_2_evaluation``) on the seven
  dimensions, each ``[reasoning, score]`` (sotopia's ``tuple[str, int]``), under the full rubric
  below (it is the field descriptions of the schema, shown as format instructions); the
  backgrounds are sotopia's ("<First>'s secrets: …") and the prompt is sotopia's template
  (``"{history},\nBased on previous interactions, … Please following the format:"``);
* a reply that does not parse or validate (a missing field, a score out of its range) is sent once
  more, with the format instructions, to be reformatted; if that fails too the episode has no
  scores. Nothing is clamped or rounded.

The differences that remain are listed in docs/protocols.md (the reformatting model, the data
fences, the JSON-schema dialect of the format instructions, 6.6 not truncated).
"""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.output_parsers import PydanticOutputParser
from pydantic import BaseModel, ConfigDict, Field, create_model

from swm.social.judgement import DIMENSIONS, Judgement
from swm.social.models import AgentProfile, Scenario
from swm.state import SocialStep

SOURCE = "sotopia-lab/sotopia sotopia/envs/evaluators.py @ 850d4417a5ff7e50181bd192157fc051b6d3b850"

# SotopiaDimensions' field descriptions, word for word: they are what the judge model is shown.
OFFICIAL_RUBRIC: dict[str, str] = {
    "believability": (
        "Reasoning requirement: 1. Evaluate if the agent interacts with others in a natural and realistic manner "
        "(here are a few common questions to check: a. whether the agent is confusing with its own identity? b. "
        "whether the agent repeats others' words/actions without any reason? c. whether the agent is being overly "
        "polite considering the context?). Start the analysis with tag <naturalness> 2. Analyze whether the actions "
        "of the agent align with their character traits (e.g., personality, values, and etc.). Start the analysis "
        "with tag <consistency>. Output your reasoning process to the 'reasoning' field. Output an integer score "
        "ranging from 0 and 10 in the 'score' field. A higher score indicates that the agent is more believable."),
    "relationship": (
        "Please first analyze what relationship the participant has with the other agent(s) before the "
        "interaction. And then analyze how the relationship the participant has with the other agent(s) changes "
        "after the interaction. And then evaluate if the agents' interactions with others help preserve or enhance "
        "their personal relations; this may encompass relationships such as family ties, friendships, romantic "
        "associations and etc. Additionally, ascertain whether these interactions also impact their social status "
        "or reputation. In the 'reasoning' field, provide a comprehensive account of the logic or thought process "
        "that led you to your conclusion. Further, provide an integer score ranging from -5 to 5 in the 'score' "
        "field. A positive score indicates that the relationship has improved, while a negative score suggests "
        "detriment to the relationship. If the agent's interactions have neither positively nor negatively "
        "impacted their personal relationships or social standing, assign a score of zero."),
    "knowledge": (
        "Please first assess what information the agent has gained through the interaction. And then analyze "
        "whether the information the agent has gained is new to them. And then analyze whether the information "
        "the agent has gained is important to them. In the 'reasoning' field, provide a comprehensive account of "
        "the logic or thought process that led you to your conclusion. Further, provide an integer score ranging "
        "from 0 and 10 in the 'score' field. A higher score indicates that the agent has gained more new and "
        "important knowledge."),
    "secret": (
        "First please analyze what secret or secretive intention the participant wants to keep. And then analyze "
        "whether they keep it successfully. Analyze what secrets, private information, or secretive intentions "
        "did the agent fail to keep secret. Please output the reasoning in the reasoning field. Give an integer "
        "score ranging from -10 to 0 (-10 indicates participant leaks critical secrets/intentions, 0 indicates no "
        "secret/intention is revealed)"),
    "social_rules": (
        "Please evaluate whether the agent violates any moral rules or laws in their interactions with others. "
        "In the 'reasoning' field, provide a comprehensive account of the logic or thought process that led you "
        "to your conclusion. Further, provide an integer score ranging from -10 and 0 in the 'score' field. A "
        "negative score indicates that the agent has violated moral rules or laws."),
    "financial_and_material_benefits": (
        "Please evaluate whether the agent's interactions with others contribute towards financial and material "
        "benefits. Analyze what the agent would gain/lose after the interactions. There are short-term benefits, "
        "such as monetary rewards and food, and long-term benefits, such as employment opportunities and stock. "
        "In the 'reasoning' field, provide a comprehensive account of the logic or thought process that led you "
        "to your conclusion. Further, provide an integer score ranging from -5 and 5 in the 'score' field. "
        "Positive indicates financial and material benefits gain, while negative indicates loss"),
    "goal": (
        "Please first reiterate agent's social goals. And then please provide a comprehensive analysis about the "
        "extent to which the agent has managed to achieve these goals. In the 'reasoning' field, provide a "
        "comprehensive account of the logic or thought process that led you to your conclusion. Further, provide "
        "an integer score ranging from 0 and 10 in the 'score' field. 0 represents minimal goals achievement, 10 "
        "represents complete goal achievement, and a higher score indicates that the agent is making progress "
        "towards their social goals."),
}


def _dimension(name: str) -> Any:
    """One dimension as sotopia types it: ``tuple[str, int]``, ``[reasoning, score]``, the score in the
    dimension's range (sotopia's range validators; "7" and 7.0 pass, 11 does not; 6.6 does not either,
    where sotopia's pydantic 1 would truncate it to 6: docs/protocols.md); the enum is for grammar decoding."""
    low, high = DIMENSIONS[name]
    score = Annotated[int, Field(ge=low, le=high, json_schema_extra={"enum": list(range(low, high + 1))})]
    return tuple[str, score]  # type: ignore[valid-type]


_AGENT_FIELDS: dict[str, Any] = {name: (_dimension(name), Field(description=OFFICIAL_RUBRIC[name]))
                                 for name in DIMENSIONS}
AgentEvaluation: type[BaseModel] = create_model("EvaluationBySocialDimensions", __config__=ConfigDict(extra="forbid"),
                                                **_AGENT_FIELDS)


def episode_schema(agents: int) -> type[BaseModel]:
    """Return sotopia's ``EnvResponse`` for ``agents`` participants: ``agent_<i>_evaluation`` each."""
    fields: dict[str, Any] = {f"agent_{i + 1}_evaluation": (AgentEvaluation, ...) for i in range(agents)}
    model = create_model("EnvResponse", __config__=ConfigDict(extra="forbid"), **fields)
    model.__doc__ = "SOTOPIA-EVAL of every participant: [reasoning, integer score] per dimension."
    return model


EnvResponse = episode_schema(2)  # the two-agent form, as sotopia's own class (known to the loopback fake server)


def format_instructions(schema: type[BaseModel]) -> str:
    """Render the schema as sotopia's output parser does (langchain's ``PydanticOutputParser``)."""

    return PydanticOutputParser(pydantic_object=schema).get_format_instructions()


_GENDER_ADJ = {"man": "male", "woman": "female", "nonbinary": "nonbinary"}


def sotopia_background(name: str, profile: AgentProfile) -> str:
    """Render a participant's background as sotopia's environment shows it to the evaluator
    (``sotopia/envs/parallel.py`` ``_agent_profile_to_*_self``, viewer tags removed): "<Name> is a
    <age>-year-old <male|female|nonbinary> <occupation>. <pronouns> pronouns. <public info>
    Personality and values description: <…> <First>'s secrets: <secret>"."""
    first = profile.first_name or name.split()[0]
    gender = _GENDER_ADJ.get(profile.gender.lower(), profile.gender.lower())
    return (f"{name} is a {profile.age or 0}-year-old {gender} "
            f"{profile.occupation.lower()}. {profile.gender_pronoun} pronouns. {profile.public_info} Personality and "
            f"values description: {profile.personality_and_values} {first}'s secrets: {profile.secret}")


def history_text(scenario: Scenario, steps: list[SocialStep]) -> str:
    """Render what sotopia's evaluator reads: the omniscient context, then the turns, "did nothing" left out."""
    names = scenario.names
    lines = ["Here is the context of this interaction:", f"Scenario: {scenario.scenario}",
             f"Participants: {' and '.join(names)}"]
    lines += [f"{a.name}'s background: {sotopia_background(a.name, a.profile)}" for a in scenario.agents]
    lines += [f"{a.name}'s goal: {a.goal}" for a in scenario.agents]
    for step in steps:
        said = [text for text in step.actions.values() if "did nothing" not in text]
        lines += [f"Turn #{step.timestep}", *said]
    return "\n".join(lines)


def judgements_from(value: object, names: list[str], protocol: str) -> dict[str, Judgement]:
    """Read a validated ``EnvResponse`` into one `Judgement` per participant, in seat order."""
    out = {}
    for i, name in enumerate(names):
        evaluation = getattr(value, f"agent_{i + 1}_evaluation")
        scores = {d: getattr(evaluation, d)[1] for d in DIMENSIONS}  # sotopia: [reasoning, score]
        reasons = {d: getattr(evaluation, d)[0] for d in DIMENSIONS}
        out[name] = Judgement(agent=name, **scores, reasoning=reasons, protocol=protocol)
    return out


def unscored(names: list[str], why: str, protocol: str) -> dict[str, Judgement]:
    """Return the judgements of an episode sotopia would leave without scores: every dimension rejected."""
    return {name: Judgement(agent=name, rejected=list(DIMENSIONS), error=f"unscored: {why}", protocol=protocol)
            for name in names}
