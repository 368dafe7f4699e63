"""Validation of raw S3AP JSON: the structural score of appendix A.3 step 1 and the critic's rules.

It reads the model's raw reply (either S3AP form), before any normalisation, so that a missing
field or an unknown agent is scored rather than silently repaired by `SocialWorld.from_s3ap`.
Each rule is one small checker named after the issue code it reports; `validate_s3ap` reads
each step once (`StepReader`) and runs them in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from swm.s3ap import ANY_TAG_RE, LAST_ACTION_RE, MENTAL_RE, agent_key, is_known_tag, is_none
from swm.state import Issue, ValidationReport, unwrap_s3ap

_REQUIRED = ("timestep", "state", "observations", "actions")
Fields = dict[str, str]


@dataclass
class StepReader:
    """Reads the per-agent fields of raw steps onto the expected agents, and keeps the score.

    ``passed``/``total`` count the structural checks (appendix A.3 step 1); names that match no
    expected agent are kept as written and collected in ``unknown``.
    """

    agents: list[str]
    issues: list[Issue] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    passed: int = 0
    total: int = 0

    def check(self, ok: bool) -> bool:
        """Count one structural check."""
        self.total += 1
        self.passed += ok
        return ok

    def read(self, raw: Mapping[str, object], name: str, index: int) -> Fields | None:
        """Read ``observations`` or ``actions`` in dict or list form; None when it is not well formed."""
        items = self._items(raw.get(name), name, index)
        if items is None:
            return None
        keys = {agent_key(a): a for a in self.agents}
        out: Fields = {}
        for agent, text in items:
            if not isinstance(text, str):
                return None
            canonical = keys.get(agent_key(agent))
            if canonical is None:
                if agent not in self.unknown:
                    self.unknown.append(agent)
                canonical = agent
            out[canonical] = text
        return out

    def _items(self, value: object, name: str, index: int) -> list[tuple[str, Any]] | None:
        if isinstance(value, Mapping):
            return [(str(k), v) for k, v in value.items()]
        if not isinstance(value, list):
            return None
        items = []
        for item in value:
            agent, sep, text = str(item).partition(":")
            if not sep:
                self.issues.append(Issue(code="bad_item", step=index,
                                         message=f"{name} item {str(item)[:60]!r} is not 'agent_name: text'"))
                return None
            items.append((agent.strip(), text.strip()))
        return items


# ---- structural checks (they count towards the score) -----------------------------------------

def missing_field(reader: StepReader, raw: Mapping[str, object], index: int) -> list[Issue]:
    """Each required field is present; ``timestep`` and ``state`` are strings (``bad_field`` otherwise)."""
    issues = []
    for name in _REQUIRED:
        issue = None
        if name not in raw:
            issue = Issue(code="missing_field", step=index, message=f"missing '{name}'")
        elif name in ("timestep", "state") and not isinstance(raw[name], str | int):
            issue = Issue(code="bad_field", step=index, message=f"'{name}' must be a string")
        reader.check(issue is None)
        if issue is not None:
            issues.append(issue)
    return issues


def missing_agent(reader: StepReader, raw: Mapping[str, object], name: str, parsed: Fields | None,
                  index: int) -> list[Issue]:
    """``observations``/``actions`` are well formed (``bad_field``) and cover every agent."""
    if parsed is None:
        reader.check(False)
        return [Issue(code="bad_field", step=index, message=f"'{name}' is not well formed")] if name in raw else []
    missing = [a for a in reader.agents if a not in parsed]
    if reader.check(not missing):
        return []
    return [Issue(code="missing_agent", step=index, message=f"{name} do not cover {', '.join(missing)}")]


# ---- the critic's rules -----------------------------------------------------------------------

def unknown_tag(agent: str, text: str, index: int) -> list[Issue]:
    """An observation uses only the format's tags."""
    return [Issue(code="unknown_tag", step=index, agent=agent,
                  message=f"{agent}'s observation uses an unknown tag <{tag}>")
            for tag in ANY_TAG_RE.findall(text) if not is_known_tag(tag)]


def bad_tag_index(agent: str, text: str, index: int, agents: list[str]) -> list[Issue]:
    """``<same_as_last_action_x />`` names an agent (x is 0-based)."""
    return [Issue(code="bad_tag_index", step=index, agent=agent,
                  message=f"<same_as_last_action_{m.group(1)} /> names no agent "
                          f"(there are {len(agents)}; x is 0-based)")
            for m in LAST_ACTION_RE.finditer(text)
            if m.group(1) is not None and agents and int(m.group(1)) >= len(agents)]


