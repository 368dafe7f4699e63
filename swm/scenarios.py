"""Scenario loaders: the shipped set, the SOTOPIA sample, swm's JSONL, SOTOPIA's exports.

* `shipped()` — the small set inside the package (``swm/data/scenarios.jsonl``), so
  ``swm play`` needs no external file.
* `load_sotopia(hard=…)` — the SOTOPIA sample shipped in the package (``swm/data/sotopia/``: 146
  pairings, 70 of them hard; CC BY-SA 4.0, its provenance in ``NOTICE.md`` beside it).
* `load_jsonl(path)` — one scenario a line in swm's schema, which is the schema of the SOTOPIA
  sample: ``{"id", "scenario", "agents": [{"name", "profile", "goal", "agent_id"}],
  "hard", "meta": {"codename", "relationship", ...}}``.
* `load_sotopia_profiles(environments, agents, combos=None)` — SOTOPIA's own profile exports
  (``EnvironmentProfile``: pk, codename, source, scenario, agent_goals, relationship,
  age_constraint, occupation_constraint, agent_constraint; ``AgentProfile``: pk, first_name,
  last_name, age, occupation, gender, gender_pronoun, public_info, big_five, moral_values,
  schwartz_personal_values, personality_and_values, decision_making_style, secret, mbti;
  ``EnvAgentComboStorage``: pk, env_id, agent_ids). Without combos, each environment is paired
  with the first agents in file order.
* `resolve(ref)` — a shipped id, a SOTOPIA id (``sotopia-<combo>``, ``<env_id>`` or a codename,
  looked up in the SOTOPIA sample), or a path to a ``.jsonl`` / ``.json`` file.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from swm.errors import InputError
from swm.inputs import jsonl_rows, refuse_duplicate_ids
from swm.social.models import AgentProfile, Scenario, ScenarioAgent

SOTOPIA_SAMPLE = Path(__file__).resolve().parent / "data" / "sotopia" / "sotopia_scenarios.jsonl"
SHIPPED = Path(__file__).resolve().parent / "data" / "scenarios.jsonl"
# SOTOPIA's RelationshipType enum (sotopia/database/persistent_profile.py).
RELATIONSHIPS = {0: "stranger", 1: "know_by_name", 2: "acquaintance", 3: "friend", 4: "romantic_relationship",
                 5: "family_member"}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InputError(f"no such scenario file: {path}", "pass a .jsonl file, one scenario a line")
    return [row for _, row in jsonl_rows(path)]


def _profile(name: str, raw: dict[str, Any] | None) -> AgentProfile:
    """Read a profile; the SOTOPIA sample keeps the name beside it, so split it into first/last."""
    profile = AgentProfile.model_validate(raw or {})
    if not profile.first_name and not profile.last_name:
        first, _, last = name.partition(" ")
        profile = profile.model_copy(update={"first_name": first, "last_name": last})
    return profile


def from_record(row: dict[str, Any]) -> Scenario:
    """Read one scenario in swm's JSONL schema (the SOTOPIA sample's)."""
    meta = dict(row.get("meta") or {})
    try:
        return Scenario(
            id=str(row["id"]), scenario=row["scenario"],
            agents=[ScenarioAgent(name=a["name"], goal=a.get("goal", ""), profile=_profile(a["name"], a.get("profile")),
                                  agent_id=a.get("agent_id")) for a in row["agents"]],
            relationship=str(row.get("relationship") or meta.get("relationship") or "stranger"),
            codename=str(row.get("codename") or meta.get("codename") or ""),
            hard=bool(row.get("hard", False)), source=str(row.get("source") or meta.get("source") or ""),
            meta=meta)
    except (KeyError, TypeError, ValueError) as exc:
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc).splitlines()[0]
        raise InputError(f"scenario {row.get('id', '?')} is malformed: {reason}",
                         "each needs id, scenario and agents [{name, goal, profile}]") from exc


def load_jsonl(path: str | Path) -> list[Scenario]:
    """Load scenarios from a JSONL file in swm's schema; two with one id are refused (naming both lines)."""
    if not Path(path).is_file():
        raise InputError(f"no such scenario file: {path}", "pass a .jsonl file, one scenario a line")
    rows = list(jsonl_rows(path))
    scenarios = [from_record(row) for _, row in rows]
    refuse_duplicate_ids(((s.id, f"{path}:{n}") for s, (n, _) in zip(scenarios, rows, strict=True)), "scenario")
    return scenarios


