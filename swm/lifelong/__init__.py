"""The lifelong loop: verifiable social tasks, dual-track preference signals, gated updates, retention metrics.

The graph is `graphs.lifelong`; the CLI is ``swm learn``; the tasks, their checkers and the frozen
dev and test splits are `swm.tasks`. Each module is one concept: `plan` (every setting of a run),
`jobs` (which episodes a cycle plays), `episodes` (play and record one), `bridge` and `game_bridge`
(tasks to the episode and game graphs and back), `convert` (pairs on the action and perception
tracks), `gate` (rules with reason codes), `update` (memory; the SFT/DPO/KTO rows), `exports` (the
``<out>/exports`` folder TRL reads), `train` (TRL), `deploy` (the deploy gate), `metrics` (ACC,
BWT, FWT, F_k), `report` and `plots`, `store` (the experience-store tables), `serve` (a version's
model spec).

The names below are imported on first use (PEP 562), so reading a run's settings (`plan`, as ``swm learn --help``
does) loads none of the store, model clients or LangGraph the loop's other modules bring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from swm.lazy import lazy_exports

if TYPE_CHECKING:
    from swm.lifelong.convert import build_pairs, outcome_score, perception_score, turn_rewards
    from swm.lifelong.deploy import DeployDecision, decide
    from swm.lifelong.gate import GateSettings, gate_pairs, reject_counts
    from swm.lifelong.metrics import Cell, Estimate, summary, wilson
    from swm.lifelong.records import ActedTurn, EpisodeRecord, Prediction, PreferencePair
    from swm.lifelong.update import PolicyVersion, dpo_rows, kto_rows, memory_text

# public name -> the module that defines it
_HOMES = {name: module for module, names in (
    ("swm.lifelong.convert", ("build_pairs", "outcome_score", "perception_score", "turn_rewards")),
    ("swm.lifelong.deploy", ("DeployDecision", "decide")),
    ("swm.lifelong.gate", ("GateSettings", "gate_pairs", "reject_counts")),
    ("swm.lifelong.metrics", ("Cell", "Estimate", "summary", "wilson")),
    ("swm.lifelong.records", ("ActedTurn", "EpisodeRecord", "Prediction", "PreferencePair")),
    ("swm.lifelong.update", ("PolicyVersion", "dpo_rows", "kto_rows", "memory_text")),
) for name in names}

__all__ = ["ActedTurn", "Cell", "DeployDecision", "EpisodeRecord", "Estimate", "GateSettings", "PolicyVersion",
           "Prediction", "PreferencePair", "build_pairs", "decide", "dpo_rows", "gate_pairs", "kto_rows", "memory_text",
           "outcome_score", "perception_score", "reject_counts", "summary", "turn_rewards", "wilson"]


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
