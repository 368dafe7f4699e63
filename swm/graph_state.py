"""The one graph state every wiring reads and writes its part of.

Graph state carries ids and small typed values; bulk data (episodes, turns, pairs) lives in the
experience store. Keys written by parallel branches have reducers. Graphs that need more keys
subclass `SocialWorldState`.

Each graph also declares what a caller may pass (``*Input``: required keys marked, enums as
``Literal``) and what it gets back (``*Output``), so Studio and ``langgraph dev`` show both, and
`checks_input` turns bad input into a one-line `InputError` naming the field. The TypedDicts come
from ``typing_extensions``: pydantic (which builds the JSON schemas) refuses ``typing``'s on 3.11.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Required, TypeVar

from langgraph.config import get_config
from langgraph.graph import StateGraph
from langgraph.typing import InputT, OutputT, StateT
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails
from typing_extensions import TypedDict

from swm.context import ModelContext, ParseTask
from swm.defaults import Mode as Mode  # re-exported: swm.graph_state.Mode
from swm.errors import InputError
from swm.state import SocialWorld, ValidationReport
from swm.usage import CallStats, merge_usage

# what an answer stood on: a parse made by this run or one from the cache, each of which passed its check;
# a parse that failed its check on every attempt (the best one kept, made now or cached: ``parse_problems``
# lists what failed), none (no attempt gave a usable parse), or no parse at all (a mode that does not use one)
SocialStateUse = Literal["parsed", "cached", "failed check", "none", "not used"]
# what a person did at the ask graph's ``parse`` review point (`swm.nodes.review`): kept the parse, or corrected it
ParseReviewed = Literal["kept", "corrected"]
Usage = Annotated[dict[str, CallStats], merge_usage]
V = TypeVar("V")


class ParseAttempt(TypedDict, total=False):
    """One call of the parse loop: how it was sampled, what it cost, and what the check found in its reply."""

    attempt: int  # 1 for the first call, 2 for the first repair, ...
    temperature: float | None  # sent with this call (None: the model's own)
    seed: int | None  # sent with this call (None: none sent)
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    digest: str  # of the reply's S3AP, whitespace folded ("": no S3AP could be read)
    errors: int  # the check's errors on this reply (0: it passed)
    first_problem: str  # the first of them, or ""
    repeats: int | None  # the earlier attempt whose parse this reply repeated: the repairs stopped here


def merge_dict(left: Mapping[str, V] | None, right: Mapping[str, V] | None) -> dict[str, V]:
    """Reducer: later keys win."""
    return {**(left or {}), **(right or {})}


def story_hash(narrative: str) -> str:
    """Hash a narrative with its whitespace normalised, so re-wrapped text hits the parse cache."""
    return hashlib.sha256(" ".join(narrative.split()).encode()).hexdigest()


class SocialWorldState(TypedDict, total=False):
    """Keys of the parse and ask graphs; other wirings subclass it."""

    # input
    narrative: str
    question: str
    mode: Mode
    task: ParseTask  # default: the context's
    instruction: str  # a benchmark's own instruction before the task (ConfAIde's privacy prompt), unfenced
    # the parse
    story_hash: str
    world: SocialWorld | None
    report: ValidationReport | None
    attempts: int
    candidate: dict[str, Any] | None  # the latest raw S3AP reply, until `check` has read it
    candidate_error: str | None
    feedback: str
    parse_done: bool
    parse_cached: bool
    parse_problems: list[str]
    parse_attempts: list[ParseAttempt]  # this run's calls, in order (none for a cached parse)
    # the answer
    answer: str
    reasoning: str
    answer_error: str | None
    social_state: SocialStateUse
    parse_review: ParseReviewed
    # provenance and cost
    prompts: Annotated[dict[str, str], merge_dict]
    models: Annotated[dict[str, str], merge_dict]
    usage: Usage


class ParseInput(TypedDict, total=False):
    """What the ``parse`` graph takes: a story, and the benchmark whose parse rules apply."""

    narrative: Required[str]
    task: ParseTask  # default: the context's


class AskInput(ParseInput, total=False):
    """What the ``ask`` graph takes: a story, a question about it, and how to answer."""

    question: Required[str]
    mode: Mode  # default s3ap
    instruction: str  # a benchmark's own instruction before the task (ConfAIde's privacy prompt)


class Provenance(TypedDict, total=False):
    """What every graph's output ends with: prompt ids, models per role, and calls per node."""

    prompts: Annotated[dict[str, str], merge_dict]
    models: Annotated[dict[str, str], merge_dict]
    usage: Usage


