"""The model factory and the one place every LLM call goes through.

A role (parser, qa, agent, world_model, partner, judge) gets a LangChain chat model from a spec:
``name`` (OpenAI, or ``OPENAI_BASE_URL``), ``name@base_url`` (any OpenAI-compatible server:
vLLM, llama.cpp, Ollama), ``provider:name`` (LangChain's ``init_chat_model``: ``anthropic:…``,
``ollama:…``, for providers whose package is installed), or ``embedded`` (the local llama.cpp
server, the default when no key is set; ``embedded:lora=ADAPTER.gguf`` serves a trained policy's
adapter on it). A spec that cannot work (no URL scheme, no package, no key) is a `ModelSpecError`
before the first call. Structured output binds the pydantic schema as a tool
(``method="function_calling"``), which OpenAI, vLLM and llama.cpp's server all enforce.
`call_model` times and counts each call.

Transient endpoint faults are retried in one place only: the OpenAI client's own retry loop
(``max_retries``), which re-sends just the failed HTTP request on a timeout, a dropped or refused
connection, 408/409/429 and 5xx, with exponential backoff (0.5 s doubling to 8 s, minus up to 25%
jitter) and honours the server's ``Retry-After`` / ``retry-after-ms`` (up to two minutes).
LangGraph's ``RetryPolicy`` would re-run a whole node instead (the judge's two calls, a whole
lifelong episode) and cannot honour ``Retry-After``, so no node carries a model retry policy.
What still fails after the retries becomes one `SWMError` with one line to print: the endpoint
is unreachable (`ModelUnavailable`), timed out (`ModelTimeout`) or failed (`ModelCallFailed`).
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableBinding, RunnableSequence
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel

from swm.credentials import endpoint_key, redact_url
from swm.deadline import deadline_client
from swm.defaults import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, EMBEDDED_TIMEOUT
from swm.defaults import ROLES as ROLES  # re-exported: swm.llm.ROLES
from swm.errors import ModelCallFailed, ModelSpecError, ModelTimeout, ModelUnavailable, NotAChatCompletion, SWMError
from swm.inputs import without_nul
from swm.usage import CallStats, usage_of

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_JUDGE_MODEL = "gpt-4o"  # SOTOPIA-EVAL's evaluator, kept apart from the models it judges
EMBEDDED = "embedded"
EMBEDDED_MAX_TOKENS = 1536  # room for a 6-step S3AP parse; SmolLM2's context is 8,192
EMBEDDED_RESENDS = 3  # a request in flight when the embedded server went down is sent again this often


REASONING_MARK = "reasoning:"
# OpenAI's o-series (o1, o3, o3-mini, o4-mini, ...), GPT-5-class models and DeepSeek-R1 take no
# temperature (the paper sets 0.0 only for the others); matched on the name after any "org/".
_REASONING_NAME = re.compile(r"^(o\d+(-.*)?|gpt-5.*|deepseek-r1.*|deepseek-reasoner.*)$", re.IGNORECASE)


# init_chat_model's providers (langchain.chat_models), as of langchain 1.4; the installed
# langchain's own list wins when it can be read (`providers`).
_PROVIDERS = ("anthropic", "anthropic_bedrock", "azure_ai", "azure_openai", "baseten", "bedrock", "bedrock_converse",
              "cohere", "deepseek", "fireworks", "google_anthropic_vertex", "google_genai", "google_vertexai", "groq",
              "huggingface", "ibm", "litellm", "meta", "mistralai", "nvidia", "ollama", "openai", "openrouter",
              "perplexity", "together", "upstage", "xai")


def providers() -> dict[str, str]:
    """Return init_chat_model's providers, each with the Python module its LangChain package installs."""
    try:
        from langchain.chat_models.base import _BUILTIN_PROVIDERS  # private, so read defensively

        found = {name: str(entry[0]).split(".")[0] for name, entry in dict(_BUILTIN_PROVIDERS).items()}
    except (ImportError, AttributeError, TypeError, IndexError):
        found = {}
    return found or {name: f"langchain_{name.split('_')[0]}" for name in _PROVIDERS}


def _check_url(spec: str, url: str) -> str:

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        hint = f"write it as http://{url}" if "://" not in url else "use an http:// or https:// URL"
        raise ModelSpecError(f"model spec {spec!r} has no usable base URL ({url!r})", hint)
    return url


