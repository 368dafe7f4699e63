"""The runtime context: which model plays which role, and the knobs of every graph.

It travels as LangGraph's ``context`` (``graph.invoke(inp, config, context=SWMContext(...))``),
never in the checkpoint, so keys and injected models stay out of the saved state. Only
``thread_id`` goes in ``configurable``.
"""

from __future__ import annotations

import difflib
import functools
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar, cast, get_args

from langchain_core.language_models import BaseChatModel
from pydantic import TypeAdapter
from pydantic.json_schema import SkipJsonSchema

from swm.checkpoints.store import ExperienceStore, served_store
from swm.credentials import redact_spec
from swm.defaults import ACT_ORDERS as ACT_ORDERS  # re-exported: swm.context.ACT_ORDERS
from swm.defaults import ActOrder
from swm.defaults import ParseTask as ParseTask  # re-exported: swm.context.ParseTask
from swm.errors import InputError, ModelSpecError
from swm.faults import DEFAULT_LIMIT, FailureStreak
from swm.llm import (
    DEFAULT_MAX_RETRIES,
    ROLES,
    ModelReply,
    ModelSpec,
    default_spec,
    is_embedded,
    judge_default,
    make_chat_model,
    raw_text,
    takes_seed,
)
from swm.tracking import Tracker

if TYPE_CHECKING:
    from swm.checkpoints.store import StoreRecords

# whose wording the parser and QA prompts use: the paper's appendix (with the S3AP repository's task templates),
# the repository's older wording, or swm's own (swm/protocols.py)
PromptProtocol = Literal["paper", "repo", "swm"]
# the prompts a seat sends every turn that have a conversation-last variant (``<name>_prefix``) for act_order "prefix"
ORDERED_PROMPTS = ("episode_act", "foresee_predict", "foresee_refine")
# where a graph stops for a person (`swm.review`): the lifelong loop's deploy, the ask graph's parse
ReviewPoint = Literal["deploy", "parse"]
REVIEW_POINTS: tuple[str, ...] = get_args(ReviewPoint)

C = TypeVar("C", bound="ModelContext")


def refuse_unknown_keys(context: object, known: Collection[str], also: Collection[str] = ()) -> None:
    """Raise an `InputError` naming every key of ``context`` in neither ``known`` nor ``also`` (with the closest one).

    ``known`` are the keys the graph reads (the hint lists them); ``also`` are keys taken and left unread.
    """
    if not isinstance(context, Mapping):
        return
    unknown = sorted(str(k) for k in context if k not in known and k not in also)
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(key, [*known, *also], n=1, cutoff=0.6)
        named.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise InputError(f"unknown context key{'s' if len(unknown) > 1 else ''} {', '.join(named)}",
                     f"the context takes {', '.join(known)}")


@functools.cache
def json_keys(schema: Any) -> tuple[str, ...]:
    """Return the keys a context class takes over the API: the properties of its JSON schema (Studio's form)."""
    return tuple(TypeAdapter(schema).json_schema().get("properties") or {})


def graph_context(cls: type[C]) -> type[C]:
    """Let a graph's context class be made from any `SWMContext` key: the ones the graph does not read are dropped.

    LangGraph makes the context class from a ``context={...}`` dict (``graph.invoke``), so a dict written for
    `SWMContext`, or for another graph, runs unchanged; a key no graph takes fails at once with one line naming
    it and the closest valid one (a misspelt ``"modle"`` would otherwise be a bare ``TypeError``).
    """
    strict = cls.__init__

    @functools.wraps(strict)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        own = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        if not own.issuperset(kwargs):
            refuse_unknown_keys(kwargs, json_keys(cast(Any, cls)), also=[f.name for f in fields(SWMContext)])
            kwargs = {k: v for k, v in kwargs.items() if k in own}
        strict(self, *args, **kwargs)

    setattr(cls, "__init__", __init__)  # noqa: B010  (mypy refuses assigning a method)
    return cls


