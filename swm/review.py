"""Review points: where a graph stops for a person, what it shows them, and what it takes back.

A graph whose context names a point in ``review`` (`swm.context.ReviewContext`; none by default) calls LangGraph's
``interrupt()`` there: the run returns with ``__interrupt__`` holding a typed request, the thread's state lists
it (``graph.get_state(config).interrupts``), and ``graph.invoke(Command(resume=...), config, context=...)`` on
the same thread goes on from the point with the person's answer. Points:

* ``deploy`` (the ``lifelong`` graph, every cycle after the baseline): a `DeployRequest` with the candidate's and
  the deployed policy's dev-split rates per level and the deploy gate's verdict; answered by a `DeployReview`
  (``"approve"`` deploys the candidate, ``"refuse"`` keeps the deployed policy, whatever the gate said).
* ``parse`` (the ``ask`` graph, S3AP modes, before the answer): a `ParseRequest` with the parsed state and the
  checks it failed; answered by a `ParseReview` (``"keep"`` keeps the parse, ``{"world": {...}}`` replaces it
  with a corrected `SocialWorld`, which the answer then reads).

An answer that does not fit is refused in one line (`InputError`) and saves nothing: the thread still waits at
the same point, to be answered again.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from langgraph.types import interrupt
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from typing_extensions import TypedDict

from swm.errors import InputError
from swm.state import SocialWorld

R = TypeVar("R", bound=BaseModel)


class Rate(TypedDict):
    """One policy's cell: successes out of n episodes, and their rate."""

    successes: int
    n: int
    rate: float


class LevelRates(TypedDict):
    """One level of the dev split: the deployed policy's cell, the candidate's, and the difference of rates."""

    incumbent: Rate | None
    candidate: Rate | None
    delta: float | None


class GateVerdict(TypedDict):
    """What the deploy gate decided on its own (`swm.lifelong.deploy.decide`)."""

    deploy: bool
    reasons: list[str]
    explain: str


class DeployRequest(TypedDict):
    """What the ``deploy`` point shows a person: the candidate against the deployed policy on the dev split."""

    review: Literal["deploy"]
    run_id: str
    cycle: int
    incumbent: str  # the deployed policy version
    candidate: str  # this cycle's policy version
    metric: str  # the plan's deploy metric: "pass" or "completion"
    split: Literal["dev"]
    levels: dict[str, LevelRates]
    gate: GateVerdict
    answer: str  # how to answer, in words


class ParseRequest(TypedDict):
    """What the ``parse`` point shows a person: the parse the answer would read, and the checks it failed."""

    review: Literal["parse"]
    narrative: str
    question: str
    world: dict[str, Any] | None  # `SocialWorld.model_dump()`; None: no parse could be read
    ok: bool  # no check failed with severity "error"
    problems: list[str]  # ``severity: message`` per failed check
    cached: bool  # the parse came from the experience store's cache
    answer: str


class DeployReview(BaseModel):
    """A person's answer at the ``deploy`` point: ``"approve"``, ``"refuse"``, or ``{"decision": ..., "note": ...}``."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "refuse"]
    note: str = Field("", max_length=500, description="Why, in a line; kept with the cycle's decision.")

    @model_validator(mode="before")
    @classmethod
    def _bare_decision(cls, value: object) -> object:
        return {"decision": value} if isinstance(value, str) else value


class ParseReview(BaseModel):
    """A person's answer at the ``parse`` point: ``"keep"`` keeps the parse, ``{"world": {...}}`` corrects it.

    (Not ``{}``: LangGraph reads an empty dict as a map of interrupt ids to answers, and resumes nothing.)
    """

    model_config = ConfigDict(extra="forbid")

    world: SocialWorld | None = Field(None, description="The corrected parse (SocialWorld's fields); none keeps it.")

    @model_validator(mode="before")
    @classmethod
    def _keep(cls, value: object) -> object:
        return {} if value == "keep" else value


DEPLOY_ANSWER = ('resume with "approve" (deploy the candidate) or "refuse" (keep the deployed policy), or '
                 '{"decision": ..., "note": "why"}')
PARSE_ANSWER = 'resume with "keep" to keep this parse, or {"world": {"agents": [...], "steps": [...]}} to correct it'


def ask_person(request: DeployRequest | ParseRequest, answer: type[R]) -> R:
    """Stop the run with ``request`` and return the person's answer, read as ``answer``.

    LangGraph validates the resume value against ``answer`` before it keeps it, so one that does not fit saves
    nothing; it is refused here as one `InputError` line naming the first field that is wrong.
    """
    try:
        return interrupt(request, response_schema=answer)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "answer"
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InputError(f"the {request['review']} review's answer does not fit: {where}: {first['msg']}{more}",
                         request["answer"]) from None
