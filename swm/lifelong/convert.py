"""Convert episodes into preference pairs on two tracks, with no judge.

**Action/dialogue track.** An episode's verified outcome is

    G = 1[completion] − 0.5 · min(#rule violations, 2)        ∈ [−1, 1]

where a wrong *attempt* (a wrong or hedged answer: `ATTEMPTS`) is no rule violation: it scores 0,
as silence or leaving does. Were it below doing nothing, a model that guesses right less
than one time in three would have a negative expected reward for answering, and every update
would learn to stay silent. Leaks and agreements that break a party's private limits still cost 0.5 each.

and a turn's reward is r_t = G × A(a_t, episode). The attribution A is offline and reads the
whole episode (Sotopia-RL found full-episode attribution beats prefix-only): among the acting
agent's turns, each gets weight 1, plus 2 if the checker cites it as evidence of the outcome
(the accepted offer, the acceptance, the answer, the addressed objection) or as the cause of a
violation; A is the weight over the sum of that agent's weights, so an agent's A sums to 1.
Pairs of two candidates at the same state come from

* ``same_state``: turns of different episodes with equal ``state_key`` (same task, speaker,
  policy and history — the first turn of every sample of a task, and any later turn where two
  samples still agree) and different texts; chosen = the higher r_t;
* ``alternative``: the executed action vs a candidate sampled at the same turn but not executed
  (look-ahead candidates, Foresee-and-Act's intended action before refinement); the unexecuted one
  has no verified outcome and is scored 0, so the executed one is chosen when r_t > 0 and
  rejected when r_t < 0 (r_t = 0 gives margin 0, which the gate rejects).

**Perception track.** A prediction of agent p's goal and mental state is scored against p's
hidden truth: ``0.8 · key-fact recall + 0.2 · token F1 with p's goal`` (`perception_score`).
Predictions at the same state (several predictions at one turn, or equal ``state_key`` across
episodes) about the same agent pair up: chosen = the closer one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from swm.lifelong.records import ActedTurn, EpisodeRecord, PreferencePair
from swm.stats import token_f1 as token_f1  # re-exported: the perception score's word overlap
from swm.tasks.checkers import Verdict, mentions
from swm.tasks.families import Task

ATTEMPTS = ("wrong_answer", "hedged_answer")


def is_attempt(violation: str) -> bool:
    """Tell whether a violation code is a failed attempt (scored like doing nothing), not a broken rule."""
    return violation.split(":", 1)[0] in ATTEMPTS


def outcome_score(verdict: Verdict) -> float:
    """Return G in [−1, 1]: completion counts 1, each broken rule (at most two) −0.5; a wrong attempt 0."""
    broken = [v for v in verdict.violations if not is_attempt(v)]
    return (1.0 if verdict.completion else 0.0) - 0.5 * min(len(broken), 2)


def attribution(episode: EpisodeRecord) -> dict[int, float]:
    """Return A(a_t, episode) for every turn: full-episode credit, summing to 1 per agent."""
    cited = set(episode.verdict.evidence) | set(episode.verdict.violation_turns)
    weights = {t.index: 1.0 + (2.0 if t.index in cited else 0.0) for t in episode.turns}
    totals: dict[str, float] = defaultdict(float)
    for t in episode.turns:
        totals[t.agent] += weights[t.index]
    return {t.index: weights[t.index] / totals[t.agent] for t in episode.turns}


def turn_rewards(episode: EpisodeRecord) -> dict[int, float]:
    """Return r_t = G × A(a_t, episode) for every turn."""
    g = outcome_score(episode.verdict)
    return {i: round(g * a, 6) for i, a in attribution(episode).items()}


def perception_score(prediction: str, task: Task, about: str) -> float:
    """Score a prediction of an agent's goal and state against that agent's hidden truth, in [0, 1]."""
    brief = task.agent(about)
    facts = brief.key_facts
    recall = sum(mentions(prediction, f) for f in facts) / len(facts) if facts else 0.0
    return round(0.8 * recall + 0.2 * token_f1(prediction, brief.goal), 6)


def _context(task: Task, episode: EpisodeRecord, turn: ActedTurn) -> dict[str, object]:
    brief = task.agent(turn.agent)
    previous = next((t.text for t in reversed(episode.turns[: turn.index]) if t.agent == turn.agent), "")
    resolved = episode.verdict.resolved_at
    return {"private": list(brief.forbidden), "goal": brief.goal, "previous": previous,
            "resolved_before": resolved is not None and resolved < turn.index}


def action_pairs(task: Task, episodes: Sequence[EpisodeRecord], cycle: int = 0) -> list[PreferencePair]:
    """Build action/dialogue pairs for one task from its episodes (see the module docstring)."""
    pairs: list[PreferencePair] = []
    groups: dict[str, list[tuple[EpisodeRecord, ActedTurn, float]]] = defaultdict(list)
    for episode in episodes:
        rewards = turn_rewards(episode)
        for turn in episode.turns:
            groups[turn.state_key].append((episode, turn, rewards[turn.index]))
            for alt in turn.alternatives:
                if alt.strip() == turn.text.strip():
                    continue
                r = rewards[turn.index]
                executed, other = (turn.text, alt)
                chosen, rejected, cs, rs = (executed, other, r, 0.0) if r >= 0 else (other, executed, 0.0, r)
                pairs.append(PreferencePair(
                    track="action", source="alternative", cycle=cycle, task_id=task.task_id, family=task.family,
                    level=task.level, agent=turn.agent, turn=turn.index, state_key=turn.state_key,
                    chosen_state_key=turn.state_key, rejected_state_key=turn.state_key, prompt=turn.prompt,
                    chosen=chosen, rejected=rejected, chosen_score=cs, rejected_score=rs,
                    chosen_action_type=turn.action_type if chosen == executed else "speak",
                    rejected_action_type=turn.action_type if rejected == executed else "speak",
                    chosen_episode=episode.episode_id, rejected_episode=episode.episode_id,
                    context=_context(task, episode, turn)).with_id())
    for key, members in groups.items():
        if len(members) < 2:
            continue
        ranked = sorted(members, key=lambda m: (-m[2], m[0].episode_id))
        (best_ep, best, best_r), (worst_ep, worst, worst_r) = ranked[0], ranked[-1]
        if best.text.strip() == worst.text.strip():
            distinct = [m for m in ranked if m[1].text.strip() != best.text.strip()]
            if not distinct:
                continue
            worst_ep, worst, worst_r = distinct[-1]
        pairs.append(PreferencePair(
            track="action", source="same_state", cycle=cycle, task_id=task.task_id, family=task.family,
            level=task.level, agent=best.agent, turn=best.index, state_key=key, chosen_state_key=best.state_key,
            rejected_state_key=worst.state_key, prompt=best.prompt, chosen=best.text, rejected=worst.text,
            chosen_score=best_r, rejected_score=worst_r, chosen_action_type=best.action_type,
            rejected_action_type=worst.action_type,
            chosen_episode=best_ep.episode_id, rejected_episode=worst_ep.episode_id,
            context=_context(task, best_ep, best)).with_id())
    return pairs


def perception_pairs(task: Task, episodes: Sequence[EpisodeRecord], cycle: int = 0) -> list[PreferencePair]:
    """Build perception pairs: predictions about one agent at one state, the closer one chosen."""
    groups: dict[tuple[str, str], list[tuple[EpisodeRecord, ActedTurn, str, float]]] = defaultdict(list)
    for episode in episodes:
        for turn in episode.turns:
            for prediction in turn.predictions:
                if prediction.about not in task.names or prediction.about == turn.agent:
                    continue
                text = prediction.text()
                groups[(turn.state_key, prediction.about)].append(
                    (episode, turn, text, perception_score(text, task, prediction.about)))
    pairs: list[PreferencePair] = []
    for (key, about), members in groups.items():
        distinct = {m[2].strip(): m for m in members if m[2].strip()}
        if len(distinct) < 2:
            continue
        ranked = sorted(distinct.values(), key=lambda m: (-m[3], m[0].episode_id, m[2]))
        (best_ep, best, best_text, best_s), (worst_ep, worst, worst_text, worst_s) = ranked[0], ranked[-1]
        source = "multi_prediction" if best_ep.episode_id == worst_ep.episode_id else "same_state"
        partner = task.agent(about)
        pairs.append(PreferencePair(
            track="perception", source=source, cycle=cycle, task_id=task.task_id, family=task.family,
            level=task.level, agent=best.agent, turn=best.index, state_key=key, chosen_state_key=best.state_key,
            rejected_state_key=worst.state_key, prompt=best.prompt + f"\n\nPredict {about}'s goal and mental state.",
            chosen=best_text, rejected=worst_text, chosen_score=best_s, rejected_score=worst_s,
            chosen_action_type="predict", rejected_action_type="predict", chosen_episode=best_ep.episode_id,
            rejected_episode=worst_ep.episode_id,
            context={"private": list(task.agent(best.agent).forbidden), "goal": task.agent(best.agent).goal,
                     "previous": "", "resolved_before": False, "about": about,
                     "about_private": [partner.private] if partner.private else []}).with_id())
    return pairs


def build_pairs(task: Task, episodes: Iterable[EpisodeRecord], cycle: int = 0) -> list[PreferencePair]:
    """Build both tracks' pairs for one task's episodes."""
    episodes = [e for e in episodes if e.task_id == task.task_id and e.error is None]
    return action_pairs(task, episodes, cycle) + perception_pairs(task, episodes, cycle)