@dataclass(frozen=True)
class ModelSpec:
    """A model name, optionally its provider or the OpenAI-compatible base URL that serves it, and whether it reasons.

    Forms: ``name`` (OpenAI, or ``OPENAI_BASE_URL``), ``name@base_url`` (any OpenAI-compatible
    server), ``provider:name[@base_url]`` (LangChain's ``init_chat_model`` providers:
    ``anthropic:claude-…``, ``ollama:llama3.1``, ``openai:gpt-4o``, …) and ``embedded[:lora=…]``.
    ``reasoning:`` in front marks any model as a reasoning model; the o-series, GPT-5-class and
    DeepSeek-R1 names are recognised without the mark. A reasoning model is sent no temperature.
    A prefix that is not a provider stays part of the name (``llama3:8b@http://…``, ``ft:gpt-4o…``).
    """

    name: str
    base_url: str | None = None
    marked_reasoning: bool = False
    provider: str | None = None

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        """Split a spec into its parts; a malformed one raises `ModelSpecError` (a ValueError too)."""
        text = spec.strip()
        marked = text.startswith(REASONING_MARK)
        name, sep, url = text.removeprefix(REASONING_MARK).partition("@")
        provider: str | None = None
        head, colon, rest = name.partition(":")
        if colon and head in providers():
            provider, name = head, rest
        elif colon and not sep and not is_embedded(name):
            close = difflib.get_close_matches(head, list(providers()), n=1, cutoff=0.8)
            if close:
                raise ModelSpecError(f"unknown model provider {head!r} in {spec!r}", f"did you mean {close[0]!r}?")
        if not name:
            raise ModelSpecError(f"model spec {spec!r} has no model name",
                                 "use 'name', 'name@base_url', 'provider:name' or 'embedded'")
        if sep:
            _check_url(spec, url)
        return cls(name=name, base_url=(url or None) if sep else None, marked_reasoning=marked, provider=provider)

    @property
    def reasoning(self) -> bool:
        """Tell whether the model is a reasoning model (marked, or known by name)."""
        return self.marked_reasoning or bool(_REASONING_NAME.match(self.name.rsplit("/", 1)[-1]))

    def __str__(self) -> str:
        name = f"{self.provider}:{self.name}" if self.provider else self.name
        text = f"{name}@{self.base_url}" if self.base_url else name
        return REASONING_MARK + text if self.marked_reasoning else text


def default_spec(role: str) -> str:
    """Return the spec a role uses when none is given: env, then OpenAI if keyed, else embedded."""
    explicit = os.environ.get(f"SWM_MODEL_{role.upper()}") or os.environ.get("SWM_MODEL")
    if explicit:
        return explicit
    return DEFAULT_OPENAI_MODEL if os.environ.get("OPENAI_API_KEY") else EMBEDDED


def judge_default() -> str | None:
    """Return the judge's own spec unless one is set per role: ``SWM_MODEL_JUDGE``, else
    `DEFAULT_JUDGE_MODEL` on OpenAI itself (a key and no ``OPENAI_BASE_URL``); None when neither,
    and the judge then shares the model every role uses."""
    explicit = os.environ.get("SWM_MODEL_JUDGE")
    if explicit:
        return explicit
    if os.environ.get("OPENAI_API_KEY") and not os.environ.get("OPENAI_BASE_URL"):
        return DEFAULT_JUDGE_MODEL
    return None


def is_embedded(name: str) -> bool:
    """Tell whether a spec's model name is the embedded server (``embedded`` or ``embedded:lora=…``)."""
    return name == EMBEDDED or name.startswith(EMBEDDED + ":")


