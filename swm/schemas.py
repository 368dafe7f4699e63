"""Bounded schemas sent to models as tools: every list and string has a maximum length.

Small models given an unbounded schema can loop until the token limit; the bounds below are
enforced by OpenAI's and llama.cpp's grammar-constrained decoding and by pydantic on return.
No string may allow more than 1,000 characters: llama.cpp's grammar parser refuses longer
repetitions (and its server exits on the refusal).

Reasoning keeps that cap in the schema sent to the model (llama.cpp's grammar stops it there),
but a longer reasoning from a server that does not enforce the schema (OpenAI, vLLM without
guided decoding) is truncated on return, ending in `TRUNCATED_MARK`, instead of failing the
whole reply: a long reasoning never turns a right answer into a wrong one.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, create_model

REASONING_CAP = 1000
TRUNCATED_MARK = " [...truncated]"


def _truncate(value: object) -> Any:
    if isinstance(value, str) and len(value) > REASONING_CAP:
        return value[: REASONING_CAP - len(TRUNCATED_MARK)] + TRUNCATED_MARK
    return value


def was_truncated(reasoning: object) -> bool:
    """Tell whether a reasoning string was cut to `REASONING_CAP` on return."""
    return isinstance(reasoning, str) and len(reasoning) == REASONING_CAP and reasoning.endswith(TRUNCATED_MARK)


# capped at REASONING_CAP in the tool schema; cut (not rejected) when a reply is longer
Reasoning = Annotated[str, StringConstraints(max_length=REASONING_CAP), BeforeValidator(_truncate)]

Name = Annotated[str, StringConstraints(max_length=60)]
Entry = Annotated[str, StringConstraints(max_length=600)]
MAX_AGENTS = 12
MAX_STEPS = 48


class SocializedStructureForModel(BaseModel):
    """One S3AP timestep in the paper's model-facing list form (appendix A.2)."""

    model_config = ConfigDict(extra="forbid")

    timestep: Annotated[str, StringConstraints(max_length=60)] = Field(
        description="The timestep: an integer or a description of the time of the state.")
    state: Annotated[str, StringConstraints(max_length=800)] = Field(
        description="The state of the world before the actions of this timestep ('none' if there is no prior context).")
    observations: list[Entry] = Field(
        max_length=MAX_AGENTS,
        description="One 'agent_name: observation' entry per agent; tags <same_as_state />, "
                    "<same_as_last_action_x />, <mental_state>...</mental_state>, or 'none'.")
    actions: list[Entry] = Field(
        max_length=MAX_AGENTS, description="One 'agent_name: action' entry per agent; 'none' if it does not act.")


class S3APParse(BaseModel):
    """The parser's whole answer: the agents and the list of timesteps."""

    model_config = ConfigDict(extra="forbid")

    agents_names: list[Name] = Field(max_length=MAX_AGENTS, description="Every agent's name, once each.")
    socialized_context: list[SocializedStructureForModel] = Field(
        max_length=MAX_STEPS, description="The timesteps in order.")


@lru_cache(maxsize=MAX_STEPS)
def s3ap_parse_schema(max_steps: int) -> type[S3APParse]:
    """Return `S3APParse` whose tool schema allows at most ``max_steps`` timesteps (``maxItems``; at most `MAX_STEPS`).

    The bound is in the schema sent to the model only, where grammar-constrained decoding (llama.cpp, OpenAI's
    strict mode) closes the list at that length; a reply with more timesteps from a server that does not enforce
    it still validates (up to `MAX_STEPS`), so the bound never turns a parse into a failure. Same tool name and
    description as `S3APParse`, so the request differs only in that number.
    """
    steps = max(1, min(max_steps, MAX_STEPS))
    if steps == MAX_STEPS:
        return S3APParse
    return create_model("S3APParse", __base__=S3APParse, __doc__=S3APParse.__doc__, __module__=__name__,
                        socialized_context=(list[SocializedStructureForModel], Field(
                            max_length=MAX_STEPS, json_schema_extra={"maxItems": steps},
                            description="The timesteps in order.")))


class ReasonedAnswer(BaseModel):
    """A theory-of-mind answer with its reasoning (CoT and S3AP modes)."""

    model_config = ConfigDict(extra="forbid")

    reasoning: Reasoning = Field(description="Step-by-step reasoning.")
    answer: Annotated[str, StringConstraints(max_length=200)] = Field(description="The short final answer only.")


class DirectAnswer(BaseModel):
    """A theory-of-mind answer with no reasoning (vanilla mode)."""

    model_config = ConfigDict(extra="forbid")

    answer: Annotated[str, StringConstraints(max_length=200)] = Field(description="The short final answer only.")


# A response the task asks for in full (a meeting summary, what someone should say): the tool
# schema says at most 1,000 characters, which llama.cpp's grammar enforces, but a longer reply
# from a server that ignores the schema is kept whole, since cutting it could cut a leaked
# secret or the public fact the scorer looks for.
LongText = Annotated[str, Field(json_schema_extra={"maxLength": REASONING_CAP})]


class ReasonedResponse(BaseModel):
    """A full-text response with its reasoning (ConfAIde in the CoT and S3AP modes)."""

    model_config = ConfigDict(extra="forbid")

    reasoning: Reasoning = Field(description="Step-by-step reasoning.")
    answer: LongText = Field(description="The full response the task asks for, and nothing else.")


class DirectResponse(BaseModel):
    """A full-text response with no reasoning (ConfAIde in vanilla mode)."""

    model_config = ConfigDict(extra="forbid")

    answer: LongText = Field(description="The full response the task asks for, and nothing else.")
