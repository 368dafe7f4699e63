"""The kept-sample table: every sampled move with its checker verdict, the one source every update reads.

A decision is sampled ``samples_per_task`` times per task (same prompt, seeded draws), so a
task's samples are candidates *at the same state*. Each becomes a `Sample` row of
``lifelong_samples`` (pk ``episode_id``, written once), and every update method builds its rows
from that table, so methods compare on equal data. A two-turn task gives a row per learner move
(its first move and its decision, each with the exact prompt it was sampled from, labelled with
the episode's verdict); first moves of a task share their prompt, and decisions share one when
their first moves read the same (`swm.tasks.two_turn`), so both pair at the same state:

* ``rs-sft`` (and ``sft``) — rejection-sampling SFT (expert iteration): the checker-passing
  samples, as prompt/completion; ``keep="wrong"`` is the format-only control: as many
  well-formatted *failing* samples per cycle as there were passing ones; with gating off
  (``gated=False``, the no-gating ablation) every sample, whatever the checker said. The
  samples cloned are **balanced** (``share``, `balance`): within a cycle and family, no answer (and,
  mutual friend, no first name) may hold more than a share of them, so a favourite answer cannot
  dominate what is learnt;
* ``dpo`` — per task, each passing sample paired with a failing one of the same task;
* ``kto`` — every sample of a task that has both outcomes, labelled by the checker.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from swm.checkpoints.store import StoreRecords
from swm.lifelong.records import ActedTurn, EpisodeRecord
from swm.tasks.families import TWO_TURN

TABLE = "lifelong_samples"
KEEP = ("passed", "wrong")


class Sample(BaseModel):
    """One sampled move at a decision state, with what the checker said of it."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str
    run_id: str
    cycle: int
    task_id: str
    family: str
    level: str
    sample: int
    policy_version: str
    prompt: str
    completion: str
    passed: bool
    formatted: bool  # the move has the decision's form (one candidate named), right or wrong


def _row(ep: EpisodeRecord, turn: ActedTurn, row_id: str, passed: bool, formatted: bool) -> Sample:
    return Sample(episode_id=row_id, run_id=ep.run_id, cycle=ep.cycle, task_id=ep.task_id, family=ep.family,
                  level=ep.level, sample=ep.seed, policy_version=ep.policy_version, prompt=turn.prompt,
                  completion=turn.text, passed=passed, formatted=formatted)


def samples_of(episodes: Iterable[EpisodeRecord], passed: dict[str, bool]) -> list[Sample]:
    """Return the samples of decisions and two-turn tasks; ``passed`` maps an episode id to its pass verdict.

    A decision gives one row (its id the episode's). A two-turn task gives one row per learner
    move (``<episode id>#<turn>``), both labelled with the episode's verdict: the first move and
    the decision together decide it. Other multi-turn episodes give none.
    """
    out: list[Sample] = []
    for ep in episodes:
        detail = ep.verdict.detail
        if ep.level == TWO_TURN:
            moves = [t for t in ep.turns if t.prompt]
            marks = [bool(detail.get("first_move")), bool(detail.get("formatted"))]
            out.extend(_row(ep, turn, f"{ep.episode_id}#{turn.index}", passed[ep.episode_id], mark)
                       for turn, mark in zip(moves, marks, strict=False))
        elif len(ep.turns) == 1:
            out.append(_row(ep, ep.turns[0], ep.episode_id, passed[ep.episode_id],
                            bool(detail.get("formatted", detail.get("answered")))))
    return out


def put_samples(store: StoreRecords, samples: Iterable[Sample]) -> None:
    """Write samples once each (a rerun writes nothing twice)."""
    rows = [s.model_dump() for s in samples]
    if rows:
        store.insert_all(TABLE, rows, pk="episode_id", ignore=True)


def load_samples(store: StoreRecords, run_id: str, cycles: Iterable[int]) -> list[Sample]:
    """Return a run's samples of the given cycles, in a stable order."""
    wanted = sorted(set(cycles))
    if not store.has_table(TABLE) or not wanted:
        return []
    marks = ",".join("?" * len(wanted))
    rows = store.rows(f"select * from {TABLE} where run_id = ? and cycle in ({marks}) order by cycle, episode_id",
                       [run_id, *wanted])
    return [Sample.model_validate({**r, "passed": bool(r["passed"]), "formatted": bool(r["formatted"])})
            for r in rows]


def _messages(prompt: str, completion: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]


def _meta(s: Sample, method: str) -> dict[str, Any]:
    """The metadata columns of a decision row, the same as the pair and trajectory rows' of ``method``.

    A decision is sampled as text (no tool); a kept group pairs a pass (checker score 1) with a fail (0).
    """
    turn = int(s.episode_id.rsplit("#", 1)[1]) if s.level == TWO_TURN else 0  # a two-turn row's id names its move
    extra: dict[str, Any] = {"turn": turn} if method in ("sft", "rs-sft") else {"margin": 1.0, "pair_id": ""}
    return {"family": s.family, "level": s.level, "track": "action", "cycle": s.cycle, "task_id": s.task_id,
            "source": "decision", **extra, "episode_id": s.episode_id, "tool": "", "tools": "null"}


# families whose right answer is one of two moves by design (ACCEPT or COUNTER): a common answer there is no shortcut
UNBALANCED_FAMILIES = ("negotiation",)
_PREFIX = re.compile(r"^\s*(ANSWER|SLOT)\s*:\s*", re.IGNORECASE)


def episode_of(s: Sample) -> str:
    """Return the episode a sample row belongs to (a two-turn row's id is ``<episode id>#<turn>``)."""
    return s.episode_id.rsplit("#", 1)[0] if s.level == TWO_TURN else s.episode_id


