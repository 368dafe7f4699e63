"""swm's decisions as a TRL ``GRPOTrainer`` environment: one seat learns, the rest of the state is code.

A decision (`swm.tasks.decisions`) is one verifiable move from a state swm's generator builds; the
partner's message is part of that state, so the learner's seat is the only one that acts. This
module gives TRL what its trainer takes and nothing else:

* `decision_dataset` — rows of swm decision tasks: ``prompt`` (the decision's own prompt, the text swm
  samples, trains and evaluates on), ``prefill`` (the start of the move, e.g. ``ANSWER:``) and the
  arguments that regenerate the task (``family``, ``level``, ``seed``, ``split``; `swm.tasks.synthesize`
  is a pure function of them, so no hidden truth travels in the dataset the policy's prompts come from);
* `checker_reward` — a TRL reward function: it regenerates each row's task, reads ``prefill +
  completion`` as the learner's move and returns the reward swm's self-play gives that seat
  (`swm.selfplay.rewards.score`: the family's code checker, completion 1, a broken rule −0.5, a failed
  attempt 0, the quality filter); no rule is restated here;
* `role_rewards` — the same reward split by the learner's role, one TRL reward function a role that
  returns None for the other roles' rows: TRL sums them back to `checker_reward` and logs each one,
  so the run's log has the reward per role (``rewards/<role>/mean``);
* `grpo_args` — ``GRPOConfig`` keyword arguments with swm's device and precision choice
  (`swm.training.device`) filled in, a checkpoint saved every `SAVE_STEPS` steps (the last
  `SAVE_LIMIT` kept) and TRL's logs reported to ``report_to`` (TensorBoard by default).

With a tokenizer, `decision_dataset` writes TRL's *standard* format: the chat-templated prompt
followed by the prefill, so the model continues the move exactly as swm's embedded sampler has it
do; without one, the *conversational* format (the prefill is then only prepended when scoring).

    from trl import GRPOConfig, GRPOTrainer
    from swm.envs.grpo import checker_reward, decision_dataset, grpo_args

    data = decision_dataset(["persuasion", "secret"], seeds=range(200), tokenizer=tokenizer)
    trainer = GRPOTrainer(model=model, reward_funcs=role_rewards(["persuasion", "secret"]), train_dataset=data,
                          args=GRPOConfig(**grpo_args(output_dir="out", num_generations=8)))

What `grpo_args` has TRL write, under ``output_dir``: ``checkpoint-<step>/`` every `SAVE_STEPS` optimizer
steps and at the last one, the last `SAVE_LIMIT` kept — the model's weights (with a ``peft_config``, the
LoRA adapter alone), the optimizer, scheduler and RNG states and ``trainer_state.json`` (the log history),
so ``trainer.train(resume_from_checkpoint=True)`` goes on from the latest; and, every ``logging_steps``
(TRL's 10), its logs — loss, reward and ``rewards/<function>/mean``, ``reward_std``, ``kl`` (with
``beta`` > 0), ``entropy``, ``clip_ratio/…``, completion lengths, grad norm, learning rate — to the
tracker: TensorBoard event files in ``output_dir/runs/<date>_<host>/`` (``TENSORBOARD_LOGGING_DIR`` moves
them), or wandb / mlflow / trackio set up by their own environment variables. ``report_to="none"`` and
``save_strategy="no"`` turn them off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

from swm.selfplay.rewards import RewardConfig, score
from swm.tasks.decisions import DECISION, decision_families, decision_prompt
from swm.tasks.families import Task, synthesize
from swm.tracking import check_reporter
from swm.training.device import choose_placement
from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

REWARD = RewardConfig()  # swm self-play's default mix, recorded in the docs; pass another to `seat_reward`
SAVE_STEPS = 100  # optimizer steps between two checkpoints (`grpo_args`); one more at the last step
SAVE_LIMIT = 2  # checkpoints kept: the newest two


@lru_cache(maxsize=4096)
def task_of(family: str, level: str, seed: int, split: str) -> Task:
    """Regenerate a task from its arguments (cached: a batch scores each task many times)."""
    return synthesize(family, level, int(seed), split)


def decision_rows(families: Iterable[str], seeds: Iterable[int], split: str = "train",
                  tokenizer: Any = None) -> list[dict[str, Any]]:
    """Rows of decision tasks, one per (family, seed): the prompt, the prefill and the task's arguments."""
    rows = []
    for family in families:
        if family not in decision_families():
            raise ValueError(f"no decision shape for {family!r}; decision families are "
                             f"{', '.join(decision_families())}")
        for seed in seeds:
            task = task_of(family, DECISION, int(seed), split)
            shown = decision_prompt(task)
            messages = [{"role": "user", "content": shown.text}]
            prompt: Any = messages
            if tokenizer is not None:
                prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                       tokenize=False) + shown.prefill
            rows.append({"prompt": prompt, "prefill": shown.prefill, "family": family, "level": DECISION,
                         "seed": int(seed), "split": split, "task_id": task.task_id})
    return rows


