"""The chat model for llama-server: ChatOpenAI whose named tool choice becomes the ``required`` llama-server enforces.

LangChain's structured output binds the schema as a tool and names it in ``tool_choice``
(``{"type": "function", "function": {"name": …}}``). llama-server reads only the string forms
(``auto``, ``none``, ``required``) and takes anything else as ``auto``, under which a small model
may answer in text; with the named tool as the only tool, ``required`` is the same choice, and
llama-server then constrains the reply to a call of it with the tool's JSON schema.
"""

from __future__ import annotations

from typing import Any

from langchain_openai import ChatOpenAI


def named_tool_as_required(payload: dict[str, Any]) -> dict[str, Any]:
    """Rewrite a payload's named ``tool_choice`` as ``required`` with only that tool; other payloads pass."""
    choice = payload.get("tool_choice")
    if not isinstance(choice, dict):
        return payload
    name = (choice.get("function") or {}).get("name")
    tools = [t for t in payload.get("tools") or [] if (t.get("function") or {}).get("name") == name]
    if not tools:
        return payload
    return {**payload, "tools": tools, "tool_choice": "required"}


class LlamaServerChat(ChatOpenAI):
    """ChatOpenAI that speaks llama-server's form of a forced tool call (see the module)."""

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
        return named_tool_as_required(super()._get_request_payload(input_, stop=stop, **kwargs))