@dataclass
class ModelContext:
    """The context every graph reads: which model plays which role, how it is reached, and the store.

    Models: ``llm`` (a chat model object for every role, as tests inject a scripted one),
    ``chat_models`` (objects per role), ``models`` (spec strings per role), ``model`` (one spec
    for every role); unset roles fall back to ``SWM_MODEL_<ROLE>``, ``SWM_MODEL``, OpenAI when
    ``OPENAI_API_KEY`` is set, else the embedded model. The judge is configured apart: ``models``
    ["judge"], then `swm.llm.judge_default` (``SWM_MODEL_JUDGE``, or gpt-4o on OpenAI), and only
    then the model every role uses; `judge_is_agent` tells when it ends up judging itself.

    Each graph's context adds to it only the knobs its nodes read (`ParseContext`, `AskContext`,
    `ActContext`, `EpisodeContext`, `GameContext`, `LifelongContext`, `SelfPlayContext`), so Studio
    shows each graph its own; `SWMContext` holds them all and is accepted by every graph.
    """

    model: str | None = None
    models: dict[str, str] = field(default_factory=dict)
    # Python objects (tests inject scripted models): no JSON form, so left out of the context schema
    # that Studio and the server show; over the API, models are chosen by spec strings
    llm: SkipJsonSchema[BaseChatModel | None] = None
    chat_models: SkipJsonSchema[dict[str, BaseChatModel]] = field(default_factory=dict)
    temperature: float = 0.0
    max_tokens: int | None = None
    # endpoint faults: seconds per request (None: 120, or 600 for the embedded server) and the
    # OpenAI client's retries of a timeout, dropped connection, 429 or 5xx (see swm/llm.py)
    timeout: float | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    # the experience store (parse cache, episodes, pairs); an in-memory one when None
    store: SkipJsonSchema[Any] = None

    def __post_init__(self) -> None:
        # Built models and the lock are not fields, so the context's JSON schema (Studio) stays plain.
        self._cache: dict[Any, Any] = {}
        self._lock = threading.Lock()
        unknown = sorted(set(self.models) - set(ROLES))
        if unknown:
            raise ModelSpecError(f"unknown role {unknown[0]!r} in models", f"roles are {', '.join(ROLES)}")
        for spec in [self.model, *self.models.values()]:
            if spec:
                ModelSpec.parse(spec)  # a malformed spec fails here, before any graph runs

    def check_models(self) -> None:
        """Build every role's model now, so a missing key or package fails before the first call.

        The embedded server is not started here (that takes a while); its spec is only parsed.
        """
        for role in ROLES:
            injected = role in self.chat_models or self.llm is not None
            if injected or is_embedded(ModelSpec.parse(self.spec_for(role)).name):
                continue
            self.model_for(role)

    def spec_for(self, role: str) -> str:
        """Return the model spec a role uses as it may be stored and printed: a key in its URL shows as ``***``.

        ``<injected TYPE>`` stands for an injected object.
        """
        return redact_spec(self._spec(role))

    def _spec(self, role: str) -> str:
        """Return the spec a role's model is built from, key included (never stored or printed)."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
        if role in self.chat_models or self.llm is not None:
            obj = self.chat_models.get(role, self.llm)
            return f"<injected {type(obj).__name__}>"
        if role == "judge":
            return self.models.get(role) or judge_default() or self.model or default_spec(role)
        return self.models.get(role) or self.model or default_spec(role)

    def judge_is_agent(self) -> bool:
        """Tell whether the judge role runs the tested agent's own model (self-judging)."""
        if self.llm is not None or self.chat_models:
            return self.chat_models.get("judge", self.llm) is self.chat_models.get("agent", self.llm)
        return self._spec("judge") == self._spec("agent")

    def model_for(self, role: str) -> BaseChatModel:
        """Return the chat model for a role, built once per context."""
        if role in self.chat_models:
            return self.chat_models[role]
        if self.llm is not None:
            return self.llm
        spec = self._spec(role)
        with self._lock:
            if spec not in self._cache:
                self._cache[spec] = make_chat_model(spec, temperature=self.temperature, max_tokens=self.max_tokens,
                                                    timeout=self.timeout, max_retries=self.max_retries)
            return self._cache[spec]

    def uses_embedded(self) -> bool:
        """Tell whether any role would run on the embedded model."""
        return any(is_embedded(self.spec_for(r)) and "@" not in self.spec_for(r) for r in ROLES)

    def experience_store(self) -> StoreRecords:
        """Return the experience store: the one given, the server's, else an in-memory one opened on first use."""
        if self.store is None:
            with self._lock:
                if self.store is None:
                    self.store = served_store() or ExperienceStore(":memory:")
        return self.store

    def record_failed_reply(self, node: str, role: str, reply: ModelReply, key: str = "") -> None:
        """Keep a reply that did not fit its schema (bounded) in the store's ``failed_replies`` table."""
        if reply.error is None:
            return
        self.experience_store().put_failed_reply(node=node, model=self.spec_for(role), error=reply.error,
                                                 raw=raw_text(reply.raw), key=key)


