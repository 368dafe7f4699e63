"""What a tracker plots for a self-play run after each iteration (`iteration_scalars`), from its summary.

The evaluate node logs them on the axis ``iteration`` (`swm.tracking`), beside the summary it stores:

* ``reward/<role>`` — the role's mean seat return over the iteration's training rollouts (``reward/<role>/ci95``
  its 95% half-width), and ``heldout/reward/<role>`` over the held-out rollouts played after the update;
* ``pass_rate`` and ``heldout/pass_rate`` — tasks the checker passed (task families; a game has none);
* ``update/…`` — the PPO update's mean loss parts: ``loss``, ``policy``, ``value``, ``kl`` (with a KL penalty),
  ``clipped`` (the clip fraction: tokens whose ratio left 1 ± ε), and its steps, rows and skipped rows; swm's
  PPO scores only the sampled tokens, so there is no entropy to log;
* ``rollouts/…`` — filtered-turn rate, failed rollouts, tokens/s; ``seconds/…`` — sampling, update, evaluation;
* ``signals/…`` and ``heldout/signals/…`` — a game's pooled per-role signals (`swm.games.signals`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swm.selfplay.state import IterationSummary, RoleReward, UpdateStats
from swm.tracking import scalars


def _rewards(prefix: str, rewards: Mapping[str, RoleReward] | None) -> dict[str, float | None]:
    """``<prefix>/<role>`` (the mean seat return) and ``<prefix>/<role>/ci95`` of each role."""
    out: dict[str, float | None] = {}
    for role, reward in (rewards or {}).items():
        out[f"{prefix}/{role}"], out[f"{prefix}/{role}/ci95"] = reward["mean"], reward["ci95"]
    return out


def iteration_scalars(summary: IterationSummary, update: UpdateStats | None = None) -> dict[str, float]:
    """Return the iteration's numbers as ``a/b`` keys (see the module docstring); ``update`` adds every PPO part."""
    ppo = {"kl": summary["kl"], "loss": summary["loss"], "clipped": summary["clipped"], "rows": summary["rows"],
           "skipped_rows": summary["skipped_rows"]}
    tree: dict[str, Any] = {
        "pass_rate": summary["pass_rate"],
        "heldout": {"pass_rate": summary["eval_pass_rate"], "signals": summary["eval_signals"] or {}},
        "update": {**ppo, **{k: v for k, v in (update or {}).items() if k not in ("seconds", "resumed")}},
        "rollouts": {"filtered_rate": summary["filtered_rate"], "failed": summary["failed"],
                     "tokens_per_s": summary["tokens_per_s"], "reseeded": summary.get("reseeded")},
        "seconds": {"sampling": summary["sampling_seconds"], "update": summary["update_seconds"],
                    "evaluate": summary["evaluate_seconds"], "iteration": summary["seconds"]},
        "signals": summary["signals"] or {}}
    rewards = {**_rewards("reward", summary["reward"]), **_rewards("heldout/reward", summary["eval_reward"])}
    return {**scalars(rewards), **scalars(tree)}