def make_chat_model(spec: str, *, temperature: float = 0.0, max_tokens: int | None = None,
                    timeout: float | None = None, max_retries: int = DEFAULT_MAX_RETRIES) -> BaseChatModel:
    """Build the chat model for a spec; keys come from the environment and are never stored.

    ``timeout`` is per request (default `DEFAULT_TIMEOUT`, `EMBEDDED_TIMEOUT` for the embedded
    server); ``max_retries`` is the client's retries of transient faults (none for the embedded
    server, which is local: a retry there only repeats a slow call).

    A reasoning model (see `ModelSpec`) gets no temperature at all, whatever ``temperature`` says.
    """
    from langchain_openai import ChatOpenAI

    parsed = ModelSpec.parse(spec)
    if parsed.base_url is None and is_embedded(parsed.name):
        from swm.serving.chat import LlamaServerChat
        from swm.serving.embedded import ENGINE, SAMPLING, ensure_server, parse_spec

        base, lora = parse_spec(parsed.name) or (None, None)
        server = ensure_server(base=base, lora=lora)
        chat = LlamaServerChat if server.engine == ENGINE else ChatOpenAI
        # langchain-openai sends the cap as max_completion_tokens, which llama.cpp's server ignores;
        # its own max_tokens goes in the body, so a small model cannot loop to the context limit.
        # On llama-server the body also names the request's LoRA adapter (`swm.serving.llama_server`).
        return chat(model="embedded", base_url=server.base_url, api_key="sk-no-key-needed",  # type: ignore[arg-type]
                    temperature=temperature, timeout=timeout or EMBEDDED_TIMEOUT, max_retries=0,
                    http_client=deadline_client(timeout or EMBEDDED_TIMEOUT),
                    extra_body={"max_tokens": max_tokens or EMBEDDED_MAX_TOKENS, **SAMPLING, **server.fields})
    if parsed.provider not in (None, "openai"):
        return _provider_model(parsed, temperature=temperature, max_tokens=max_tokens,
                               timeout=timeout or DEFAULT_TIMEOUT, max_retries=max_retries)
    base_url = parsed.base_url or os.environ.get("OPENAI_BASE_URL") or None
    if base_url:
        _check_url(spec if parsed.base_url else f"OPENAI_BASE_URL={base_url}", base_url)
    if parsed.base_url:  # another endpoint: its own key, never OpenAI's unless it is OpenAI's (swm.credentials)
        base_url, key = endpoint_key(parsed.base_url)
    else:
        key = os.environ.get("OPENAI_API_KEY")
    if not key and parsed.base_url is None and base_url is None:
        raise ModelSpecError(f"model {parsed.name!r} needs OPENAI_API_KEY",
                             "set OPENAI_API_KEY, or give the model as name@base_url, or use 'embedded'")
    seconds = timeout or DEFAULT_TIMEOUT
    return ChatOpenAI(model=parsed.name, base_url=base_url, api_key=key or "EMPTY",  # type: ignore[arg-type]
                      temperature=None if parsed.reasoning else temperature, max_tokens=max_tokens,
                      timeout=seconds, max_retries=max_retries, http_client=deadline_client(seconds))


def _provider_model(parsed: ModelSpec, **settings: Any) -> BaseChatModel:
    """Build a ``provider:name`` model through LangChain's ``init_chat_model``; one-line errors before any call."""
    module = providers()[str(parsed.provider)]
    package = module.replace("_", "-")
    if importlib.util.find_spec("langchain") is None:
        raise ModelSpecError(f"model spec '{parsed}' needs LangChain's init_chat_model",
                             "pip install langchain (and the provider's package)")
    if importlib.util.find_spec(module) is None:
        raise ModelSpecError(f"provider {parsed.provider!r} needs the {package} package", f"pip install {package}")
    from langchain.chat_models import init_chat_model

    if parsed.reasoning:
        settings["temperature"] = None
    if parsed.base_url:
        settings["base_url"], key = endpoint_key(parsed.base_url)
        if key:
            settings["api_key"] = key
    try:
        return init_chat_model(parsed.name, model_provider=parsed.provider, **settings)
    except Exception as exc:  # noqa: BLE001 - a provider's constructor refuses (no key, bad option): one line
        first = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ModelSpecError(f"cannot build model '{parsed}': {first}",
                             f"check the {parsed.provider} API key and settings in the environment") from exc


def takes_seed(model: BaseChatModel) -> bool:
    """Tell whether a model can be sent a ``seed`` with a call: LangChain's OpenAI client can (OpenAI, vLLM and
    llama-server read it); another provider's client may pass an argument it does not know on and be refused."""
    from langchain_openai import ChatOpenAI

    return isinstance(model, ChatOpenAI)


@dataclass
class ModelReply:
    """What one call returned: the parsed value (or text), the raw message and its cost."""

    value: Any
    raw: AIMessage | None
    stats: CallStats
    error: str | None = None


def _endpoint_of(model: BaseChatModel) -> str:
    where = getattr(model, "openai_api_base", None) or getattr(model, "model_name", "") or type(model).__name__
    return redact_url(str(where))


