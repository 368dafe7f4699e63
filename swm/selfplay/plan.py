"""The plan of a self-play run: every setting, recorded with the run (``selfplay_runs``) and in its checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from swm.filenames import file_name
from swm.selfplay.rewards import RewardConfig
from swm.tasks.families import Task, synthesize
from swm.tasks.splits import split_tasks
from swm.training.advantages import AdvantageConfig
from swm.training.config import PolicyConfig, PPOConfig
from swm.training.transcript import DEFAULT_TRANSCRIPT, Transcript


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
    max_turns: int = Field(4, ge=1)
    transcript: Transcript = Field(DEFAULT_TRANSCRIPT, description="each seat's context: one chat that only grows "
                                   "(append) or its whole prompt rendered again every turn (rerender)")
    eval_tasks: int = Field(2, ge=0, description="held-out tasks evaluated after each update: an episode level's "
                            "frozen file holds 4 a family; a two-seat level is generated (pinned by digest), "
                            "any number")
    eval_split: Literal["dev", "test"] = Field("test", description="the held-out split evaluated: dev chooses, test "
                                               "reports")
    shuffle_rewards: bool = Field(False, description="the control arm: each iteration's training rewards are "
                                  "permuted among its rollouts (seeded) before the advantages, same budget, no signal")
    seed: int = 0
    out_dir: str = "swm-selfplay"
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / file_name(self.run_id)

    def training_tasks(self, iteration: int) -> list[Task]:
        """The iteration's tasks (train split; fresh seeds every iteration)."""
        return [synthesize(self.family, self.level, self.seed + 1000 * iteration + i)
                for i in range(self.tasks_per_iteration)]

    def evaluation_tasks(self) -> list[Task]:
        """The held-out tasks of the family and level (never trained on), from ``eval_split``."""
        return (split_tasks(self.eval_split, [self.level], [self.family], self.eval_tasks, names="shared")
                if self.eval_tasks else [])

    def units(self, phase: str, iteration: int = 0) -> dict[str, dict[str, Any]]:
        """What one phase plays, by id: tasks (``{"task": ...}``) or game seeds (``{"game_seed": n}``).

        Held-out game seeds start at 1,000,000, far from any training seed.
        """
        if self.game:
            seeds = ([self.seed + 1000 * iteration + i for i in range(self.tasks_per_iteration)] if phase == "train"
                     else [1_000_000 + i for i in range(self.eval_tasks)])
            return {f"{self.game}:{phase}:{seed}": {"game_seed": seed} for seed in seeds}
        tasks = self.training_tasks(iteration) if phase == "train" else self.evaluation_tasks()
        return {t.task_id: {"task": t.model_dump(mode="json")} for t in tasks}
