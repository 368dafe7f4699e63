"""Per-role rewards of a rollout: the task's code checker, a turn-level quality filter, an optional judge.

Outcome per seat, at the seat's last turn: ``completion · 1[task completed] + violation ·
min(#violations in the seat's own turns, max_violations)`` (the checker's ``violation_turns``,
attributed to their speakers: a leak costs the seat that leaked), plus ``answer · 1[the seat's own
first answer is right]`` where the checker reports each seat's answer (the multi-turn task's
``detail["right"]``; ``answer=0``, the default, leaves the joint reward alone), plus ``attempt · 1[that first
answer names one person of the lists, unhedged]`` (``detail["attempted"]``, right or wrong: an empty answer, a
seat's own name or a hedge earns none; ``attempt=0``, the default, is off). The answer term is a seat's own
credit: on a conversation where success is rare it rewards the seat that found the friend even when its partner
did not. A failed *attempt* (a wrong or hedged answer, `swm.tasks.checkers.is_attempt`) is no violation: it
scores 0, as silence or leaving does, so answering never has a lower expected reward than staying out; the
attempt term puts silence below a guess (with a wrong answer costing what an empty one does, runs drifted to
answering nothing: docs/results/selfplay.md). With
``judge_weight > 0`` every turn also gets ``judge_weight · judge`` (a per-turn judge score in
[0, 1]), and with ``belief > 0`` a multi-turn message gets ``belief · gain``, the partner's belief gain
(`swm.selfplay.belief`). The mix is a `RewardConfig`, recorded with the run.

Games (`score_game`): each seat's ±1 (0 on a draw) at its last move, and every illegal move
earns ``illegal_move`` (−0.5) at its own turn — the per-move legality signal, the densest one a
small model can reach (SmolLM2-135M names a legal target 20–33% of the time). It needs the
illegal move's game kept (the plan's ``illegal="filter"``, the default); ``illegal_move=0``
turns it off.

The quality filter (the guard against reward hacking) flags a turn that is

* ``degenerate``: empty, shorter than ``min_chars``, a character run of ``max_run`` or more, or
  fewer than ``min_unique`` distinct words among its words (from 8 words on);
* ``repeated``: the same (case- and space-normalised) as one of the seat's earlier turns;
* ``out_of_character``: it speaks as someone else (``Other Name:`` at its start) or as a model
  (``as an AI``, ``language model``);
* ``rule_breaking``: the checker cites it as a broken rule (a private fact said, a deal outside
  the zone, an illegal game move; a failed attempt is not one).

A flagged turn is counted and earns at most ``filtered_reward`` (0 by default): with
``filtered="cap"`` (default) it can still lose reward (a leak keeps its penalty) but never gain
any; ``filtered="zero"`` sets it to ``filtered_reward`` whatever it would have been (which also
erases a penalty).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from swm.tasks.checkers import Utterance, Verdict, is_attempt
from swm.tasks.families import Task
from swm.tasks.verify import check
from swm.training.trajectory import Rollout

_MODEL_VOICE = re.compile(r"\bas an ai\b|\blanguage model\b", re.I)


class RewardConfig(BaseModel):
    """How rewards are mixed and which turns the quality filter zeroes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    completion: float = 1.0
    violation: float = -0.5
    max_violations: int = 2
    illegal_move: float = Field(-0.5, le=0, description="reward of an illegal game move at its own turn "
                                "(the per-move legality signal; 0: off)")
    judge_weight: float = Field(0.0, ge=0, description="weight of the per-turn judge score (0: no judge)")
    answer: float = Field(0.0, ge=0, description="added to a seat's outcome when its own first answer is right "
                          "(the checker's detail['right'], multi-turn tasks); 0: the joint reward alone")
    attempt: float = Field(0.0, ge=0, description="added to a seat's outcome when its own first answer names one "
                           "person of the lists, unhedged, right or wrong (the checker's detail['attempted'], "
                           "multi-turn tasks): silence below a guess; 0: off")
    belief: float = Field(0.0, ge=0, description="weight of each message's belief gain (swm.selfplay.belief: the "
                          "partner's log-probability of the shared friend after the message minus before, in nats, "
                          "multi-turn tasks) added to its turn's reward; 0: off")
    belief_shuffle: bool = Field(False, description="the shuffled-turn control: the iteration's belief gains are "
                                 "permuted among its turns (seeded) before they are mixed in")
    quality_filter: bool = True
    filtered_reward: float = 0.0
    filtered: Literal["cap", "zero"] = "cap"
    min_chars: int = 2
    max_run: int = 12
    min_unique: float = Field(0.3, description="least share of distinct words in a turn of 8 words or more")


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def quality_flag(text: str, speaker: str, others: list[str], earlier: list[str], config: RewardConfig) -> str | None:
    """Return why a turn is degenerate, repeated or out of character, or None (rule-breaking is the checker's)."""
    stripped = text.strip()
    words = stripped.split()
    if len(stripped) < config.min_chars or re.search(rf"(.)\1{{{config.max_run - 1},}}", stripped):
        return "degenerate"
    if len(words) >= 8 and len({w.casefold() for w in words}) / len(words) < config.min_unique:
        return "degenerate"
    if _norm(stripped) in {_norm(e) for e in earlier}:
        return "repeated"
    head = stripped.partition(":")[0].strip() if ":" in stripped[:60] else ""
    if head and head != speaker and any(head == o or head == o.split()[0] for o in others):
        return "out_of_character"
    if _MODEL_VOICE.search(stripped):
        return "out_of_character"
    return None


