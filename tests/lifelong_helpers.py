"""Hand-made episode records for the lifelong loop's tests."""

from __future__ import annotations

from swm.lifelong.records import ActedTurn, EpisodeRecord, Prediction, digest
from swm.tasks.families import Task, synthesize
from swm.tasks.verify import check


def negotiation_task() -> Task:
    return synthesize("negotiation", "easy", 1)


def record(task: Task, lines: list[tuple[str, str]], episode_id: str, *, action_types: list[str] | None = None,
           predictions: dict[int, list[Prediction]] | None = None, alternatives: dict[int, list[str]] | None = None,
           shared_prefix: bool = True) -> EpisodeRecord:
    """Build a checked episode; turn t's state key is the history before it (so equal prefixes share states)."""
    turns = []
    for i, (agent, text) in enumerate(lines):
        history = [x[1] for x in lines[:i]] if shared_prefix else [episode_id, *(x[1] for x in lines[:i])]
        turns.append(ActedTurn(index=i, agent=agent, text=text,
                                action_type=(action_types or [])[i] if action_types else "speak",
                                state_key=digest(task.task_id, agent, history),
                                prompt=f"{agent} at turn {i}: {history}",
                                predictions=(predictions or {}).get(i, []),
                                alternatives=(alternatives or {}).get(i, [])))
    ep = EpisodeRecord(episode_id=episode_id, task_id=task.task_id, family=task.family, level=task.level, turns=turns,
                       verdict=check(task, turns))
    return ep
