"""``swm learn --update ppo``: PPO on the kept-sample table, with self-play's advantage estimators, as a LoRA adapter.

The same rows every other method reads (`swm.lifelong.samples`): each sampled move at a decision
state, its prompt and completion, and the checker's verdict as the reward (1 pass, 0 fail — a
wrong attempt scores as doing nothing, D3). Each task's samples are one *group* (candidates at the
same state), so the update is self-play's PPO (`swm.training.ppo`) on one-turn rollouts, with its
estimators (`swm.training.advantages`), chosen by the plan's ``estimator``:

* ``hierarchical`` (default) — a value head on the last hidden state (continued from the
  incumbent's, zero for a new adapter) is the baseline: turn-level GAE over the move's one turn,
  then token-level GAE inside it, the value head regressing the λ-returns;
* ``group`` — critic-free: ``(r − mean) / (std + ε)`` over the task's samples, the same for each
  token (GRPO-style); no value head is trained.

Either way token advantages are whitened over the batch, and the loss is PPO-clip with a KL penalty
to the base model (the adapter disabled). Choices, each recorded with the policy's training stats:

* **on-policy only**: the current cycle's samples, drawn from the incumbent, which is the policy
  the update starts from; its log-probabilities are recomputed here at the sampling temperature, so
  the first ratio is exactly 1. The replay buffer does not apply (an earlier cycle's samples came
  from another policy; PPO's ratio would be wrong for them).
* **mixed groups only** (``groups="mixed"``, default): the tasks whose samples both pass and fail
  — the same tasks DPO pairs and KTO labels, so the methods compare on equal data; a group that all
  fails carries no signal for the group estimator and only pushes the value head down for PPO.
  ``groups="all"`` trains on every sample.
* **steps**: ``--train-steps`` optimizer steps of ``--train-batch-size`` samples (PPO epochs over
  the rows until that many steps are taken; ``-1``: ``--train-epochs`` epochs), at
  ``--train-lr``; the LoRA is the other methods' (rank, targets), continued from the incumbent's.

* **rounds** (``--ppo-iterations N``, default 1): after that update, N − 1 more sampling rounds, each
  with a fresh π_old: ``--ppo-group`` moves of every decision task among the cycle's samples, drawn in
  torch from the adapter as it now is (the decision's prompt and prefill, ending at a newline),
  checked, and one PPO epoch on them. Methods then compare on equal sampled rollouts: a cycle of N
  rounds samples ``samples-per-task + (N − 1) · G`` moves a task.

The adapter is written like `swm.training.trl_update.train_adapter`'s (same files, one rename), plus
``value_head.pt``, which the next cycle continues; GGUF conversion and serving are unchanged. Each update's
mean loss parts (loss, policy, value, KL, clip fraction) and each round's pass rate go to the run's tracker
(`swm.tracking`) at the optimizer step reached, under ``train/<policy>/``.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from swm.errors import InputError
from swm.lifelong.samples import Sample, by_task
from swm.serving.gguf_lora import ADAPTER_META, base_meta
from swm.tasks import check
from swm.tasks.checkers import Utterance
from swm.tasks.decisions import decision_prompt
from swm.tasks.families import DECISION, Task, task_of_id
from swm.tracking import Tracker
from swm.training.advantages import ESTIMATORS, AdvantageConfig, assign_advantages
from swm.training.base import load_base, shipped_gguf
from swm.training.config import PolicyConfig, PPOConfig
from swm.training.device import choose_placement, train_threads
from swm.training.stats import TrainStats
from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn
from swm.training.trl_update import TrainSettings, attach_adapter, finish_adapter, finished_stats

if TYPE_CHECKING:
    import torch

    from swm.training.policy import LoraValueModel
    from swm.training.ppo import Sample as TrainingSample

VALUE_HEAD = "value_head.pt"
Groups = Literal["mixed", "all"]


def rollouts_of(samples: Sequence[Sample], groups: Groups = "mixed") -> list[Rollout]:
    """Return one-turn self-play rollouts of the samples (reward 1 pass, 0 fail), a task's samples one group."""
    out: list[Rollout] = []
    for n, ((_, task, _), group) in enumerate(sorted(by_task(samples).items(), key=lambda kv: kv[0])):
        if groups == "mixed" and len({s.passed for s in group}) < 2:
            continue
        key = f"{task}#{n}"  # one group per (cycle, task, prompt): a two-turn task's moves are groups apart
        for s in group:
            turn = SeatTurn(turn=0, prompt=s.prompt, text=s.completion, prompt_ids=[], token_ids=[], logprobs=[],
                            reward=1.0 if s.passed else 0.0)
            out.append(Rollout(rollout_id=s.episode_id, task_id=key, family=s.family, iteration=s.cycle,
                               sample=s.sample,
                               seats=[SeatTrajectory(seat="learner", role="learner", turns=[turn],
                                                     outcome=turn.reward)]))
    return out


