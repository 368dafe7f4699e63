"""``python -m bench.belief``: does the belief gain say what a message is worth, on the shipped model?

For each of ``--tasks`` generated multi-turn training tasks, seat A's first message discloses three of its own
friends, once with the shared friend among them and once without (the other names drawn from A's list, seeded).
The gain (`swm.selfplay.belief.belief_gains`: seat B's log-probability of the friend on its closing prompt after
the message minus before) is computed by the embedded SmolLM2-135M as shipped (torch, no adapter), in each number
format the CPU runs. Printed: the mean gain of each message with a 95% interval, how often it is above 0, and how
often the message with the friend gained more than the one without (paired, the same task), with an exact sign test.
"""

from __future__ import annotations

import argparse
import random

import torch

from bench.results import results_page
from swm.selfplay.belief import belief_gains
from swm.stats import mcnemar_exact, mean_ci
from swm.tasks.multi_turn import multi_turn_task
from swm.training.config import PolicyConfig
from swm.training.device import cpu_bf16
from swm.training.policy import LoraValueModel


def messages(seed: int) -> tuple[object, str, str, str]:
    """A task, its opener, and the opener's first message with the friend and without it (three names each)."""
    task = multi_turn_task("mutual_friend", seed)
    opener = task.truth["seats"][0]
    friend, own = task.truth["friend"], task.truth["lists"][0]
    others = [n for n in own if n != friend]
    rng = random.Random(seed)
    picked = rng.sample(others, 3)
    with_friend = [*picked[:2], friend]
    rng.shuffle(with_friend)
    return task, opener, "My friends:\n" + "\n".join(f"{k}. {n}" for k, n in enumerate(with_friend, 1)), \
        "My friends:\n" + "\n".join(f"{k}. {n}" for k, n in enumerate(picked, 1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.belief", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=48)
    parser.add_argument("--no-page", action="store_true")
    args = parser.parse_args(argv)
    with results_page("belief", "Belief gain on the shipped model: a message with the friend against one without",
                      "bench.belief", argv, enabled=not args.no_page, markdown=True):
        modes = ["off", "bfloat16"] if cpu_bf16() else ["off"]
        policy = LoraValueModel.create(PolicyConfig())
        print(f"{args.tasks} generated multi-turn training tasks (seeds 0..{args.tasks - 1}); SmolLM2-135M as "
              f"shipped, no adapter; torch {torch.__version__}, {torch.get_num_threads()} threads.\n")
        print("| number format | gain, with the friend (nats) | > 0 | gain, without | > 0 | with > without "
              "(paired) | sign test p |\n|---|---|---|---|---|---|---|")
        for mode in modes:
            policy.config = policy.config.model_copy(update={"autocast": mode})
            policy._autocast = None
            with_gain, without_gain = [], []
            for seed in range(args.tasks):
                task, opener, yes, no = messages(seed)
                with_gain.append(belief_gains(policy, task, [(opener, yes)])[0])  # type: ignore[arg-type]
                without_gain.append(belief_gains(policy, task, [(opener, no)])[0])  # type: ignore[arg-type]
            (m1, h1, n), (m0, h0, _) = mean_ci(with_gain), mean_ci(without_gain)
            more = [a > b for a, b in zip(with_gain, without_gain, strict=True)]
            wins, _, p = mcnemar_exact(more, [not m for m in more])  # the sign test: each pair one way or the other
            name = "float32" if mode == "off" else "bfloat16 autocast"
            print(f"| {name} | {m1:+.2f} ± {h1:.2f} | {sum(g > 0 for g in with_gain)}/{n} | {m0:+.2f} ± {h0:.2f} | "
                  f"{sum(g > 0 for g in without_gain)}/{n} | {wins}/{n} | {p:.1e} |")


if __name__ == "__main__":
    main()
