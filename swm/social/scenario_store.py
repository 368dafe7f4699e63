"""Scenarios in the experience store: written once, keyed by content hash; the graph state holds a reference.

A checkpoint stores every channel a step changes, and SQLite's saver stores every channel in
every checkpoint, so a scenario carried in the episode's state is written again at each step
(a 5 MB scenario grew the database by about six copies per turn). The scenario is therefore a row
of the ``scenarios`` table, put once (`put_scenario`), and the state, the subgraphs' inputs and
the ``episodes`` row carry its reference ``{"id", "ref": "sha256:<hex>"}``; nodes read the
scenario back through the run's store (`scenario_from`).

A scenario passed inline (Studio, ``graph.invoke``) is moved into the store by the episode's first
node (`nodes.env.setup`). A context without a store of its own has only an in-memory one that
dies with the process, so there the scenario stays inline in the state, as it always did (larger
checkpoints, but a thread resumed with another context still has it).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from typing_extensions import TypedDict

from swm.checkpoints.store import StoreRecords
from swm.errors import InputError
from swm.social.models import Scenario

TABLE = "scenarios"
PREFIX = "sha256:"
_CACHE_SIZE = 8  # a run plays few distinct scenarios; a hit saves reading and validating the row again


class ScenarioRef(TypedDict):
    """What the state holds in place of a stored scenario."""

    id: str
    ref: str  # "sha256:" + the hash of the scenario's canonical JSON


_cache: OrderedDict[str, Scenario] = OrderedDict()
_cache_lock = threading.Lock()


def canonical_json(scenario: Scenario) -> str:
    """Return the scenario's JSON with sorted keys and no spaces: the text its reference hashes."""
    return json.dumps(scenario.model_dump(mode="json"), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def reference(scenario: Scenario) -> ScenarioRef:
    """Return the scenario's reference (its id and content hash), without storing it."""
    return {"id": scenario.id, "ref": PREFIX + hashlib.sha256(canonical_json(scenario).encode()).hexdigest()}


def is_reference(value: object) -> bool:
    """Tell a reference from a scenario given inline."""
    return (isinstance(value, Mapping) and set(value) == {"id", "ref"} and isinstance(value["ref"], str)
            and value["ref"].startswith(PREFIX))


def is_durable(store: object) -> bool:
    """Tell whether a store outlives the process (a file or a server, not the in-memory fallback)."""
    return str(getattr(store, "path", "")) != ":memory:"


def put_scenario(store: StoreRecords, scenario: Scenario) -> ScenarioRef:
    """Store the scenario once (a second put of the same content writes nothing); return its reference."""
    ref = reference(scenario)
    if not (store.has_table(TABLE) and store.count(TABLE, "ref = ?", [ref["ref"]])):
        body = canonical_json(scenario)
        store.insert(TABLE, {"ref": ref["ref"], "id": scenario.id, "chars": len(body), "body": body,
                             "created": time.time()}, pk="ref", ignore=True)
    _remember(ref["ref"], scenario)
    return ref


def scenario_json(store: Any, ref: str) -> dict[str, Any] | None:
    """Return the stored scenario's JSON for a reference string, or None when this store lacks it.

    ``store`` is the experience store or the UI's read-only one: anything with ``rows(sql, params)``.
    """
    if not _has_table(store):
        return None
    found = list(store.rows(f"select body from {TABLE} where ref = ?", [ref]))
    return json.loads(found[0]["body"]) if found else None


def _has_table(store: Any) -> bool:
    if hasattr(store, "has_table"):  # the experience store
        return bool(store.has_table(TABLE))
    return TABLE in store.tables()  # the UI's read-only store


def scenario_from(store: Any, value: Any) -> Scenario:
    """Return the scenario a state, input or episode row holds: inline, or by reference through ``store``."""
    if not is_reference(value):
        return Scenario.model_validate(value or {})
    ref = value["ref"]
    with _cache_lock:
        if ref in _cache:
            _cache.move_to_end(ref)
            return _cache[ref]
    body = scenario_json(store, ref)
    if body is None:
        raise InputError(f"scenario {value['id']} ({ref[:19]}…) is not in the experience store",
                         "run with the store (--db) the episode was started with, or pass the scenario inline")
    scenario = Scenario.model_validate(body)
    _remember(ref, scenario)
    return scenario


def _remember(ref: str, scenario: Scenario) -> None:
    with _cache_lock:
        _cache[ref] = scenario
        _cache.move_to_end(ref)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)


def forget_cached() -> None:
    """Drop the process's cache of read scenarios (tests that delete a stored scenario)."""
    with _cache_lock:
        _cache.clear()