def _tokenise(policy: LoraValueModel, rollouts: Sequence[Rollout], max_length: int) -> None:
    """Fill each turn's prompt and completion token ids (the completion ends with the end-of-reply token)."""
    tok = policy.tokenizer
    for r in rollouts:
        turn = r.seats[0].turns[0]
        turn.prompt_ids = policy.prompt_ids(turn.prompt)
        ids = [int(i) for i in tok(turn.text, add_special_tokens=False)["input_ids"]] + [int(tok.eos_token_id)]
        turn.token_ids = ids[: max(1, max_length - len(turn.prompt_ids))]


def _score(policy: LoraValueModel, rollouts: Sequence[Rollout], values: bool) -> None:
    """Score every turn under the policy before the update: its log-probabilities (the sampling policy's,
    so the ratio starts at 1) and, for an estimator that reads the value head (``critic``), the head's values."""
    from swm.training.ppo import score_turns  # noqa: PLC0415 - imports torch at its top ([train])

    turns = [r.seats[0].turns[0] for r in rollouts]
    for turn, (logprobs, value) in zip(turns, score_turns(policy, turns), strict=True):
        turn.logprobs = logprobs
        if values:
            turn.values = value


def epochs_for(steps: int, rows: int, batch: int, epochs: float) -> int:
    """Return the PPO epochs that take at least ``steps`` optimizer steps of ``batch`` rows (-1: ``epochs``)."""
    if steps <= 0:
        return max(1, math.ceil(epochs))
    return max(1, math.ceil(steps / max(1, math.ceil(rows / batch))))


def decision_tasks(samples: Sequence[Sample]) -> list[Task]:
    """The distinct decision tasks of the samples, regenerated from their ids (`swm.tasks.families.task_of_id`)."""
    out, seen = [], set[str]()
    for s in samples:
        if s.level != DECISION or s.task_id.count(":") not in (3, 4) or s.task_id in seen:
            continue
        seen.add(s.task_id)
        out.append(task_of_id(s.task_id))
    return out


def fresh_rollouts(policy: LoraValueModel, tasks: Sequence[Task], group: int, round_: int,
                   seed: int) -> list[Rollout]:
    """Sample ``group`` moves of each decision task from ``policy`` (torch, seeded) and check them: one round.

    A move is drawn as a decision's is served (`swm.lifelong.decision_play`): the decision's prompt,
    its prefill as the reply's forced start (context, not a generated token), ending at a newline.
    """
    out: list[Rollout] = []
    for n, task in enumerate(tasks):
        shown = decision_prompt(task)
        for g in range(group):
            gen = policy.generate(shown.text, seed=f"{seed}/ppo/{round_}/{task.task_id}/{g}", prefill=shown.prefill,
                                  stop="\n", max_tokens=shown.max_tokens)
            passed = check(task, [Utterance(agent=task.truth.get("learner", "learner"), text=gen.text)]).passed
            turn = SeatTurn(turn=0, prompt=shown.text, text=gen.text, prompt_ids=gen.prompt_ids,
                            token_ids=gen.token_ids, logprobs=gen.logprobs, reward=1.0 if passed else 0.0)
            out.append(Rollout(rollout_id=f"r{round_}/{task.task_id}/{g}", task_id=f"{task.task_id}#r{round_}#{n}",
                               family=task.family, iteration=round_, sample=g,
                               seats=[SeatTrajectory(seat="learner", role="learner", turns=[turn],
                                                     outcome=turn.reward)]))
    return out