def call_model(model: BaseChatModel, messages: list[BaseMessage] | str,
               schema: type[BaseModel] | None = None, settings: dict[str, Any] | None = None) -> ModelReply:
    """Call a chat model once, for text or for a pydantic schema, and count the call.

    ``settings`` go with this call only, over the model's own (``temperature``, ``seed``: a parse repair's,
    `swm.context.ParseContext.repair_sampling`).
    A reply that does not fit the schema comes back with ``error`` set and ``value`` None, so a
    node can repair or record it. A fault the client's retries did not cure raises
    `ModelUnavailable`, `ModelTimeout` or `ModelCallFailed` (see `endpoint_error`).
    """
    start = time.perf_counter()
    attempts = _retries(model) + 1
    attempt = revived = 0
    while True:
        try:
            raw, value, error, nul_removed = _invoke(model, messages, schema, settings or {})
            break
        except Exception as exc:  # noqa: BLE001 - classified below
            failure = endpoint_error(exc, model)
            if failure is None:
                raise
            # the OpenAI client retries transport faults itself; an answer that is not a chat
            # completion (HTTP 200 all the same) is retried here, with the client's backoff
            if isinstance(failure, NotAChatCompletion) and attempt + 1 < attempts:
                time.sleep(min(0.5 * 2 ** attempt, 8.0))
                attempt += 1
                continue
            # the embedded server died or was restarted with this request in flight: once it is up
            # again (started anew on its port if need be), only this request is sent again
            if revived < EMBEDDED_RESENDS and embedded_revived(exc, _endpoint_of(model)):
                revived += 1
                continue
            raise failure from exc
    prompt_tokens, completion_tokens, unknown = usage_of(raw)
    stats = CallStats(calls=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                      seconds=round(time.perf_counter() - start, 6), failures=1 if error else 0,
                      unknown_usage=int(unknown), nul_removed=nul_removed)
    return ModelReply(value=value, raw=raw, stats=stats, error=error)


def message_without_nul(message: object) -> tuple[Any, int]:
    """Remove NUL characters from a reply's text and tool-call arguments; return it and how many went.

    A model can emit ``\\u0000``; PostgreSQL refuses it in text and JSONB, and a thread whose
    checkpoint holds it could never be written (every resume replays the refused write).
    """

    if not isinstance(message, AIMessage):
        return message, 0
    fields = {"content": message.content, "tool_calls": message.tool_calls,
              "invalid_tool_calls": message.invalid_tool_calls, "additional_kwargs": message.additional_kwargs}
    cleaned, removed = without_nul(fields)
    return (message.model_copy(update=cleaned), removed) if removed else (message, 0)


def _invoke(model: BaseChatModel, messages: list[BaseMessage] | str, schema: type[BaseModel] | None,
            settings: dict[str, Any]) -> tuple[AIMessage | None, Any, str | None, int]:
    """Send one request; return the raw reply (NUL removed), its value, why it does not fit the schema
    (if it does not) and how many NUL characters were removed."""
    if schema is None:
        raw, nul_removed = message_without_nul(model.invoke(messages, **settings))  # type: ignore[arg-type]
        return raw, (raw.content if raw is not None else ""), None, nul_removed
    bound, parser = _structured(model, schema)
    raw, nul_removed = message_without_nul(bound.invoke(messages, **settings))
    try:
        value = parser.invoke(raw)
    except Exception as exc:  # noqa: BLE001 - any parser failure is a reply that does not fit
        return raw, None, _describe_parse_error(exc, raw), nul_removed
    if value is None:
        return raw, None, _describe_parse_error(None, raw), nul_removed
    return raw, value, None, nul_removed


def _retries(model: BaseChatModel) -> int:
    retries = getattr(model, "max_retries", None)
    return retries if isinstance(retries, int) and retries > 0 else 0


# (id(model), schema) -> (model, bound model, parser). Building a structured runnable converts the
# schema to a tool (~3 ms for S3APParse), and `include_raw=True` wraps it in a RunnableParallel
# that starts two threads per call; both are per-call overhead, measured by `bench/`. The model
# is kept in the entry so its id cannot be reused while the entry lives.
_STRUCTURED: dict[tuple[int, type[BaseModel]], tuple[BaseChatModel, Runnable[Any, Any], Runnable[Any, Any]]] = {}
_STRUCTURED_MAX = 256