def shipped() -> list[Scenario]:
    """Return the scenarios shipped inside the package."""
    return load_jsonl(SHIPPED)


def load_sotopia(path: str | Path | None = None, hard: bool | None = None) -> list[Scenario]:
    """Load the SOTOPIA sample shipped in the package (146 pairings); ``hard=True`` keeps the 70 hard ones."""
    scenarios = load_jsonl(path or SOTOPIA_SAMPLE)
    return [s for s in scenarios if hard is None or s.hard == hard]


def _relationship(value: object) -> str:
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return RELATIONSHIPS.get(int(value), str(value))
    return str(value or "stranger")


def load_sotopia_profiles(environments: str | Path, agents: str | Path,
                          combos: str | Path | None = None) -> list[Scenario]:
    """Build scenarios from SOTOPIA's own ``environment_profiles`` / ``agent_profiles`` JSONL exports."""
    envs = _read_jsonl(Path(environments))
    people = {str(p.get("pk") or p.get("agent_id") or i): p for i, p in enumerate(_read_jsonl(Path(agents)))}
    if not people:
        raise InputError(f"{agents} holds no agent profiles")
    pairings: list[tuple[str, dict[str, Any], list[str]]] = []
    if combos is not None:
        by_env = {str(e.get("pk")): e for e in envs}
        for combo in _read_jsonl(Path(combos)):
            env = by_env.get(str(combo.get("env_id")))
            if env is not None:
                pairings.append((f"sotopia-{combo.get('pk') or combo.get('env_id')}", env,
                                 [str(a) for a in combo.get("agent_ids") or []]))
    else:
        order = list(people)
        for env in envs:
            count = len(env.get("agent_goals") or [])
            pairings.append((f"sotopia-{env.get('pk') or env.get('codename')}", env, order[:count]))
    out = []
    for scenario_id, env, agent_ids in pairings:
        goals = list(env.get("agent_goals") or [])
        if len(agent_ids) != len(goals):
            raise InputError(f"{scenario_id}: {len(goals)} goals but {len(agent_ids)} agents")
        seats = []
        for agent_id, goal in zip(agent_ids, goals, strict=True):
            if agent_id not in people:
                raise InputError(f"{scenario_id}: agent {agent_id} is not in {agents}")
            profile = AgentProfile.model_validate(people[agent_id])
            seats.append(ScenarioAgent(name=profile.full_name or agent_id, goal=goal, profile=profile,
                                       agent_id=agent_id))
        out.append(Scenario(id=scenario_id, scenario=env.get("scenario", ""), agents=seats,
                            relationship=_relationship(env.get("relationship")),
                            codename=str(env.get("codename") or ""), source=str(env.get("source") or ""),
                            meta={"env_id": env.get("pk"), **{k: env.get(k) for k in (
                                "age_constraint", "occupation_constraint", "agent_constraint") if k in env}}))
    refuse_duplicate_ids(((s.id, f"{combos or environments} item {i}") for i, s in enumerate(out, 1)), "scenario")
    return out


def resolve(ref: str, extra: Iterable[Scenario] = ()) -> Scenario:
    """Find a scenario by shipped id, SOTOPIA id / env id / codename, or load it from a file; a name that is none of
    them is refused with the closest one it might have meant (any case)."""
    path = Path(ref)
    if path.suffix in (".jsonl", ".json") and path.is_file():
        if path.suffix == ".json":
            return from_record(json.loads(path.read_text(encoding="utf-8")))
        found = load_jsonl(path)
        if not found:
            raise InputError(f"{ref} holds no scenario")
        return found[0]
    pools: list[Iterable[Scenario]] = [extra, shipped()]
    if SOTOPIA_SAMPLE.is_file():
        pools.append(load_sotopia())
    names: list[str] = []  # every name a scenario answers to, for a did-you-mean
    for pool in pools:
        for scenario in pool:
            known = (scenario.id, scenario.codename, scenario.meta.get("env_id"), scenario.meta.get("combo_id"))
            if ref in known:
                return scenario
            names += [str(name) for name in known if name]
    folded = {name.casefold(): name for name in reversed(names)}  # the first scenario's spelling of a name
    close = [folded[c] for c in difflib.get_close_matches(ref.casefold(), list(folded), n=1, cutoff=0.6)]
    ids = ", ".join(s.id for s in shipped())
    raise InputError(f"no scenario {ref!r}" + (f" (did you mean {close[0]!r}?)" if close else ""),
                     f"use a shipped id ({ids}), a SOTOPIA id, or a .jsonl file")
