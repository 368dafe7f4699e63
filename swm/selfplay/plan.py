"""The plan of a self-play run: every setting, recorded with the run (``selfplay_runs``) and in its checkpoints."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from swm.filenames import file_name
from swm.selfplay.rewards import RewardConfig
from swm.tasks.families import Task, level_families, synthesize, variant_for
from swm.tasks.splits import split_tasks
from swm.tracking import Reporter
from swm.training.advantages import AdvantageConfig
from swm.training.config import PolicyConfig, PPOConfig
from swm.training.transcript import DEFAULT_TRANSCRIPT, Transcript

# the recipe that learned on the two-seat task (docs/results/selfplay.md, "Two seats, one model", 2026-11-26):
# group-normalised advantages, AdamW at 2e-4, one PPO epoch in minibatches of 8 turns, no KL penalty; a plan's
# defaults and `swm selfplay`'s
RECIPE_ESTIMATOR = "group"
RECIPE_PPO = PPOConfig(lr=2e-4, kl_coef=0.0, epochs=1, minibatch=8)
HELDOUT_GAME_SEEDS = 1_000_000  # held-out game seeds count up from here; training seeds lie above 2,000,000


def training_seed(seed: int, stage: int, iteration: int, index: int) -> int:
    """Return the generator seed of a run's ``index``-th training task (or deal) of an iteration.

    A hash of (run seed, stage, iteration, index), 48 bits above 2,000,000: two runs of different seeds
    or stages draw different tasks at every iteration (``seed + 1000 * iteration + i``, the rule before
    2026-11-28, made seed 1 replay 3 of seed 0's 4 tasks every iteration), and no training deal is a
    held-out game seed.
    """
    digest = hashlib.sha256(f"selfplay-train|{seed}|{stage}|{iteration}|{index}".encode()).hexdigest()
    return 2_000_000 + int(digest[:12], 16)


class SelfPlayPlan(BaseModel):
    """What to play, how many times, and how to score, estimate and update."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = "selfplay"
    iterations: int = Field(2, ge=1)
    family: str = "negotiation"
    level: str = "easy"
    game: str | None = Field(None, description="a hidden-role game (werewolf) to play instead of the task family")
    players: int = Field(5, description="seats of the game")
    game_options: dict[str, Any] = Field(default_factory=lambda: {"max_rounds": 2})
    illegal: Literal["drop", "filter"] = Field("filter", description="an illegal game move fails the rollout "
                                               "(drop) or keeps the game and earns reward.illegal_move (filter)")
    tasks_per_iteration: int = Field(2, ge=1)
    group_size: int = Field(8, ge=1, description="G: rollouts per task (a group); 8 by default, since with a "
                            "5% success rate a group of 2 carries any signal only 9.5% of the time, one of 8 34%")
    max_turns: int = Field(8, ge=1, description="turn limit of a rollout (a multi-turn task's budget caps it too)")
    names: Literal["disjoint", "shared"] = Field("disjoint", description="name policy of generated tasks "
                                                 "(two-seat, multi-turn): disjoint "
                       "(train and dev/test names from disjoint pools) or shared (one pool, the two-seat splits "
                       "before 2026-11-28)")
    stage: int = Field(0, ge=0, description="the run's curriculum stage: its training tasks are drawn from a hash of "
                       "(seed, stage, iteration, index), so no two stages or seeds share one")
    transcript: Transcript = Field(DEFAULT_TRANSCRIPT, description="each seat's context: one chat that only grows "
                                   "(append) or its whole prompt rendered again every turn (rerender)")
    eval_tasks: int = Field(2, ge=0, description="held-out tasks evaluated after each update: an episode level's "
                            "frozen file holds 4 a family; two-seat and multi-turn tasks are generated (pinned by "
                            "digest), any number")
    eval_split: Literal["dev", "test"] = Field("test", description="the held-out split evaluated: dev chooses, test "
                                               "reports")
    shuffle_rewards: bool = Field(False, description="the control arm: each iteration's training rewards are "
                                  "permuted (seeded) before the advantages, same budget, no signal (shuffle_scope)")
    shuffle_scope: Literal["turn", "rollout"] = Field(
        "turn", description="what the control permutes: turn -- every training turn's whole reward (outcome, "
        "penalties, answer credit, belief gain and the quality filter's cap, all of it) among all the iteration's "
        "turns, so no part of it follows what the turn said; rollout -- the seats' last-turn rewards and outcomes "
        "among the rollouts (the control before 2026-12-07: a flagged turn's cap and, unless belief_shuffle, its "
        "belief gain stayed its own, and that control learned to answer nothing)")
    seed: int = 0
    report_to: Reporter = Field("none", description="where each iteration's numbers are logged, one tracker run "
                                "named after the thread (swm.selfplay.scalars: per-role rewards, held-out rates, "
                                "KL, loss, clip fraction, filter, speed; axis 'iteration'): TensorBoard files in "
                                "<run dir>/runs, or a wandb / mlflow / trackio run set up by their own environment "
                                "variables (swm.tracking); its package is checked when a run opens it, never when a "
                                "stored plan is read")

    out_dir: str = "swm-selfplay"
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    ppo: PPOConfig = Field(default_factory=lambda: RECIPE_PPO)
    advantage: AdvantageConfig = Field(default_factory=lambda: AdvantageConfig(estimator=RECIPE_ESTIMATOR))
    reward: RewardConfig = Field(default_factory=RewardConfig)

    @model_validator(mode="after")
    def _family_has_the_level(self) -> SelfPlayPlan:
        if self.game is None and self.family not in level_families(self.level):
            raise ValueError(f"no {self.level} tasks of family {self.family!r}; its families are "
                             f"{', '.join(level_families(self.level))}")
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / file_name(self.run_id)

    def training_tasks(self, iteration: int) -> list[Task]:
        """The iteration's tasks (train split, names from the training pool; seeds from `training_seed`)."""
        variant = variant_for(self.level, "train", self.names)
        return [synthesize(self.family, self.level, training_seed(self.seed, self.stage, iteration, i), variant=variant)
                for i in range(self.tasks_per_iteration)]

    def evaluation_tasks(self) -> list[Task]:
        """The held-out tasks of the family and level (never trained on), from ``eval_split``."""
        return (split_tasks(self.eval_split, [self.level], [self.family], self.eval_tasks, names=self.names)
                if self.eval_tasks else [])

    def units(self, phase: str, iteration: int = 0) -> dict[str, dict[str, Any]]:
        """What one phase plays, by id: tasks (``{"task": ...}``) or game seeds (``{"game_seed": n}``).

        Held-out game seeds start at 1,000,000, below any training seed (`training_seed`).
        """
        if self.game:
            seeds = ([training_seed(self.seed, self.stage, iteration, i) for i in range(self.tasks_per_iteration)]
                     if phase == "train" else [HELDOUT_GAME_SEEDS + i for i in range(self.eval_tasks)])
            return {f"{self.game}:{phase}:{seed}": {"game_seed": seed} for seed in seeds}
        tasks = self.training_tasks(iteration) if phase == "train" else self.evaluation_tasks()
        return {t.task_id: {"task": t.model_dump(mode="json")} for t in tasks}