@dataclass
class PromptContext(ModelContext):
    """A model context whose graph loads prompt templates: a version may be pinned per template."""

    prompt_versions: dict[str, str] = field(default_factory=dict)

    def prompt_version(self, name: str) -> str | None:
        return self.prompt_versions.get(name)


@dataclass
class ReviewContext(ModelContext):
    """A model context whose graph can stop for a person at the review points named in ``review`` (none: never).

    Each point is LangGraph's ``interrupt()``: the run pauses with a typed request (`swm.review`) and goes on
    when resumed with ``Command(resume=...)`` on the same thread, which needs a checkpointer. A graph reads
    only its own points, so one list serves every graph.
    """

    review: list[ReviewPoint] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        points = [self.review] if isinstance(self.review, str) else list(self.review or [])
        for point in points:
            if point not in REVIEW_POINTS:
                close = difflib.get_close_matches(str(point), REVIEW_POINTS, n=1, cutoff=0.6)
                named = f"{point!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                raise InputError(f"unknown review point {named}", f"review takes {', '.join(REVIEW_POINTS)}")
        self.review = list(dict.fromkeys(points))

    def reviews(self, point: ReviewPoint) -> bool:
        """Tell whether the graph stops for a person at ``point``."""
        return point in self.review


@graph_context
@dataclass
class ParseContext(PromptContext):
    """The ``parse`` graph's context: whose parse rules and prompts apply, and its bounds."""

    task: ParseTask = "generic"
    max_parse_attempts: int = 3
    max_narrative_chars: int = 60_000
    prompt_protocol: PromptProtocol = "paper"
    # the most timesteps a parse may have, per sentence of the narrative (the tool schema's maxItems, which
    # grammar-constrained decoding enforces; 0: the schema's 48). The paper's example folds 4 sentences into 3
    # timesteps; a small model looping on timesteps stops there instead of at the token cap (README's story on
    # the embedded model: two of three parse attempts wrote 1,536 tokens each, unbounded)
    steps_per_sentence: int = 1
    # a repair must not repeat the attempt it repairs: at temperature 0, given the same prompt but for the
    # feedback, the embedded model wrote nearly the same parse twice (README's story: ~45 of 112 s spent on two
    # repairs that changed nothing). Repair k (the parse's attempt k + 1) is sampled at this temperature (None:
    # the model's own; a reasoning model is sent none) with seed `repair_seed` + k, sent only to models that
    # take a seed (OpenAI-compatible servers: OpenAI, vLLM, llama-server); None: no seed
    repair_temperature: float | None = 0.7
    repair_seed: int | None = 0

    def repair_sampling(self, model: BaseChatModel, repair: int) -> dict[str, Any]:
        """Return the sampling settings of repair ``repair`` (1 for the first repair; 0, a first attempt: none).

        They are sent with the call (``model.invoke(..., temperature=…, seed=…)``), so the model object and
        its other settings stay as they are.
        """
        if repair <= 0:
            return {}
        settings: dict[str, Any] = {}
        if self.repair_temperature is not None and not ModelSpec.parse(self._spec("parser")).reasoning:
            settings["temperature"] = self.repair_temperature
        if self.repair_seed is not None and takes_seed(model):
            settings["seed"] = self.repair_seed + repair
        return settings


@graph_context
@dataclass
class AskContext(ParseContext, ReviewContext):
    """The ``ask`` graph's context: the parse graph's, what to do with a story that would not parse, and whether
    a person reviews the parse before the answer (``review=["parse"]``)."""

    # an S3AP mode whose story could not be parsed: answer from the story alone (True; the output's
    # ``social_state`` says "none") or give no answer at all (False, `swm ask`'s default)
    allow_without_state: bool = True