def _structured(model: BaseChatModel, schema: type[BaseModel]) -> tuple[Runnable[Any, Any], Runnable[Any, Any]]:
    """Return the model bound to the schema as a tool, and the parser of its reply, built once."""
    key = (id(model), schema)
    hit = _STRUCTURED.get(key)
    if hit is not None and hit[0] is model:
        return hit[1], hit[2]
    runnable = model.with_structured_output(schema, method="function_calling")
    if not isinstance(runnable, RunnableSequence):  # pragma: no cover - every LangChain chat model today
        raise TypeError(f"{type(model).__name__}.with_structured_output returned {type(runnable).__name__}")
    bound = runnable.first
    traced = getattr(bound, "kwargs", {}).get("ls_structured_output_format")
    if isinstance(bound, RunnableBinding) and traced and not isinstance(traced.get("schema"), dict):
        # LangChain converts this tracing copy of the schema on every call; convert it once.
        bound = bound.bind(ls_structured_output_format={**traced, "schema": convert_to_openai_tool(schema)})
    if len(_STRUCTURED) >= _STRUCTURED_MAX:
        _STRUCTURED.clear()
    _STRUCTURED[key] = (model, bound, runnable.last)
    return bound, runnable.last


def _describe_parse_error(error: object, raw: AIMessage | None) -> str:
    if error is not None:
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
    elif raw is not None and (raw.response_metadata or {}).get("finish_reason") == "length":
        used = (raw.response_metadata.get("token_usage") or {}).get("completion_tokens")
        text = f"the reply reached the token limit{f' ({used} tokens)' if used else ''} before the schema was complete"
    elif raw is not None and getattr(raw, "invalid_tool_calls", None):
        bad = raw.invalid_tool_calls[0]
        text = f"the call of tool {bad.get('name')!r} had arguments that are not JSON: {str(bad.get('args'))[:200]!r}"
    elif raw is not None and not getattr(raw, "tool_calls", None):
        text = "the model answered in text instead of calling the schema tool"
    else:
        text = "the reply did not match the schema"
    return text[:500]


def _attempts(model: BaseChatModel, exc: BaseException | None = None) -> str:
    """Say how many attempts were made: counted by the client on the last request when it says, else planned."""
    request = getattr(getattr(exc, "response", None), "request", None)
    taken = getattr(request, "headers", {}).get("x-stainless-retry-count") if request is not None else None
    if taken is not None and str(taken).isdigit():
        made = int(taken) + 1
        return f"{made} attempt{'s' if made > 1 else ''}"
    retries = getattr(model, "max_retries", None)
    return f"{retries + 1} attempt{'s' if retries else ''}" if isinstance(retries, int) else "its attempts"


def _wait_asked(exc: object) -> str:
    """Describe a ``Retry-After`` longer than the client waits (it then does not retry at all), or ''."""
    from openai._constants import MAX_RETRY_AFTER_DELAY

    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    raw = headers.get("retry-after")
    try:
        seconds = float(raw) if raw is not None else None
    except ValueError:
        seconds = None
    if seconds is None or seconds <= MAX_RETRY_AFTER_DELAY:
        return ""
    return f"; the server asked to wait {seconds:g} s, longer than the {MAX_RETRY_AFTER_DELAY} s the client waits, " \
           "so it was not retried"


def _server_message(exc: object) -> str:
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    text = str(message or getattr(exc, "message", "") or exc)
    return " ".join(text.split())[:200]


def endpoint_error(exc: BaseException, model: BaseChatModel) -> SWMError | None:
    """Turn what the OpenAI client raised after its retries into one-line error, or None if it is not one.

    A refused connection or a rejected key / unknown model is `ModelUnavailable` (no later call
    would fare better); a timeout is `ModelTimeout`; HTTP 429/5xx, a dropped connection, a reply
    that is not JSON and other refused requests are `ModelCallFailed` (the item fails, the run goes on).
    """
    import openai

    from swm.deadline import httpx  # the OpenAI client's own HTTP library

    where = _endpoint_of(model)
    if isinstance(exc, openai.APITimeoutError):
        timeout = getattr(model, "request_timeout", None)
        within = f" within {timeout:g} s" if isinstance(timeout, int | float) else ""
        return ModelTimeout(f"the model at {where} did not answer{within} ({_attempts(model)})",
                            "raise --timeout (SWMContext.timeout), or check that the server is not stuck")
    if isinstance(exc, openai.APIConnectionError) and _embedded_stopped(where):
        return ModelUnavailable(_embedded_stopped(where) or "",
                                "rerun to start it again; set SWM_LOCAL_GGUF, or give a --model served elsewhere")
    if isinstance(exc, openai.APIConnectionError):
        if _caused_by(exc, httpx.ConnectError, ConnectionRefusedError):
            return ModelUnavailable(f"cannot reach the model at {where}: connection refused ({_attempts(model)})",
                                    "start the server or check OPENAI_BASE_URL / the name@base_url spec")
        root = _root_cause(exc)
        return ModelCallFailed(f"the connection to the model at {where} failed: {type(root).__name__}: "
                               f"{' '.join(str(root).split())[:200]} ({_attempts(model)})",
                               "the item is recorded as failed; rerun to retry it")
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError | openai.NotFoundError):
        return ModelUnavailable(f"the model at {where} refused the request: HTTP {exc.status_code} "
                                f"{_server_message(exc)}", "check the API key and the model name")
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        kind = (f"rate limited, {_attempts(model, exc)}{_wait_asked(exc)}" if code == 429 else
                f"server error, {_attempts(model, exc)}{_wait_asked(exc)}" if code >= 500 else "request refused")
        return ModelCallFailed(f"the model at {where} answered HTTP {code} ({kind}): {_server_message(exc)}",
                               "the item is recorded as failed; rerun to retry it" + (
                                   " after the wait the server asked for" if _wait_asked(exc) else ""))
    garbled = _not_a_completion(exc, model)
    if garbled:
        return NotAChatCompletion(f"the model at {where} sent a reply that is not a chat completion: {garbled} "
                                  f"({_attempts(model)})", "the item is recorded as failed; rerun to retry it")
    return None