def mental_state_misplaced(raw: Mapping[str, object], index: int) -> list[Issue]:
    """No ``<mental_state>`` outside observations."""
    return [Issue(code="mental_state_misplaced", step=index,
                  message=f"a <mental_state> tag appears in '{name}'; put it in observations")
            for name in ("state", "actions") if "<mental_state>" in str(raw.get(name, ""))]


def no_actions(actions: Fields | None, index: int, n_steps: int) -> list[Issue]:
    """Every step but the last has an action."""
    if actions is not None and index < n_steps - 1 and all(is_none(t) for t in actions.values()):
        return [Issue(code="no_actions", step=index, message="no agent acts at this step")]
    return []


def no_observations(observations: Fields | None, index: int) -> list[Issue]:
    """Every step but the first has an observation."""
    if observations is not None and index > 0 and all(is_none(t) for t in observations.values()):
        return [Issue(code="no_observations", step=index, message="no agent observes anything")]
    return []


def actions_at_last_step(actions: Fields | None, index: int, n_steps: int) -> list[Issue]:
    """The last step has no action, whose outcome nothing would show (a warning)."""
    last = index == n_steps - 1
    if actions is not None and last and n_steps > 1 and any(not is_none(t) for t in actions.values()):
        return [Issue(code="actions_at_last_step", step=index, severity="warning",
                      message="the last step has actions, so their outcome is not represented")]
    return []


def no_mental_state(observations: Iterable[Fields]) -> list[Issue]:
    """Some agent has a ``<mental_state>`` somewhere (a warning)."""
    if any(MENTAL_RE.search(text) for fields in observations for text in fields.values()):
        return []
    return [Issue(code="no_mental_state", severity="warning", message="no agent has a <mental_state> anywhere")]


def unknown_agent(unknown: list[str], agents: list[str]) -> list[Issue]:
    """Every name is one of the expected agents."""
    return [Issue(code="unknown_agent", agent=name,
                  message=f"unknown agent {name!r} (known: {', '.join(agents) or 'none'})") for name in unknown]


def _check_step(reader: StepReader, raw: object, index: int, n_steps: int) -> Fields | None:
    """Run every per-step check on one raw step; return its observations (None when unreadable)."""
    if not isinstance(raw, Mapping):
        reader.total += len(_REQUIRED) + 2
        reader.issues.append(Issue(code="bad_step", step=index, message="step is not an object"))
        return None
    issues = reader.issues
    issues += missing_field(reader, raw, index)
    observations = reader.read(raw, "observations", index)
    actions = reader.read(raw, "actions", index)
    issues += missing_agent(reader, raw, "observations", observations, index)
    issues += missing_agent(reader, raw, "actions", actions, index)
    for agent, text in (observations or {}).items():
        issues += unknown_tag(agent, text, index) + bad_tag_index(agent, text, index, reader.agents)
    issues += mental_state_misplaced(raw, index)
    issues += no_actions(actions, index, n_steps)
    issues += no_observations(observations, index)
    issues += actions_at_last_step(actions, index, n_steps)
    return observations


def validate_s3ap(obj: object, expected_agents: Iterable[str] | None = None) -> ValidationReport:
    """Score a raw S3AP object's structure in [0, 1] and run the paper critic's rule checks.

    The structural score (appendix A.3 step 1) is the fraction of checks passed: per step,
    each required field present and well formed, and every agent covered in observations and
    actions. Rule checks: observations use only known tags; no mental state outside
    observations; every step but the last has an action; every step but the first has an
    observation; the last step's actions (reported as a warning); no mental state anywhere
    (a warning); unknown agent names.
    """
    try:
        names, raw_steps = unwrap_s3ap(obj)
    except (ValueError, TypeError) as exc:
        return ValidationReport(structural_score=0.0, issues=[Issue(code="malformed", message=str(exc))])
    agents = list(expected_agents) if expected_agents is not None else names
    if not raw_steps:
        return ValidationReport(structural_score=0.0, issues=[Issue(code="empty", message="the parse has no steps")])
    reader = StepReader(agents)
    if not agents:
        reader.issues.append(Issue(code="no_agents", message="no agent names given ('agents_names' is empty)"))
    seen = [_check_step(reader, raw, index, len(raw_steps)) for index, raw in enumerate(raw_steps)]
    reader.issues += no_mental_state(obs for obs in seen if obs is not None)
    reader.issues += unknown_agent(reader.unknown, agents)
    score = reader.passed / reader.total if reader.total else 0.0
    return ValidationReport(structural_score=round(score, 6), issues=reader.issues, unknown_agents=reader.unknown)
