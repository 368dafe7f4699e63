"""A scripted chat model for tests: replays replies in order, or answers through a function.

Structured replies are scripted as tool calls named after the pydantic class, since
``with_structured_output(method="function_calling")`` binds the schema as a tool. The model
records every prompt it was sent (``model.prompts``) and which tool was asked for, so tests can
count calls and check what an agent was shown, and the settings each call was sent with beside the
model's own (``model.settings``: a parse repair's ``temperature``, say). Token usage is a deterministic estimate
(characters / 4) so the call accounting can be asserted exactly.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, PrivateAttr

Reply = AIMessage | BaseModel | str | Exception
Responder = Callable[[str, str | None], Reply]


def as_structured(obj: BaseModel | dict[str, Any], name: str | None = None) -> AIMessage:
    """Script a structured reply: a tool call named after the pydantic class."""
    args = obj.model_dump() if isinstance(obj, BaseModel) else dict(obj)
    tool = name or (type(obj).__name__ if isinstance(obj, BaseModel) else "")
    return AIMessage(content="", tool_calls=[{"name": tool, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}"}])


def _text_of(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


class ScriptedChatModel(BaseChatModel):
    """Replay ``replies`` in order (or call ``respond(prompt, tool_name)``); fail loudly when out."""

    replies: list[Any] = []
    respond: Any = None  # Responder | None
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _index: int = PrivateAttr(default=0)
    _prompts: list[tuple[str | None, str]] = PrivateAttr(default_factory=list)
    _settings: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def prompts(self) -> list[tuple[str | None, str]]:
        """Every call so far as (tool name or None, prompt text)."""
        return list(self._prompts)

    @property
    def settings(self) -> list[dict[str, Any]]:
        """The settings each call so far was sent with (``invoke(..., temperature=…)``), tools left out."""
        return [dict(s) for s in self._settings]

    @property
    def calls(self) -> int:
        return len(self._prompts)

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: object = None, **kwargs: Any) -> Any:
        formatted = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        tools = kwargs.get("tools") or []
        tool_name = tools[0]["function"]["name"] if tools else None
        prompt = _text_of(messages)
        with self._lock:
            self._prompts.append((tool_name, prompt))
            self._settings.append({k: v for k, v in kwargs.items()
                                   if k not in ("tools", "tool_choice") and not k.startswith("ls_")})
            if self.respond is not None:
                reply: Reply = self.respond(prompt, tool_name)
            elif self._index < len(self.replies):
                reply = self.replies[self._index]
                self._index += 1
            else:
                raise AssertionError(f"scripted model ran out of replies after {self._index} (asked for {tool_name})")
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, BaseModel) and not isinstance(reply, AIMessage):  # an AIMessage is a BaseModel too
            reply = as_structured(reply, name=tool_name or type(reply).__name__)
        elif isinstance(reply, str):
            reply = AIMessage(content=reply)
        out_text = reply.content if not reply.tool_calls else json.dumps([c["args"] for c in reply.tool_calls])
        message = AIMessage(content=reply.content, tool_calls=reply.tool_calls,
                            usage_metadata={"input_tokens": len(prompt) // 4,
                                            "output_tokens": len(str(out_text)) // 4,
                                            "total_tokens": len(prompt) // 4 + len(str(out_text)) // 4})
        return ChatResult(generations=[ChatGeneration(message=message)])