def _not_a_completion(exc: BaseException, model: BaseChatModel) -> str | None:
    """Say what was wrong with an HTTP 200 answer that is not a chat completion, or None if ``exc`` is not that.

    A body that is not JSON; an HTML page or an event stream (the OpenAI client hands LangChain a
    string); a message LangChain cannot build (tool arguments that are a JSON string of a JSON
    string, a missing field): raised by the client or LangChain while reading the answer, before
    any parser of swm's saw it. Only for models that speak HTTP (an injected test model's own
    ValueError stays its own).
    """
    import openai
    from pydantic import ValidationError

    if isinstance(exc, openai.APIResponseValidationError) or _caused_by(exc, json.JSONDecodeError):
        return f"{type(exc).__name__}: the body is not a JSON chat completion"
    if getattr(model, "openai_api_base", None) is None and not hasattr(model, "root_client"):
        return None
    first = " ".join(str(exc).split())[:160]
    if isinstance(exc, ValidationError):
        return f"the message does not parse ({exc.title}: {exc.errors()[0].get('msg', '')})"
    if "got str:" in first:  # the client could not read JSON and passed the text on
        body = first.split("got str:", 1)[1].strip(" '\"").lower()
        kind = ("an HTML page" if body.startswith(("<!doctype html", "<html")) else
                "an event stream (SSE) nobody asked for" if body.startswith(("data:", "event:", ":")) else
                "text that is not JSON")
        return f"{kind}: {body[:60]!r}"
    if isinstance(exc, ValueError | KeyError | TypeError) and not isinstance(exc, openai.OpenAIError):
        return f"{type(exc).__name__}: {first}"
    if isinstance(exc, IndexError):  # LangChain takes the first generation of a reply whose choices are empty
        return f"no choice in the reply ({type(exc).__name__}: {first})"
    return None


def _embedded_stopped(where: str) -> str | None:
    from swm.serving.embedded import stopped

    return stopped(where)


def embedded_revived(exc: BaseException, base_url: str) -> bool:
    """Tell whether a dropped connection was to the embedded server at ``base_url`` and it is up again
    (started anew on its port if it died): the request in flight may then be sent again.

    A 503 counts too: a request that reaches a server started again while it still loads its model is
    answered "503 Loading model" (on a busy machine the load takes seconds); it waits until the server
    answers, as a dropped one does, and is sent again.
    """
    import openai

    loading = isinstance(exc, openai.APIStatusError) and exc.status_code == 503
    dropped = isinstance(exc, openai.APIConnectionError) and not isinstance(exc, openai.APITimeoutError)
    if not (loading or dropped):
        return False
    from swm.serving.embedded import revive

    return revive(base_url)


def _root_cause(exc: BaseException) -> BaseException:
    while (exc.__cause__ or exc.__context__) is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return exc


def _caused_by(exc: BaseException, *types: type[BaseException]) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, types):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def raw_text(message: AIMessage | None) -> str:
    """Return what a reply said: its text and the arguments of its tool calls."""
    if message is None:
        return ""
    parts = [message.content if isinstance(message.content, str) else str(message.content)]
    parts += [str(call.get("args")) for call in getattr(message, "tool_calls", None) or []]
    parts += [str(call.get("args")) for call in getattr(message, "invalid_tool_calls", None) or []]
    return "\n".join(p for p in parts if p)
