"""swm-social: swm's verifiable social tasks, SOTOPIA-style episodes and Werewolf as a verifiers environment.

A thin adapter over `swm.envs.seats.SocialEnv` (verifiers 0.4's ``verifiers.v1`` API): the taskset
yields swm's generated tasks (family, level, seed, split: the task is regenerated from them, its hidden
truth never enters the row) and, by id, SOTOPIA scenarios (scored by SOTOPIA's own evaluator, the
judge model: a seat's reward is its goal score / 10); the env opens one interaction per seat of the
task on the one ``player`` agent (one model in every seat, the run's own by default; each seat's trace
stamped ``player``, its seat in ``trace.info["swm"]``) and lets swm play the episode
(`swm.envs.seats.run_async`): each seat's move is one ``turn`` of its interaction, given the prompt
swm's self-play gives that seat. Each seat's trace then records swm's reward for that seat (``swm``)
and the verdict (the checker's, the moderator's, or the judge's judgements). Nothing here restates a
rule: tasks, prompts, checkers, the Werewolf moderator, the judge and rewards are swm's.

A seat converses through one interaction, so from its second move on the model also sees its earlier
prompts and replies (each swm prompt is complete in itself); a seat whose run ends early (a limit of
the agent's) fails the episode, as a model error fails a swm rollout.
"""

from __future__ import annotations

import contextlib
import tomllib
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM

from swm.envs.seats import SocialEnv, run_async
from swm.llm import make_chat_model
from swm.scenarios import resolve
from swm.selfplay.rewards import RewardConfig
from swm.social.models import Scenario
from swm.tasks import Task as SwmTask
from swm.tasks import synthesize

DEFAULT_FAMILIES = ["negotiation", "mutual_friend", "secret", "scheduling", "persuasion"]
DEFAULT_LEVELS = ["decision", "two-turn", "easy"]
# The ``null`` harness starts its chat program once per move. Where PYTHONDONTWRITEBYTECODE is set (common in
# containers, and on the machines the suite runs on) its environment never caches bytecode, so every move compiled
# openai anew: 1.6 CPU-seconds a move against 0.9 with the environment compiled once when uv makes it (2026-11-28).
CHAT_PROGRAM_ENV = {"UV_COMPILE_BYTECODE": "1"}


class SwmTaskData(vf.TaskData):
    info: dict[str, Any]
    """What regenerates the swm task: ``family``, ``level``, ``seed``, ``split`` (and its ``task_id``)."""


class SwmSocialTask(vf.Task[SwmTaskData]):
    @property
    def key(self) -> str:
        return str(self.data.info["task_id"])


class SwmSocialTasksetConfig(vf.TasksetConfig):
    families: list[str] = Field(default_factory=lambda: list(DEFAULT_FAMILIES))
    """swm task families, and ``werewolf`` for the game."""
    levels: list[str] = Field(default_factory=lambda: list(DEFAULT_LEVELS))
    """decision, two-turn, two-seat (mutual_friend), easy, medium, hard (Werewolf: any one)."""
    scenarios: list[str] = Field(default_factory=list)
    """SOTOPIA scenarios to play as well (scored by SOTOPIA's evaluator: needs ``--env.judge-model``): shipped ids,
    SOTOPIA ids or codenames (`swm.scenarios.resolve`)."""
    seeds: int = Field(100, ge=1)
    """Tasks per (family, level): seeds ``first_seed`` … ``first_seed + seeds - 1``."""
    first_seed: int = 0
    split: str = "train"


class SwmSocialTaskset(vf.Taskset[SwmSocialTask, SwmSocialTasksetConfig]):
    def load(self) -> Iterator[SwmSocialTask]:
        c = self.config
        env = SocialEnv(c.families, c.levels)
        for task in env.tasks(range(c.first_seed, c.first_seed + c.seeds), c.split):
            info = {"family": task.family, "level": task.level, "seed": task.seed, "split": task.split,
                    "task_id": task.task_id}
            yield SwmSocialTask(SwmTaskData(id=task.task_id, name=task.task_id, prompt=None, info=info), c.task)
        for ref in c.scenarios:
            scenario = resolve(ref)
            info = {"scenario": ref, "task_id": f"sotopia:{scenario.id}"}
            yield SwmSocialTask(SwmTaskData(id=info["task_id"], name=scenario.codename or scenario.id, prompt=None,
                                            info=info), c.task)


class SwmSocialEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(harness={"id": "null", "env": CHAT_PROGRAM_ENV},
                                            runtime={"type": "subprocess"})
    """Every seat: one interaction per seat, on the tool-less ``null`` harness (a chat loop that runs no code,
    so a local subprocess rather than a sandbox)."""
    max_turns: int = Field(8, ge=1)
    """An episode's turns at most (swm's ``max_turns``; decisions, two-turn tasks and games end on their own)."""
    quality_filter: bool = True
    """swm self-play's quality filter on replies (an off-format reply earns its penalty)."""
    judge_model: str | None = None
    """A swm model spec (``name@url``, ``provider:model``) of the judge: SOTOPIA's evaluator for scenarios, and the
    per-turn SOTOPIA-style judge of task episodes when ``judge_weight`` > 0."""
    judge_weight: float = Field(0.0, ge=0.0, le=1.0)
    """Weight of the judge's per-turn score in a task episode's rewards (0: none; it never scores completion)."""


def chat_program_requirements() -> list[str]:
    """The packages of the ``null`` harness's chat program (its PEP 723 header), which verifiers has ``uv``
    install once into the program's own environment: `scripts/install` keeps their wheels so that the tests
    prepare it with no index."""
    header = "\n".join(line.removeprefix("#").strip() for line in CHAT_PROGRAM.splitlines()
                       if line.startswith("# ") and "///" not in line)
    return list(tomllib.loads(header)["dependencies"])


def regenerate(task: vf.Task) -> SwmTask | Scenario:
    """The swm task a row stands for (the generator is deterministic in family, level, seed and split), or its
    SOTOPIA scenario."""
    info = task.data.info
    if "scenario" in info:
        return resolve(str(info["scenario"]))
    return synthesize(str(info["family"]), str(info["level"]), int(info["seed"]), str(info["split"]))


class SwmSocialEnv(vf.Env[SwmSocialEnvConfig]):
    def social_env(self) -> SocialEnv:
        """swm's environment with this run's settings (its task set is the taskset's, so families and levels are
        not repeated here)."""
        c = self.config
        judge = make_chat_model(c.judge_model) if c.judge_model else None
        reward = RewardConfig(quality_filter=c.quality_filter, judge_weight=c.judge_weight)
        return SocialEnv([], [], reward=reward, max_turns=c.max_turns, judge=judge)

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        social, swm_task = self.social_env(), regenerate(task)
        seats = social.seats(swm_task)
        async with contextlib.AsyncExitStack() as stack:
            talks = {seat: await stack.enter_async_context(agents.player.interaction(
                vf.Task(vf.TaskData(idx=task.data.idx, name=f"{task.data.info['task_id']}/{seat}", prompt=None))))
                for seat in seats}
            episode = await run_async(social, swm_task, {seat: _turn(talk) for seat, talk in talks.items()})
        if episode.failed:  # a model or game error fails the episode, never scores it as zero (swm's rule)
            raise RuntimeError(f"{episode.task_id}: {episode.failed}")
        roles = {m.seat: m.role for m in episode.moves}
        for seat, talk in talks.items():
            talk.trace.record_reward("swm", float(episode.rewards.get(seat, 0.0)))
            talk.trace.info["swm"] = {"seat": seat, "role": roles.get(seat, ""), "task_id": episode.task_id,
                                      "family": episode.family, "level": episode.level,
                                      "verdict": episode.verdict, "moves": [m.model_dump() for m in episode.moves]}


def _turn(talk: vf.Interaction) -> Callable[[str], Coroutine[Any, Any, str]]:
    """One seat's move: swm's prompt as the seat's next user turn, the reply as its move."""

    async def turn(prompt: str) -> str:
        segment = await talk.turn(prompt)
        if segment.terminated:
            raise RuntimeError("the seat's run ended before its move (a limit of the player agent)")
        return segment.last_reply

    return turn
