"""Keys never land in LangGraph's own checkpoint tables (``swm.checkpoints.SERDE``, `RedactingSerializer`).

A node whose message, swm state, string channel and interrupt quote a key, whole and in pieces, runs on the savers
swm opens (a SQLite file, PostgreSQL): no table holds any part of the key, and the thread resumes with ``***`` in
its place and every value of its type. With LangGraph's own serializer the same run stores the key: the check can
fail.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Interrupt, Send, interrupt

from swm.checkpoints import ALLOWED_MSGPACK_MODULES, SERDE, is_postgres, open_saver
from swm.checkpoints.serde import RedactingSerializer, masked_msgpack
from swm.credentials import known_secrets
from swm.state import SocialStep, SocialWorld

KEY = "sk-SEKRET-0123456789"
QUOTED = "sk-SEKRE**T-01234\u200b56789"  # the key as a model quotes it back: cut by markup and an invisible
PLAIN = JsonPlusSerializer(allowed_msgpack_modules=ALLOWED_MSGPACK_MODULES)  # LangGraph's, swm's types allowed
CONFIG: Any = {"configurable": {"thread_id": "quoted-key"}}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWM_API_KEY_HOST_EXAMPLE", KEY)


class _State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    world: SocialWorld | None
    reply: str  # a string: PostgreSQL's saver keeps it in the checkpoint row itself, not in a serialized blob
    answer: str


def _speak(state: _State) -> dict[str, Any]:
    message = AIMessage(content=f"my key is {KEY}", additional_kwargs={"reasoning": f"I was sent {QUOTED}"},
                        tool_calls=[{"name": "say", "args": {"text": KEY}, "id": "call-1"}])
    world = SocialWorld(agents=["Sally"], steps=[SocialStep(timestep="0", scene=f"Sally reads {QUOTED} aloud.",
                                                            dialogue={"Sally": KEY})])
    return {"messages": [message], "world": world, "reply": f"the key: {QUOTED}"}


def _review(state: _State) -> dict[str, Any]:
    return {"answer": interrupt({"shown": state["reply"], "key": KEY})}  # the interrupt is a task's write


def _graph() -> StateGraph[_State]:
    graph = StateGraph(_State)
    graph.add_node("speak", _speak)
    graph.add_node("review", _review)
    graph.add_edge(START, "speak")
    graph.add_edge("speak", "review")
    graph.add_edge("review", END)
    return graph


def _run(target: Path | str, serde: JsonPlusSerializer) -> dict[str, Any]:
    """Run the graph to its interrupt and resume it (with the key in the answer); return the first run's output."""
    with open_saver(target) as saver:
        saver.serde = serde
        graph = _graph().compile(checkpointer=saver)
        first = graph.invoke({"messages": [], "world": None, "reply": "", "answer": ""}, CONFIG, durability="sync")
        graph.invoke(Command(resume=f"fine, {KEY}"), CONFIG, durability="sync")
    return first


def _held(target: Path | str) -> bytes:
    """Every value in every table of the database, as bytes: blobs as stored, text and JSON as UTF-8."""

    def raw(value: object) -> bytes:
        if isinstance(value, bytes | memoryview):
            return bytes(value)
        return (value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)).encode()

    if is_postgres(target):
        import psycopg

        with psycopg.connect(str(target)) as conn:
            tables = [t for (t,) in conn.execute("select table_name from information_schema.tables "
                                                 "where table_schema = current_schema()")]
            rows = [row for t in tables for row in conn.execute(f'select * from "{t}"')]  # type: ignore[call-overload]
    else:
        with sqlite3.connect(target) as conn:
            tables = [t for (t,) in conn.execute("select name from sqlite_master where type = 'table'")]
            rows = [row for t in tables for row in conn.execute(f'select * from "{t}"')]
        conn.close()
    assert {"checkpoints"} <= set(tables) and rows
    return b"\n".join(raw(value) for row in rows for value in row)


