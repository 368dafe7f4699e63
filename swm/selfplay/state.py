"""Graph state of a self-play run: the plan, the iteration, and this iteration's small statistics.

Rollouts (tokens, log-probs, rewards, advantages) live in the experience store and the adapter
in the run directory; the state holds numbers that do not grow with the run.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import TypedDict

from swm.graph_state import merge_dict
from swm.selfplay.plan import SelfPlayPlan


class RolloutJob(TypedDict):
    """One rollout to play: the payload of a ``rollout`` Send."""

    rollout_id: str
    unit_id: str  # the task id, or the game and its seed
    unit: dict[str, Any]  # {"task": Task dump} or {"game_seed": n}
    iteration: int
    sample: int
    phase: str
    plan: SelfPlayPlan


class SelfPlayInput(TypedDict, total=False):
    """What the ``selfplay`` graph takes: the plan (``{}`` runs the defaults; unknown keys are refused)."""

    plan: SelfPlayPlan


class RoleReward(TypedDict):
    """One role's mean seat return over an iteration's rollouts, with its 95% t-interval (`swm.stats.mean_ci`)."""

    mean: float | None
    ci95: float | None
    n: int


class ScoreStats(TypedDict):
    """What scoring an iteration's rollouts found (`swm.selfplay.loop.score_rollouts`), train or held-out."""

    rollouts: int
    failed: int
    failures: list[str]  # the first few failed rollouts' reasons
    pass_rate: float | None  # tasks only
    reward: dict[str, RoleReward]
    filtered: dict[str, int]  # filtered turns by reason, and all turns (``turns``)
    filtered_rate: float | None
    tokens: int
    rollout_seconds: float
    tokens_per_s: float | None
    judge: dict[str, int]  # judge calls, and turns left unjudged
    signals: dict[str, Any] | None  # a game's pooled signals (`swm.games.signals.summarise_signals`)
    reseeded: int  # seat turns drawn after the embedded server was started again (`Rollout.reseeded_turns`)
    seconds: float


class AdvantageStats(TypedDict):
    """What estimating an iteration's advantages did (`swm.selfplay.loop.estimate_advantages`)."""

    estimator: str
    turns: int
    baselines: dict[str, float] | None  # the role baselines after the iteration (``role`` estimator)
    raw_mean: float | None
    raw_abs_max: float | None
    seconds: float


# an update's mean loss parts, steps, samples and seconds (`swm.training.ppo.ppo_update`); ``diverged`` (the reason)
# when the loss diverged, ``resumed`` when the checkpoint was there already
UpdateStats = dict[str, float | str]


class IterationSteps(TypedDict, total=False):
    """One iteration's step statistics, as the nodes merge them into the state's ``current``."""

    iteration: int
    score: ScoreStats
    advantages: AdvantageStats
    update: UpdateStats
    evaluate: ScoreStats
    adapter: str | None  # the run's last adapter (the ``finish`` node)


class IterationSummary(TypedDict):
    """An iteration's numbers (`swm.selfplay.loop.summarise`): per-role rewards, a game's signals, KL, filter, speed."""

    estimator: str
    sampler: str
    group_size: int
    temperature: float
    reward: dict[str, RoleReward] | None
    pass_rate: float | None
    eval_reward: dict[str, RoleReward] | None
    eval_pass_rate: float | None
    signals: dict[str, Any] | None
    eval_signals: dict[str, Any] | None
    kl: float | str | None
    loss: float | str | None
    clipped: float | str | None
    filtered_rate: float | None
    filtered: dict[str, int] | None
    rollouts: int | None
    failed: int | None
    tokens: int | None
    tokens_per_s: float | None
    reseeded: int | None  # the training rollouts' seat turns drawn after a server restart (`ScoreStats.reseeded`)
    rows: float | None  # the update's rows and those it skipped for having no signal (`swm.training.ppo.ppo_update`)
    skipped_rows: float | None
    sampling_seconds: float
    update_seconds: float
    evaluate_seconds: float
    seconds: float


class SelfPlayState(TypedDict, total=False):
    plan: SelfPlayPlan  # validated once, by the ``start`` node
    iteration: int  # the iteration in progress (its rollouts use checkpoint ``iteration``)
    rolled: Annotated[int, operator.add]  # rollouts played by this thread (a resumed run does not replay them)
    current: Annotated[IterationSteps, merge_dict]  # this iteration's step statistics
    summaries: Annotated[dict[str, IterationSummary], merge_dict]  # iteration -> its summary
    stopped: str | None  # why the run stopped early (a diverged update), else None
