"""The gate: explicit rules, each with a reason code, that a pair must pass to be learned from.

Every rule runs on every pair (no short-circuit), so each pair stores the full list of reasons
it failed and the per-rule reject counts are exact. With gating off every pair is kept, but
its reasons are still computed and stored, which is what the "no gating" ablation needs.

Rules (reason code — what it rejects):

* ``schema`` — a missing field, an unknown track, an empty or over-long text, or a score
  outside [−1, 1];
* ``different_state`` — the two candidates were not produced at the same state;
* ``margin`` — chosen minus rejected score below ``min_margin``;
* ``judge_disagreement`` — where a judge scored the pair, its two samples disagree on the
  preferred side or differ by more than ``judge_tolerance``;
* ``leak`` — the chosen text says one of the speaker's private strings (a reservation price,
  a fact of the secret); on the perception track, the prompt contained the predicted agent's
  private facts (the prediction saw the answer);
* ``duplicate`` — the same pair (track, state, chosen, rejected) was seen before;
* ``degenerate`` — the chosen turn repeats itself (a word trigram three times, or the
  speaker's previous utterance), stalls (empty, ``none``, fewer than two words), restates the
  goal verbatim (eight consecutive goal words), or talks on after the task was settled
  instead of leaving.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from swm.lifelong.records import TRACKS, PreferencePair
from swm.tasks.checkers import mentions

MAX_TEXT = 4000
RULES = ("schema", "different_state", "margin", "judge_disagreement", "leak", "duplicate", "degenerate")
_STALL = {"", "none", "...", "ok", "okay", "hmm", "(silence)", "n/a"}


@dataclass
class GateSettings:
    enabled: bool = True
    min_margin: float = 0.1
    judge_tolerance: float = 1.0


@dataclass
class GateResult:
    pair: PreferencePair
    kept: bool
    reasons: list[str] = field(default_factory=list)


def rule_schema(pair: PreferencePair, s: GateSettings) -> bool:
    texts_ok = all(0 < len(t.strip()) <= MAX_TEXT for t in (pair.chosen, pair.rejected))
    scores_ok = all(-1.0 <= x <= 1.0 for x in (pair.chosen_score, pair.rejected_score))
    return pair.track in TRACKS and bool(pair.state_key) and bool(pair.prompt.strip()) and texts_ok and scores_ok


def rule_same_state(pair: PreferencePair, s: GateSettings) -> bool:
    keys = {pair.state_key, pair.chosen_state_key or pair.state_key, pair.rejected_state_key or pair.state_key}
    return len(keys) == 1


def rule_margin(pair: PreferencePair, s: GateSettings) -> bool:
    return pair.margin >= s.min_margin


def rule_judge_agreement(pair: PreferencePair, s: GateSettings) -> bool:
    if not pair.judge_scores:
        return True
    if len(pair.judge_scores) < 2:
        return False
    a, b = pair.judge_scores[:2]
    return (a > 0) == (b > 0) and abs(a - b) <= s.judge_tolerance


def rule_no_leak(pair: PreferencePair, s: GateSettings) -> bool:
    private = [str(x) for x in pair.context.get("private", [])]
    if any(mentions(pair.chosen, p) for p in private):
        return False
    about_private = [str(x) for x in pair.context.get("about_private", [])]
    return not any(p.strip() and p.strip() in pair.prompt for p in about_private)


def _trigram_repeats(text: str) -> int:
    words = re.findall(r"\w+", text.casefold())
    grams = Counter(tuple(words[i:i + 3]) for i in range(len(words) - 2))
    return max(grams.values(), default=0)


def _restates(text: str, goal: str, span: int = 8) -> bool:
    goal_words = re.findall(r"\w+", goal.casefold())
    said = " " + " ".join(re.findall(r"\w+", text.casefold())) + " "
    return any(f" {' '.join(goal_words[i:i + span])} " in said for i in range(len(goal_words) - span + 1))


def degenerate_reason(pair: PreferencePair) -> str | None:
    """Return what is degenerate about the chosen turn (repetition, stall, goal, not_leaving), or None."""
    text = pair.chosen.strip()
    if pair.track == "action":
        if pair.context.get("resolved_before") and pair.chosen_action_type != "leave":
            return "not_leaving"
        if pair.chosen_action_type == "leave":
            return None
    if text.casefold() in _STALL or len(re.findall(r"\w+", text)) < 2:
        return "stall"
    if _trigram_repeats(text) >= 3:
        return "repetition"
    previous = str(pair.context.get("previous", "")).strip()
    if previous and previous.casefold() == text.casefold():
        return "repetition"
    if pair.track == "action" and _restates(text, str(pair.context.get("goal", ""))):
        return "goal_restated"
    return None


def rule_not_degenerate(pair: PreferencePair, s: GateSettings) -> bool:
    return degenerate_reason(pair) is None


CHECKS: dict[str, Callable[[PreferencePair, GateSettings], bool]] = {
    "schema": rule_schema, "different_state": rule_same_state, "margin": rule_margin,
    "judge_disagreement": rule_judge_agreement, "leak": rule_no_leak, "degenerate": rule_not_degenerate,
}


def gate_pairs(pairs: Iterable[PreferencePair], settings: GateSettings | None = None,
               seen: Iterable[str] = ()) -> list[GateResult]:
    """Gate pairs in order; ``seen`` holds the ids of pairs gated before (for ``duplicate``)."""
    settings = settings or GateSettings()
    known = set(seen)
    results: list[GateResult] = []
    for pair in pairs:
        pair = pair if pair.pair_id else pair.with_id()
        reasons = [code for code, rule in CHECKS.items() if not rule(pair, settings)]
        if pair.pair_id in known:
            reasons.append("duplicate")
        known.add(pair.pair_id)
        reasons.sort(key=RULES.index)
        results.append(GateResult(pair=pair, kept=not reasons or not settings.enabled, reasons=reasons))
    return results


def reject_counts(results: Iterable[GateResult]) -> dict[str, int]:
    """Count rejects per rule (a pair failing two rules counts once for each)."""
    counts: Counter[str] = Counter()
    for r in results:
        counts.update(r.reasons)
    return {code: counts.get(code, 0) for code in RULES}