@dataclass
class _Training:
    """One PPO run's moving parts: the policy and its optimizer, the configs, and what has been trained so far."""

    policy: LoraValueModel
    optimizer: torch.optim.Optimizer
    ppo: PPOConfig
    advantage: AdvantageConfig
    critic: bool  # the estimator reads the value head (`swm.training.advantages.Estimator.critic`)
    baselines: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    steps: int = 0
    parts: dict[str, float] = field(default_factory=dict)  # the last update's mean loss parts
    rounds: list[dict[str, float]] = field(default_factory=list)
    tracker: Tracker = field(default_factory=Tracker)  # where each update's parts are logged, under ``section``
    section: str = "train"

    def update(self, samples: Sequence[TrainingSample], ppo: PPOConfig) -> None:
        """Run PPO on ``samples``, counting its tokens (per epoch) and optimizer steps; log its mean loss parts."""
        from swm.training.ppo import ppo_update  # noqa: PLC0415 - imports torch at its top ([train])

        self.parts = ppo_update(self.policy, self.optimizer, samples, ppo)
        self.tokens += ppo.epochs * sum(len(s.prompt_ids) + len(s.token_ids) for s in samples)
        self.steps += int(self.parts.pop("steps", 0))
        self.log(self.parts)

    def log(self, values: dict[str, float]) -> None:
        """Log ``values`` under the run's section at the optimizer step reached."""
        self.tracker.log({f"{self.section}/{k}": v for k, v in values.items()}, step=self.steps,
                         axis=f"{self.section}/step")


def train_ppo(samples: Sequence[Sample], base: str | None, out_dir: Path, *, parent_adapter: str | None,
              settings: TrainSettings, estimator: str = "hierarchical", temperature: float = 0.7,
              groups: Groups = "mixed", iterations: int = 1, group: int = 8, tracker: Tracker | None = None,
              section: str = "train") -> TrainStats:
    """Train one LoRA adapter (and value head) by PPO on the samples into ``out_dir``; return its stats.

    ``iterations`` > 1 adds sampling rounds: after the update on the cycle's samples, each round
    draws ``group`` fresh moves of every decision task among the samples from the adapter as it now
    is (a fresh π_old), checks them, and runs the same update on them. A finished adapter already in
    ``out_dir`` is reused (see `swm.training.trl_update.train_adapter`). ``tracker`` sees each update's loss
    parts under ``section``.
    """
    from swm.training.ppo import Diverged  # noqa: PLC0415 - imports torch at its top ([train])

    out_dir = Path(out_dir)
    done = finished_stats(out_dir)
    if done is not None:
        return done
    rollouts = rollouts_of(samples, groups)
    if not rollouts:
        raise InputError("no ppo training rows", "no task had both a passing and a failing sample this cycle; "
                         "collect more (--episodes-per-level, --samples-per-task) or use --update rs-sft")
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    policy, meta = _load_policy(base, parent_adapter, settings, temperature)
    critic = ESTIMATORS.row(estimator).critic
    ppo = PPOConfig(lr=settings.learning_rate, epochs=epochs_for(settings.max_steps, len(rollouts),
                                                                  settings.batch_size, settings.epochs),
                    minibatch=settings.batch_size, value_coef=0.5 if critic else 0.0)
    start = time.perf_counter()
    try:
        run = _first_update(policy, rollouts, settings, ppo, AdvantageConfig(estimator=estimator), critic,
                            tracker or Tracker(), section)
        tasks = decision_tasks(samples) if iterations > 1 else []
        for round_ in range(1, iterations if tasks else 1):
            _sampling_round(run, tasks, group, round_, settings.seed, groups)
    except Diverged as exc:
        raise InputError(f"the ppo update diverged ({exc})", "lower --train-lr and rerun the same --thread-id") from exc
    seconds = time.perf_counter() - start
    stats = _save(run, partial, meta, rows=len(rollouts), seconds=seconds, seed=settings.seed,
                  method=f"ppo/{estimator}", parent_adapter=parent_adapter)
    finish_adapter(partial, out_dir, stats, {**asdict(settings), "estimator": estimator, "groups": groups,
                                             "temperature": temperature, "ppo": ppo.model_dump(),
                                             "advantage": run.advantage.model_dump(), "iterations": iterations,
                                             "group": group, "rounds": run.rounds,
                                             "update": {k: round(v, 6) for k, v in run.parts.items()}})
    return stats