@graph_context
@dataclass
class ActContext(PromptContext):
    """The ``foresee_act`` graph's context: a seat's acting prompts and their order."""

    # the acting prompt's order: "sotopia" (SOTOPIA's: the conversation, then the turn, action types and
    # format) or "prefix" (the same text with the conversation last, so a seat's next prompt extends its
    # last one and a server's prefix cache serves all but the new turns; Foresee-and-Act's predict and
    # refine prompts likewise: `ordered_prompt`)
    act_order: ActOrder = "sotopia"

    def ordered_prompt(self, name: str) -> str:
        """The template a seat's per-turn prompt ``name`` uses in `act_order` (``<name>_prefix`` in "prefix")."""
        return f"{name}_prefix" if self.act_order == "prefix" and name in ORDERED_PROMPTS else name

    def act_prompt_name(self) -> str:
        """The acting prompt's template name for `act_order` (``episode_act`` or ``episode_act_prefix``)."""
        return self.ordered_prompt("episode_act")


# a node that two graphs share reads the narrower context (a graph's context class is invariant in LangGraph's types)
ParseT = TypeVar("ParseT", bound=ParseContext)
ActT = TypeVar("ActT", bound=ActContext)


@graph_context
@dataclass
class EpisodeContext(ActContext):
    """The ``episode`` and ``lookahead`` graphs' context: the acting one, and the look-ahead policy's size."""

    lookahead_width: int = 1
    lookahead_depth: int = 1


@graph_context
@dataclass
class GameContext(PromptContext):
    """The ``game`` graph's context: models and the pinned prompt versions, nothing more."""


@graph_context
@dataclass
class SelfPlayContext(ModelContext):
    """The ``selfplay`` graph's context: the judge's model (for ``judge_weight``), the store and the run's tracker;
    the plan holds everything else."""

    # where each iteration's summary is logged (`swm.tracking`; a Python object, left out of the schema): the
    # command opens the plan's ``report_to`` once a run (`swm.graphs.selfplay.train`); none by default
    tracker: SkipJsonSchema[Any] = field(default_factory=Tracker)


@graph_context
@dataclass
class LifelongContext(EpisodeContext, GameContext, ReviewContext):
    """The ``lifelong`` graph's context: the episode and game graphs' (it plays them), the run's own knobs, and
    whether a person approves each deploy (``review=["deploy"]``)."""

    # a long run records an item that still fails and goes on, but stops after this many in a row
    max_failures_in_a_row: int = DEFAULT_LIMIT
    # where this invocation writes reports and exports (the lifelong plan's out_dir when None): a
    # resumed or copied thread never writes into the folder of the run it was started as
    out_dir: str | None = None
    # a lifelong rerun of a phase that stopped on failed episodes sends those episodes again, once
    resend_failed: bool = False
    # where each cycle's numbers and each training step's logs go (`swm.tracking`): ``swm learn`` opens the
    # plan's ``report_to`` once a run; none by default
    tracker: SkipJsonSchema[Any] = field(default_factory=Tracker)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.failures = FailureStreak(self.max_failures_in_a_row)

    def with_models(self, overrides: dict[str, str]) -> Self:
        """Return a context whose roles in ``overrides`` use those specs (same store and knobs), built once.

        The lifelong loop plays a trained policy this way: its learner seats get the policy's
        served model while the judge and world model keep the run's own.
        """
        if not overrides:
            return self
        return self._derived(("with_models", tuple(sorted(overrides.items()))),
                             models={**self.models, **overrides})

    def with_act_order(self, order: ActOrder) -> Self:
        """Return a context that acts in ``order`` (same store, models and knobs), built once."""
        return self if order == self.act_order else self._derived(("with_act_order", order), act_order=order)

    def _derived(self, key: tuple[Any, ...], **changes: Any) -> Self:
        """Return the context with ``changes``, built once per ``key``: same store, one failure streak."""
        store = self.experience_store()  # shared, so the derived context writes the same store
        with self._lock:
            derived = self._cache.get(key)
            if derived is None:
                derived = replace(self, store=store, **changes)
                derived.failures = self.failures  # one failure streak per run, whichever seat failed
                self._cache[key] = derived
        return cast(Self, derived)


@dataclass
class SWMContext(LifelongContext, AskContext, SelfPlayContext):
    """Every knob of every graph: what the CLI and Python callers build, accepted by each graph.

    A graph reads only the fields of its own context (``graph.context_schema``); the rest ride along unread.
    """
