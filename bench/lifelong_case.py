"""One lifelong cycle as a benchmark case: baseline evaluation, then one collect → … → deploy cycle.

The plan is the smallest that exercises every node: one level, one family, two collected
episodes and one dev plus one test episode per policy (p0 at cycle 0, the candidate p1 at cycle
1; the incumbent's are reused, not replayed), four turns each, plain policy, no judge. The fake
agents always speak, so every episode plays all its turns and the floor is exact:
episodes × turns × 1 call (the memory update makes no call).
"""

from __future__ import annotations

import tempfile
from typing import Any

from bench.graph_case import GraphCase

TURNS = 4
COLLECTED = 2
HELDOUT = 1  # one level × one family × one task per cell, in each of the dev and test splits


def plan(i: int) -> dict[str, Any]:
    return {"run_id": f"bench-{i}", "cycles": 1, "levels": ["easy"], "families": ["negotiation"],
            "episodes_per_level": COLLECTED, "samples_per_task": 1, "max_turns": TURNS,
            "heldout_per_cell": HELDOUT, "dev_per_cell": HELDOUT, "act_strategy": "plain", "eval_act_strategy": "plain",
            "judge": False,
            "out_dir": tempfile.mkdtemp(prefix="swm-bench-lifelong-")}


def cases(module: Any) -> list[GraphCase]:
    episodes = 2 * HELDOUT + COLLECTED + 2 * HELDOUT  # cycle 0: p0 on dev+test; cycle 1: collect, p1 on dev+test
    return [GraphCase("lifelong (1 cycle)", module.build, lambda i: {"plan": plan(i)},
                      lambda inp: episodes * TURNS, critical=lambda inp: 3 * TURNS,
                      note=f"{episodes} episodes x {TURNS} turns x 1 call; the episodes of a phase run as "
                           "parallel Send branches, so the critical path is 3 episodes",
                      # durability="sync" crashes here: the episode graph invoked inside a node with
                      # checkpointer=False inherits it, and LangGraph then awaits a checkpoint future
                      # that a graph with no checkpointer never made (AttributeError _put_checkpoint_fut).
                      durability="async")]
