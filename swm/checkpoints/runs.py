"""Run a graph on a checkpointed thread: start it, resume it where it stopped, or return its result."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot

from swm import drain
from swm.checkpoints.store import StoreRecords
from swm.errors import InputError

Status = Literal["started", "resumed", "finished"]


def pending_nodes(snapshot: StateSnapshot) -> tuple[str, ...]:
    """Return the nodes the thread still has to run (or finish), in order, each once.

    ``snapshot.next`` leaves out tasks that already hold writes: a superstep stopped by Ctrl-C,
    or one whose tasks all failed, has every task written (results or errors) and an empty
    ``next``, yet the step was never committed. ``snapshot.tasks`` lists them all.
    """
    return tuple(dict.fromkeys([*snapshot.next, *(task.name for task in snapshot.tasks)]))


def thread_status(snapshot: StateSnapshot) -> Status:
    """Tell whether a thread is new, stopped part-way (tasks pending) or finished."""
    if pending_nodes(snapshot):
        return "resumed"
    return "finished" if snapshot.values else "started"


def differences(stored: Mapping[str, object], given: Mapping[str, object], keys: Any = None) -> list[str]:
    """List ``key: stored → given`` for each key (all of ``given`` by default) whose values differ."""

    def short(value: object) -> str:
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."

    return [f"{key}: {short(stored.get(key))} → {short(given.get(key))}"
            for key in (keys if keys is not None else given) if stored.get(key) != given.get(key)]


RUN_OPTIONS_TABLE = "swm_run_options"


def run_options_for(store: StoreRecords, run_id: str, options: Mapping[str, object], given: Collection[str],
                    added: Mapping[str, object] | None = None) -> dict[str, Any]:
    """Return the options a run goes on with: the ones it recorded, except those ``given`` on the command line.

    The rule `swm learn` follows too: an option left at its default means "as the run was started",
    so a rerun need not repeat them; one given with another value is a contradiction, which
    `pin_run_options` then refuses. A new run takes ``options`` as they are.
    """

    rows = list(store.rows(f"select options from {RUN_OPTIONS_TABLE} where run_id = ?", [run_id])) \
        if store.has_table(RUN_OPTIONS_TABLE) else []
    if not rows:
        return dict(options)
    stored = {**(added or {}), **json.loads(rows[0]["options"])}
    return {key: stored[key] if key in stored and key not in given else value for key, value in options.items()}


def pin_run_options(store: StoreRecords, run_id: str, options: Mapping[str, object],
                    added: Mapping[str, object] | None = None) -> list[str]:
    """Record a run's options on its first invocation; refuse a rerun whose options differ.

    For runs made of many threads (a benchmark), whose finished items would otherwise be reused
    silently under other settings. Returns the options stored before (empty on the first run);
    raises `InputError` listing every difference. ``added``: options that came after some runs were
    started, with the value such a run had (it resumes when given that value).
    """


    given = json.loads(json.dumps(dict(options), default=str))
    rows = list(store.rows(f"select options from {RUN_OPTIONS_TABLE} where run_id = ?", [run_id])) \
        if store.has_table(RUN_OPTIONS_TABLE) else []
    if not rows:
        store.insert(RUN_OPTIONS_TABLE, {"run_id": run_id, "options": given}, pk="run_id", ignore=True)
        return []
    stored = {**(added or {}), **json.loads(rows[0]["options"])}
    changed = differences(stored, given)
    if changed:
        raise InputError(f"run {run_id} was started with other options ({'; '.join(changed)})",
                         "rerun with the same options to resume it, or use a new --thread-id for a new run")
    return list(stored)


def reopen(graph: Any, config: RunnableConfig, after: str) -> StateSnapshot:
    """Make a finished thread go on from the routes out of node ``after``, with its state as it is.

    A new checkpoint (the old ones stay in the history) written as if ``after`` had returned nothing:
    its edges are taken again, so the node they lead to runs on the rerun and its result replaces
    the unusable one. Resuming an older checkpoint would not do: the task it held already has its
    writes, and LangGraph would reuse them instead of running it.
    """
    graph.update_state(config, None, as_node=after)
    return graph.get_state(config)


def run_thread(graph: Any, inputs: Mapping[str, object], config: RunnableConfig, context: object,
               announce: Callable[[Status, StateSnapshot], None] | None = None,
               on_event: Callable[[str, Any], None] | None = None,
               redo: Callable[[Mapping[str, object]], str | None] | None = None) -> tuple[dict[str, Any], Status]:
    """Start the thread, resume it at the node where it stopped, or return its finished state.

    ``redo(values)``: for a finished thread whose result is unusable (a failed reply), the node
    after which to go on again, as if it had just finished (`reopen`); the steps before it are
    not run again. None: the result stands.

    A finished thread costs no model call. Checkpoints are written with ``durability="sync"``:
    each finished node is on disk before the next starts, so a killed process loses at most the
    node in flight. ``announce`` sees the status and snapshot before anything runs (to print it,
    or to refuse a finished thread that holds other input). ``on_event(kind, payload)`` sees the
    run as it goes: ``("node", name)`` when a node starts, ``("done", (name, update))`` when it
    finishes, ``("custom", event)`` for each progress event a node writes (LangGraph's ``custom``
    stream, as Studio and the SDK see it). Under ``max_concurrency: 1`` the custom stream is left
    out: LangGraph waits for it on a thread of the run's own pool, which would leave none to run
    the nodes (a deadlock); node results still come.
    """
    snapshot = graph.get_state(config)
    status = thread_status(snapshot)
    if status == "finished" and redo is not None and (after := redo(snapshot.values)) is not None:
        snapshot, status = reopen(graph, config, after), "resumed"
    if announce is not None:
        announce(status, snapshot)
    if status == "finished":
        return dict(snapshot.values), status
    start = None if status == "resumed" else dict(inputs)
    drain.stop_if_drained()  # SIGTERM/SIGHUP: no new thread starts (swm.drain)
    if on_event is None:
        out = graph.invoke(start, config, context=context, durability="sync", control=drain.control())
        return dict(out), status
    out = {}
    modes = ["tasks", "values"] + ([] if config.get("max_concurrency") == 1 else ["custom"])
    for mode, chunk in graph.stream(start, config, context=context, durability="sync", stream_mode=modes,
                                    control=drain.control()):
        if mode == "values":
            out = chunk
        elif mode == "custom":
            on_event("custom", chunk)
        elif "result" in chunk:
            on_event("done", (chunk.get("name"), chunk["result"]))
        elif "error" not in chunk:
            on_event("node", chunk.get("name"))
    return dict(out), status