def test_no_part_of_a_key_lands_in_the_checkpoint_tables(db_target: Path | str) -> None:
    first = _run(db_target, SERDE)
    assert first["messages"][0].content == f"my key is {KEY}", "the running graph keeps what it has"
    assert first["__interrupt__"][0].value["key"] == KEY
    held = _held(db_target)
    assert KEY.encode() not in held and b"SEKRE" not in held, "no piece of the key in any table"
    assert b"my key is ***" in held and b"Sally reads *** aloud." in held

    events: list[SerdeEvent] = []
    stop = register_serde_event_listener(events.append)
    try:
        with open_saver(db_target) as saver:
            values = _graph().compile(checkpointer=saver).get_state(CONFIG).values
    finally:
        stop()
    assert events == [], "swm's types revive with no unregistered-type event"
    (message,) = values["messages"]
    assert isinstance(message, AIMessage) and message.content == "my key is ***"
    assert message.additional_kwargs == {"reasoning": "I was sent ***"}
    assert message.tool_calls == [{"name": "say", "args": {"text": "***"}, "id": "call-1", "type": "tool_call"}]
    assert isinstance(values["world"], SocialWorld) and isinstance(values["world"].steps[0], SocialStep)
    assert values["world"].steps[0].scene == "Sally reads *** aloud." and values["world"].steps[0].dialogue == {
        "Sally": "***"}
    assert (values["reply"], values["answer"]) == ("the key: ***", "fine, ***")


def test_langgraphs_own_serializer_stores_the_key(db_target: Path | str) -> None:
    """The control: the same run, the same saver, LangGraph's serializer; the key is in the tables."""
    _run(db_target, PLAIN)
    held = _held(db_target)
    assert KEY.encode() in held and b"sk-SEKRE**T" in held


def _keyless() -> dict[Any, Any]:
    """A value of every kind a state holds, no key in it."""
    world = SocialWorld(agents=["Sally", "Anne"], steps=[SocialStep(timestep="0", scene="The marble is in the basket.",
                                                                    observations={"Sally": "the basket"})])
    return {"messages": [HumanMessage("Where is the marble?"), AIMessage("", tool_calls=[
        {"name": "SocialStep", "args": {"timestep": "1"}, "id": "c"}])], "world": world,
            "interrupt": Interrupt(value={"review": "parse"}, id="i"), "send": Send("judge", {"turn": 3}),
            "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "id": uuid.UUID(int=7), "seen": {1, 2}, 5: (1.5, None),
            "raw": b"\x00\xff", "url": "http://127.0.0.1:8000/v1", "big": 2**63, "thread": "quoted-key"}


def test_what_holds_no_key_is_written_byte_for_byte_as_langgraph_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a key known, with none, and through the masking itself: the bytes are LangGraph's own."""
    value = _keyless()
    kind, data = PLAIN.dumps_typed(value)
    assert SERDE.dumps_typed(value) == (kind, data)
    assert masked_msgpack(data, known_secrets()) == data, "decoding to msgpack's data and back changes nothing"
    monkeypatch.delenv("SWM_API_KEY_HOST_EXAMPLE")
    monkeypatch.setattr("swm.credentials._known", {})  # nor one an earlier test of this process gave in a URL
    assert KEY not in known_secrets() and SERDE.dumps_typed(value) == (kind, data)


def test_the_callers_objects_keep_the_key_and_a_derived_serializer_hides_it() -> None:
    """Masking never writes into the objects it encodes; the copy LangGraph derives for a strict allow-list masks."""
    message = AIMessage(content=f"key {KEY}", tool_calls=[{"name": "say", "args": {"text": QUOTED}, "id": "c"}])
    world = SocialWorld(agents=["Sally"], steps=[SocialStep(timestep="0", scene=KEY)])
    strict = SERDE.with_msgpack_allowlist([("tests.example", "Thing")])
    assert isinstance(strict, RedactingSerializer) and strict is not SERDE
    for serde in (SERDE, strict):
        kind, data = serde.dumps_typed({"messages": [message], "world": world})
        assert b"SEKRE" not in data
        back = serde.loads_typed((kind, data))
        assert back["messages"][0].tool_calls[0]["args"] == {"text": "***"} and back["world"].steps[0].scene == "***"
    assert message.content == f"key {KEY}" and message.tool_calls[0]["args"]["text"] == QUOTED
    assert world.steps[0].scene == KEY