def _load_policy(base: str | None, parent_adapter: str | None, settings: TrainSettings,
                 temperature: float) -> tuple[LoraValueModel, dict[str, object]]:
    """Load the base with the parent's adapter (a fresh one when None) and its value head (zero when it has none).

    Return the policy and the base's metadata that the adapter is saved with (`swm.serving.gguf_lora`).
    """
    import torch  # noqa: PLC0415 - [train]

    from swm.training.policy import LoraValueModel  # noqa: PLC0415 - imports torch at its top ([train])

    threads = train_threads()  # every core by default, as self-play's update (SWM_TRAIN_THREADS sets them)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(settings.seed)
    model, tokenizer = load_base(base, choose_placement(settings.device, settings.dtype))
    meta = base_meta(model.config, str(base or shipped_gguf()))
    model = attach_adapter(model, parent_adapter, settings)
    head = torch.nn.Linear(model.config.hidden_size, 1)
    inherited = Path(parent_adapter) / VALUE_HEAD if parent_adapter else None
    if inherited is not None and inherited.is_file():
        head.load_state_dict(torch.load(inherited, weights_only=True, map_location="cpu"))
    else:
        torch.nn.init.zeros_(head.weight)
        torch.nn.init.zeros_(head.bias)
    return LoraValueModel(model, tokenizer, head, PolicyConfig(temperature=temperature)), meta


def _first_update(policy: LoraValueModel, rollouts: list[Rollout], settings: TrainSettings, ppo: PPOConfig,
                  advantage: AdvantageConfig, critic: bool, tracker: Tracker, section: str) -> _Training:
    """PPO on the cycle's own samples, in a seeded order: the run's first update."""
    import torch  # noqa: PLC0415 - [train]

    from swm.training.ppo import make_optimizer, training_samples  # noqa: PLC0415 - imports torch at its top

    _tokenise(policy, rollouts, settings.max_length)
    _score(policy, rollouts, values=critic)
    baselines: dict[str, float] = {}
    assign_advantages(rollouts, advantage, baselines)
    batch = training_samples(rollouts)
    order = torch.randperm(len(batch), generator=torch.Generator().manual_seed(settings.seed)).tolist()
    run = _Training(policy, make_optimizer(policy, ppo), ppo, advantage, critic, baselines, tracker=tracker,
                    section=section)
    run.update([batch[i] for i in order], ppo)
    return run


def _sampling_round(run: _Training, tasks: Sequence[Task], group: int, round_: int, seed: int, groups: Groups) -> None:
    """Sample ``group`` fresh moves of each task from the policy as it now is, check them, and run one PPO epoch."""
    from swm.training.ppo import training_samples  # noqa: PLC0415 - imports torch at its top ([train])

    fresh = fresh_rollouts(run.policy, tasks, group, round_, seed)
    passed = sum(r.seats[0].outcome for r in fresh) / len(fresh)
    if groups == "mixed":
        by_group: dict[str, list[Rollout]] = {}
        for r in fresh:
            by_group.setdefault(r.task_id, []).append(r)
        fresh = [r for g in by_group.values() if len({x.seats[0].outcome for x in g}) > 1 for r in g]
    run.rounds.append({"round": float(round_), "pass_rate": round(passed, 4), "rows": float(len(fresh))})
    run.log({"round_pass_rate": passed, "round_rows": float(len(fresh))})
    if not fresh:
        return
    _score(run.policy, fresh, values=run.critic)  # values for GAE; log-probs re-read under π_old (this round's)
    assign_advantages(fresh, run.advantage, run.baselines)
    run.update(training_samples(fresh), run.ppo.model_copy(update={"epochs": 1}))


def _save(run: _Training, partial: Path, meta: dict[str, object], *, rows: int, seconds: float, seed: int,
          method: str, parent_adapter: str | None) -> TrainStats:
    """Write the adapter, its value head and the base's metadata into ``partial``; return the run's stats."""
    import torch  # noqa: PLC0415 - [train]

    run.policy.model.save_pretrained(str(partial), selected_adapters=["default"])
    torch.save(run.policy.value_head.state_dict(), partial / VALUE_HEAD)
    (partial / ADAPTER_META).write_text(json.dumps(meta))
    return TrainStats(method=method, examples=rows, pairs_used=rows, steps=run.steps,
                      loss=[round(float(run.parts.get("loss", 0.0)), 6)], seconds=round(seconds, 3),
                      tokens=run.tokens, tokens_per_s=round(run.tokens / seconds, 1) if seconds else 0.0, seed=seed,
                      adapter_bytes=(partial / "adapter_model.safetensors").stat().st_size,
                      from_adapter=str(parent_adapter) if parent_adapter else None)