def answer_keys(s: Sample) -> list[str]:
    """Return what a decision move is balanced on: its answer, and for mutual friend the answer's first name.

    The answer is the move's first line without its ``ANSWER:``/``SLOT:`` prefix, in lower case with
    punctuation and spacing folded; negotiation's moves are not balanced (`UNBALANCED_FAMILIES`).
    """
    if s.family in UNBALANCED_FAMILIES:
        return []
    line = _PREFIX.sub("", (s.completion.strip().splitlines() or [""])[0])
    answer = " ".join(re.sub(r"[^\w:$ ]", " ", line).casefold().split())
    keys = [f"answer:{answer}"]
    if s.family == "mutual_friend" and answer:
        keys.append(f"first name:{answer.split()[0]}")
    return keys


def balance(samples: Sequence[Sample], share: float) -> list[Sample]:
    """Return the samples with no answer key holding more than ``share`` of a cycle's samples of a family.

    Samples are grouped by (cycle, family) and by episode (a two-turn task's rows stay together, balanced
    on its decision, the last row). Going through them in order, an episode is kept while each of its keys
    (`answer_keys`) has fewer than ``cap = max(1, floor(share * kept))`` kept; the pass is repeated on what
    it kept until nothing more is dropped, so the cap holds for the share of what is finally kept.
    """
    groups: dict[tuple[int, str], dict[str, list[Sample]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        groups[(s.cycle, s.family)][episode_of(s)].append(s)
    kept_ids: set[str] = set()
    for episodes in groups.values():
        kept = list(episodes)
        while True:
            cap = max(1, math.floor(share * len(kept)))
            counts: Counter[str] = Counter()
            survivors = []
            for episode in kept:
                keys = answer_keys(episodes[episode][-1])
                if all(counts[k] < cap for k in keys):
                    counts.update(keys)
                    survivors.append(episode)
            if len(survivors) == len(kept):
                break
            kept = survivors
        kept_ids.update(kept)
    return [s for s in samples if episode_of(s) in kept_ids]


def kept_for_sft(samples: Sequence[Sample], keep: str = "passed", gated: bool = True,
                 share: float | None = None) -> list[Sample]:
    """Return the samples SFT clones: the passing ones, or (control) as many well-formatted failures per cycle.

    ``gated=False`` (gating off) clones every sample, the checker's verdict ignored. ``share`` balances
    what is cloned (`balance`; None: no balance); the control takes as many well-formatted failures per
    cycle as there are balanced passing samples, balanced among themselves.
    """
    if keep not in KEEP:
        raise ValueError(f"keep must be one of {', '.join(KEEP)}")

    def balanced(chosen: Sequence[Sample]) -> list[Sample]:
        return list(chosen) if share is None else balance(chosen, share)

    if not gated:
        if keep == "wrong":
            raise ValueError("keep 'wrong' (the control) and gating off (every sample) are different arms")
        return balanced(samples)
    passed = balanced([s for s in samples if s.passed])
    if keep == "passed":
        return passed
    per_cycle: dict[int, int] = defaultdict(int)
    for s in passed:
        per_cycle[s.cycle] += 1
    out: list[Sample] = []
    for s in balanced([s for s in samples if not s.passed and s.formatted]):
        if per_cycle[s.cycle] > 0:
            per_cycle[s.cycle] -= 1
            out.append(s)
    return out


def by_task(samples: Iterable[Sample]) -> dict[tuple[int, str, str], list[Sample]]:
    """Group samples by (cycle, task, prompt): candidates at one state."""
    groups: dict[tuple[int, str, str], list[Sample]] = defaultdict(list)
    for s in samples:
        groups[(s.cycle, s.task_id, s.prompt)].append(s)
    return groups


def sample_rows(method: str, samples: Sequence[Sample], keep: str = "passed",
                groups: str = "mixed", gated: bool = True, share: float | None = None) -> list[dict[str, Any]]:
    """Return TRL rows for ``method`` from the kept-sample table (sft: ``messages``; dpo; kto).

    ``ppo`` gets KTO's rows (prompt, completion, the checker's verdict as ``label``): the samples it
    trains on (`swm.lifelong.ppo_update`), of mixed tasks only unless ``groups="all"``. ``gated`` and
    ``share`` apply to sft/rs-sft (`kept_for_sft`): DPO, KTO and PPO learn from the verdict itself.
    """
    every = method == "ppo" and groups == "all"
    if method == "ppo":
        method = "kto"
    if method in ("sft", "rs-sft"):
        return [{"messages": _messages(s.prompt, s.completion), **_meta(s, method)}
                for s in kept_for_sft(samples, keep, gated, share)]
    rows: list[dict[str, Any]] = []
    for group in by_task(samples).values():
        good = [s for s in group if s.passed]
        bad = [s for s in group if not s.passed]
        if (not good or not bad) and not every:
            continue
        prompt = [{"role": "user", "content": group[0].prompt}]
        if method == "dpo":
            for i, chosen in enumerate(good):
                rejected = bad[i % len(bad)]
                rows.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": chosen.completion}],
                             "rejected": [{"role": "assistant", "content": rejected.completion}],
                             **_meta(chosen, method), "rejected_episode": rejected.episode_id})
        elif method == "kto":
            rows.extend({"prompt": prompt, "completion": [{"role": "assistant", "content": s.completion}],
                         "label": s.passed, **_meta(s, method)} for s in group)
        else:
            raise ValueError(f"no sample rows for update method {method!r}")
    return rows