def _assign(rollout: Rollout, outcomes: Mapping[str, float], broken: set[int], config: RewardConfig,
            judge: Mapping[int, float] | None, illegal: frozenset[int] = frozenset(),
            belief: Mapping[int, float] | None = None) -> None:
    """Set each turn's reward: the seat's outcome at its last turn, an illegal move's penalty, the judge mix, the
    belief gain, the quality filter (a flagged turn gains nothing, belief included)."""
    for seat in rollout.seats:
        seat.outcome = float(outcomes.get(seat.seat, 0.0))
        others = [s.seat for s in rollout.seats if s.seat != seat.seat]
        for k, turn in enumerate(seat.turns):
            reward = seat.outcome if k == len(seat.turns) - 1 else 0.0
            if turn.turn in illegal:
                reward += config.illegal_move
            if judge is not None and turn.turn in judge:
                turn.judge = float(judge[turn.turn])
                reward += config.judge_weight * turn.judge
            if belief is not None and turn.turn in belief:
                reward += config.belief * float(belief[turn.turn])
            flag = quality_flag(turn.text, seat.seat, others, [t.text for t in seat.turns[:k]], config)
            if turn.turn in broken:
                flag = flag or "rule_breaking"
            turn.filtered = flag if config.quality_filter else None
            if turn.filtered:
                reward = min(reward, config.filtered_reward) if config.filtered == "cap" else config.filtered_reward
            turn.reward = reward


def score(rollout: Rollout, task: Task, config: RewardConfig, judge: Mapping[int, float] | None = None,
          belief: Mapping[int, float] | None = None) -> tuple[Rollout, Verdict]:
    """Set every turn's reward (outcome, filter, judge, belief gain) of a finished task rollout; return it and the
    verdict."""
    if rollout.failed:
        raise ValueError(f"rollout {rollout.rollout_id} failed ({rollout.failed}); it is dropped, never scored")
    said = rollout.transcript()
    verdict = check(task, [Utterance(agent=a, text=t) for a, t in said])
    # A verdict lists its violation turns, not which code each belongs to: they cost only when a
    # broken rule is among the codes (no checker mixes failed attempts with broken rules).
    broken = set(verdict.violation_turns) if any(not is_attempt(v) for v in verdict.violations) else set()
    rollout.verdict = verdict.model_dump()
    outcomes = {}
    listed, tried = verdict.detail.get("right"), verdict.detail.get("attempted")
    right: Mapping[str, object] = listed if isinstance(listed, dict) else {}
    attempted: Mapping[str, object] = tried if isinstance(tried, dict) else {}
    for seat in rollout.seats:
        own = {t.turn for t in seat.turns}
        seat.violations = list(verdict.violations) if broken & own else []
        outcomes[seat.seat] = config.completion * float(verdict.completion) + config.violation * min(
            len(broken & own), config.max_violations) + config.answer * float(right.get(seat.seat) is True) + (
            config.attempt * float(attempted.get(seat.seat) is True))
    _assign(rollout, outcomes, broken, config, judge, belief=belief)
    return rollout, verdict


def score_game(rollout: Rollout, config: RewardConfig, judge: Mapping[int, float] | None = None) -> Rollout:
    """Set every turn's reward of a finished game rollout: the game's ±1 per seat (0 on a draw) at its last move,
    ``illegal_move`` at each illegal move."""
    if rollout.failed:
        raise ValueError(f"rollout {rollout.rollout_id} failed ({rollout.failed}); it is dropped, never scored")
    verdict = rollout.verdict or {}
    listed, rewards = verdict.get("violation_turns"), verdict.get("rewards")
    broken = {int(i) for i in listed} if isinstance(listed, list) else set()
    for seat in rollout.seats:
        seat.violations = ["illegal_move"] if broken & {t.turn for t in seat.turns} else []
    _assign(rollout, rewards if isinstance(rewards, dict) else {}, broken, config, judge, frozenset(broken))
    return rollout


def filtered_counts(rollouts: list[Rollout]) -> dict[str, int]:
    """Count filtered turns by reason, and all turns (``turns``)."""
    counts: dict[str, int] = {"turns": 0}
    for r in rollouts:
        for s in r.seats:
            for t in s.turns:
                counts["turns"] += 1
                if t.filtered:
                    counts[t.filtered] = counts.get(t.filtered, 0) + 1
    return counts
