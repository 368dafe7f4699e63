"""Validation of raw S3AP JSON: the structural score of appendix A.3 step 1 and the critic's rules.

It reads the model's raw reply (either S3AP form), before any normalisation, so that a missing
field or an unknown agent is scored rather than silently repaired by `SocialWorld.from_s3ap`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from swm.s3ap import ANY_TAG_RE, LAST_ACTION_RE, MENTAL_RE, agent_key, is_known_tag, is_none
from swm.state import Issue, ValidationReport, unwrap_s3ap

_REQUIRED = ("timestep", "state", "observations", "actions")


def validate_s3ap(obj: Any, expected_agents: Iterable[str] | None = None) -> ValidationReport:
    """Score a raw S3AP object's structure in [0, 1] and run the paper critic's rule checks.

    The structural score (appendix A.3 step 1) is the fraction of checks passed: per step,
    each required field present and well formed, and every agent covered in observations and
    actions. Rule checks: observations use only known tags; no mental state outside
    observations; every step but the last has an action; every step but the first has an
    observation; the last step's actions (reported as a warning); no mental state anywhere
    (a warning); unknown agent names.
    """
    issues: list[Issue] = []
    try:
        names, raw_steps = unwrap_s3ap(obj)
    except (ValueError, TypeError) as exc:
        return ValidationReport(structural_score=0.0, issues=[Issue(code="malformed", message=str(exc))])
    agents = list(expected_agents) if expected_agents is not None else names
    if not raw_steps:
        return ValidationReport(structural_score=0.0, issues=[Issue(code="empty", message="the parse has no steps")])
    if not agents:
        issues.append(Issue(code="no_agents", message="no agent names given ('agents_names' is empty)"))
    keys = {agent_key(a): a for a in agents}
    unknown: list[str] = []
    passed = total = 0
    any_mental = False

    def read(raw: Mapping[str, Any], field: str, index: int) -> dict[str, str] | None:
        value = raw.get(field)
        out: dict[str, str] = {}
        if isinstance(value, Mapping):
            items = [(str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = []
            for item in value:
                name, sep, text = str(item).partition(":")
                if not sep:
                    issues.append(Issue(code="bad_item", step=index,
                                        message=f"{field} item {str(item)[:60]!r} is not 'agent_name: text'"))
                    return None
                items.append((name.strip(), text.strip()))
        else:
            return None
        for name, text in items:
            if not isinstance(text, str):
                return None
            canonical = keys.get(agent_key(name))
            if canonical is None:
                if name not in unknown:
                    unknown.append(name)
                canonical = name
            out[canonical] = text
        return out

    for index, raw in enumerate(raw_steps):
        if not isinstance(raw, Mapping):
            total += len(_REQUIRED) + 2
            issues.append(Issue(code="bad_step", step=index, message="step is not an object"))
            continue
        for field in _REQUIRED:
            total += 1
            if field not in raw:
                issues.append(Issue(code="missing_field", step=index, message=f"missing '{field}'"))
            elif field in ("timestep", "state") and not isinstance(raw[field], str | int):
                issues.append(Issue(code="bad_field", step=index, message=f"'{field}' must be a string"))
            else:
                passed += 1
        observations = read(raw, "observations", index)
        actions = read(raw, "actions", index)
        for field, parsed in (("observations", observations), ("actions", actions)):
            total += 1
            if parsed is None:
                if field in raw:
                    issues.append(Issue(code="bad_field", step=index, message=f"'{field}' is not well formed"))
                continue
            missing = [a for a in agents if a not in parsed]
            if missing:
                issues.append(Issue(code="missing_agent", step=index,
                                    message=f"{field} do not cover {', '.join(missing)}"))
            else:
                passed += 1
        for agent, text in (observations or {}).items():
            if MENTAL_RE.search(text):
                any_mental = True
            for tag in ANY_TAG_RE.findall(text):
                if not is_known_tag(tag):
                    issues.append(Issue(code="unknown_tag", step=index, agent=agent,
                                        message=f"{agent}'s observation uses an unknown tag <{tag}>"))
            for m in LAST_ACTION_RE.finditer(text):
                if m.group(1) is not None and agents and int(m.group(1)) >= len(agents):
                    issues.append(Issue(code="bad_tag_index", step=index, agent=agent,
                                        message=f"<same_as_last_action_{m.group(1)} /> names no agent "
                                                f"(there are {len(agents)}; x is 0-based)"))
        for field in ("state", "actions"):
            text = str(raw.get(field, ""))
            if "<mental_state>" in text:
                issues.append(Issue(code="mental_state_misplaced", step=index,
                                    message=f"a <mental_state> tag appears in '{field}'; put it in observations"))
        last = index == len(raw_steps) - 1
        if actions is not None and not last and all(is_none(t) for t in actions.values()):
            issues.append(Issue(code="no_actions", step=index, message="no agent acts at this step"))
        if observations is not None and index > 0 and all(is_none(t) for t in observations.values()):
            issues.append(Issue(code="no_observations", step=index, message="no agent observes anything"))
        if actions is not None and last and len(raw_steps) > 1 and any(not is_none(t) for t in actions.values()):
            issues.append(Issue(code="actions_at_last_step", step=index, severity="warning",
                                message="the last step has actions, so their outcome is not represented"))
    if not any_mental:
        issues.append(Issue(code="no_mental_state", severity="warning",
                            message="no agent has a <mental_state> anywhere"))
    for name in unknown:
        issues.append(Issue(code="unknown_agent", agent=name,
                            message=f"unknown agent {name!r} (known: {', '.join(agents) or 'none'})"))
    score = passed / total if total else 0.0
    return ValidationReport(structural_score=round(score, 6), issues=issues, unknown_agents=unknown)