def decision_dataset(families: Iterable[str] | None = None, seeds: Iterable[int] = range(100),
                     split: str = "train", tokenizer: object = None) -> Any:
    """A Hugging Face ``Dataset`` of `decision_rows` (what ``GRPOTrainer(train_dataset=...)`` takes); ``families``
    None: every family with a decision shape."""
    from datasets import Dataset  # optional: the [train] extra

    return Dataset.from_list(decision_rows(decision_families() if families is None else families, seeds, split,
                                           tokenizer))


def move_text(prefill: str, completion: object) -> str:
    """The learner's move as swm reads it: the prefill, then the completion (text, or TRL's assistant messages).

    A completion that already starts with the prefill (a chat model given no prefill may write it) is the
    move as it stands.
    """
    if isinstance(completion, list):
        completion = "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))
    text = str(completion)
    return text if prefill and text.lstrip().startswith(prefill) else f"{prefill}{text}"


def seat_reward(task: Task, move: str, config: RewardConfig = REWARD) -> float:
    """The reward swm's self-play gives the learner's seat for one move (`swm.selfplay.rewards.score`)."""
    learner = str(task.truth["learner"])
    role = task.agent(learner).role
    turn = SeatTurn(turn=0, prompt="", text=move, prompt_ids=[], token_ids=[], logprobs=[])
    rollout = Rollout(rollout_id=task.task_id, task_id=task.task_id, iteration=0, sample=0,
                      seats=[SeatTrajectory(seat=learner, role=role, turns=[turn])])
    scored, _ = score(rollout, task, config)
    return float(scored.seats[0].turns[0].reward)


def checker_reward(completions: Sequence[object], family: Sequence[str], level: Sequence[str], seed: Sequence[int],
                   split: Sequence[str], prefill: Sequence[str], **_: Any) -> list[float | None]:
    """TRL reward function: swm's checker reward of each completion, read as its row's move (never None)."""
    return [seat_reward(task_of(f, lv, int(s), sp), move_text(p, c))
            for c, f, lv, s, sp, p in zip(completions, family, level, seed, split, prefill, strict=True)]


def learner_role(task: Task) -> str:
    """The role of the seat a decision's move is for (the buyer, the finder, the persuader, ...)."""
    return task.agent(str(task.truth["learner"])).role


def role_rewards(families: Iterable[str] | None = None) -> list[Callable[..., list[float | None]]]:
    """TRL reward functions, one per learner role of ``families``, each named after its role.

    Each scores the rows whose learner plays its role as `checker_reward` does and returns None for
    the others; TRL sums a row's rewards over the functions that scored it, so the total is
    `checker_reward`'s, and logs each function apart (``rewards/<role>/mean``, ``/std``):

        >>> [f.__name__ for f in role_rewards(["negotiation", "persuasion"])]
        ['buyer', 'persuader']
    """
    families = decision_families() if families is None else families  # None: every family with a decision shape
    roles = dict.fromkeys(learner_role(task_of(f, DECISION, 0, "train")) for f in families)

    def for_role(role: str) -> Callable[..., list[float | None]]:
        def reward(completions: Sequence[object], family: Sequence[str], level: Sequence[str], seed: Sequence[int],
                   split: Sequence[str], prefill: Sequence[str], **_: Any) -> list[float | None]:
            tasks = [task_of(f, lv, int(s), sp) for f, lv, s, sp in zip(family, level, seed, split, strict=True)]
            return [seat_reward(task, move_text(p, c)) if learner_role(task) == role else None
                    for task, c, p in zip(tasks, completions, prefill, strict=True)]

        reward.__name__ = reward.__qualname__ = role
        return reward

    return [for_role(role) for role in roles]


def grpo_args(report_to: str = "tensorboard", **overrides: Any) -> dict[str, Any]:
    """``GRPOConfig`` keyword arguments: swm's device and precision choice, a checkpoint every `SAVE_STEPS` steps
    (the last `SAVE_LIMIT` kept), TRL's logs to ``report_to`` (none, tensorboard, wandb, mlflow, trackio), then
    ``overrides`` (see the module docstring for what is written where).

    A tracker whose package is not installed is refused here, in one line, before a trainer is built.
    """
    check_reporter(report_to, off="report_to='none'")
    return {**choose_placement().trainer_args(), "report_to": [] if report_to == "none" else [report_to],
            "save_strategy": "steps", "save_steps": SAVE_STEPS, "save_total_limit": SAVE_LIMIT, **overrides}