class ParseOutput(Provenance, total=False):
    """What the ``parse`` graph returns: the best parse, its check, and where it came from."""

    story_hash: str
    task: ParseTask
    world: SocialWorld | None
    report: ValidationReport | None
    attempts: int
    parse_cached: bool
    parse_problems: list[str]
    parse_attempts: list[ParseAttempt]


class AskOutput(ParseOutput, total=False):
    """What the ``ask`` graph returns: the answer, its reasoning, and the parse it stood on."""

    mode: Mode
    answer: str
    reasoning: str
    answer_error: str | None
    social_state: SocialStateUse
    parse_review: ParseReviewed  # only with the ``parse`` review point


def check_input(schema: type[Any], state: Mapping[str, object]) -> None:
    """Raise an `InputError` naming every input key of ``state`` that does not fit ``schema``."""
    keys = schema.__required_keys__ | schema.__optional_keys__
    given = {k: v for k, v in state.items() if k in keys}
    try:
        _adapter(schema).validate_python(given)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}"
                             + _closest(schema, e) for e in exc.errors())
        raise InputError(f"invalid {schema.__name__}: {problems}", "see the graph's input schema") from None


def _fields_of(kind: object) -> dict[str, object]:
    """Return a TypedDict's or pydantic model's fields with their types ({} for anything else)."""


    while typing.get_origin(kind) in (Annotated, typing.Union) or type(kind).__name__ == "UnionType":
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        if not options:
            return {}
        kind = options[0]
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return {name: f.annotation for name, f in kind.model_fields.items()}
    if isinstance(kind, type) and hasattr(kind, "__required_keys__"):
        return typing.get_type_hints(kind)
    return {}


def _closest(schema: type[Any], error: ErrorDetails) -> str:
    """For an unknown key, name the closest valid key at the same place (`` (did you mean 'x'?)``)."""

    if error.get("type") != "extra_forbidden" or not error.get("loc"):
        return ""
    *path, unknown = error["loc"]
    fields = _fields_of(schema)
    for key in path:
        fields = _fields_of(fields.get(str(key)))
    close = difflib.get_close_matches(str(unknown), list(fields), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(schema: type[Any]) -> TypeAdapter[Any]:
    if schema not in _ADAPTERS:  # building one compiles a validator: once per schema
        _ADAPTERS[schema] = TypeAdapter(schema)
    return _ADAPTERS[schema]


NodeT = TypeVar("NodeT", bound=Callable[..., object])
C = TypeVar("C", bound=ModelContext)


def checks_input(schema: type[Any]) -> Callable[[NodeT], NodeT]:
    """Make an entry node (or router) check the graph's input against ``schema`` before it runs."""

    def wrap(node: NodeT) -> NodeT:
        @functools.wraps(node)
        def checked(state: Mapping[str, object], *args: object, **kwargs: object) -> object:
            check_input(schema, state)
            return node(state, *args, **kwargs)

        return checked  # type: ignore[return-value]

    return wrap


def thread_run_id(run_id: str, default: str) -> str:
    """Key a run left at the default ``run_id`` on its checkpoint thread (Studio, the SDK, ``invoke``).

    A run's store rows are keyed on ``run_id``: two runs on two threads that both left it at the
    default would share them, and the second would silently return the first one's results (no model
    call, whatever its model). The CLI sets ``run_id`` to the thread already.
    """
    if run_id != default:
        return run_id

    try:
        thread = (get_config().get("configurable") or {}).get("thread_id")
    except RuntimeError:  # called outside a run
        return run_id
    return str(thread) if thread else run_id


def new_graph(state: type[StateT], input_schema: type[InputT], output_schema: type[OutputT], *,
              context: type[C]) -> StateGraph[StateT, C, InputT, OutputT]:
    """Start a graph over ``state`` with ``context`` (its own context class) as its runtime context."""
    return StateGraph(state, context_schema=context, input_schema=input_schema, output_schema=output_schema)
