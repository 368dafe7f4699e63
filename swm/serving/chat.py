"""The chat model for llama-server: ChatOpenAI whose forced tool call is sent as a JSON schema and read back as one.

LangChain's structured output binds the schema as a tool and names it in ``tool_choice``.
llama-server reads only ``auto``/``none``/``required`` there, and forces a tool call only for
chat templates that describe tools (SmolLM2's does not: it answers in text). What it does
enforce for any template is a JSON schema (its ``json_schema`` body field), by grammar — as
llama-cpp-python's server did for a named tool. So a request that names one of its tools is
sent as that tool's parameters schema, and the JSON reply comes back to LangChain as a call of
that tool (a truncated reply as an invalid call, which swm records as a reply that did not fit).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from langchain_core.outputs import ChatResult
from langchain_openai import ChatOpenAI

_forced: ContextVar[str | None] = ContextVar("swm_forced_tool", default=None)


def named_tool_as_schema(payload: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Return the payload with a named tool choice sent as that tool's JSON schema, and the tool's name (or None)."""
    choice = payload.get("tool_choice")
    if not isinstance(choice, dict):
        return payload, None
    name = (choice.get("function") or {}).get("name")
    tool = next((t for t in payload.get("tools") or [] if (t.get("function") or {}).get("name") == name), None)
    if tool is None:
        return payload, None
    sent = {k: v for k, v in payload.items() if k not in ("tools", "tool_choice", "parallel_tool_calls")}
    # llama-server's own body field, not ``response_format``: with that LangChain would parse the reply
    # itself and raise on a truncated one instead of recording it as a reply that did not fit
    sent["extra_body"] = {**(payload.get("extra_body") or {}), "json_schema": tool["function"].get("parameters") or {}}
    return sent, str(name)


def as_tool_call(response: dict[str, Any], name: str) -> dict[str, Any]:
    """Return a chat completion whose JSON text replies are calls of the tool ``name``."""
    choices = []
    for i, choice in enumerate(response.get("choices") or []):
        message = dict(choice.get("message") or {})
        call = {"id": f"call_{i}", "type": "function", "function": {"name": name,
                                                                     "arguments": message.get("content") or ""}}
        message.update(content="", tool_calls=[call])
        done = choice.get("finish_reason")
        choices.append({**choice, "message": message, "finish_reason": "tool_calls" if done == "stop" else done})
    return {**response, "choices": choices}


class LlamaServerChat(ChatOpenAI):
    """ChatOpenAI that sends a forced tool call to llama-server as a JSON schema (see the module)."""

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
        payload, name = named_tool_as_schema(super()._get_request_payload(input_, stop=stop, **kwargs))
        _forced.set(name)  # read back by `_create_chat_result` of the same call (same thread or task)
        return payload

    def _create_chat_result(self, response: Any, generation_info: dict[str, Any] | None = None) -> ChatResult:
        name = _forced.get()
        if name is not None:
            _forced.set(None)
            if not isinstance(response, dict) and hasattr(response, "model_dump"):
                response = response.model_dump()
            if isinstance(response, dict):
                response = as_tool_call(response, name)
        return super()._create_chat_result(response, generation_info)
