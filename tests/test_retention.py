"""The retention arithmetic on hand-made numbers (R over level × family, BWT, F_k, transfer) and the tables."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from bench import learning, retention
from bench.learning_cells import Scored, formed_text, merge
from swm.lifelong.metrics import Cell, bwt, cell_schedule, change, column, forgetting, wilson
from swm.testing import FakeOpenAIServer

N = 100
# R[cycle][column] in %: decision and two-turn columns of two trained families (A, B) and one never trained (C)
RATES = {0: {"decision/A": 10, "decision/B": 20, "decision/C": 30, "two-turn/A": 0, "two-turn/B": 5},
         1: {"decision/A": 50, "decision/B": 40, "decision/C": 35, "two-turn/A": 10, "two-turn/B": 10},
         2: {"decision/A": 40, "decision/B": 40, "decision/C": 30, "two-turn/A": 60, "two-turn/B": 50},
         3: {"decision/A": 30, "decision/B": 36, "decision/C": 32, "two-turn/A": 70, "two-turn/B": 55}}
CURRICULUM = ["decision", "two-turn", "two-turn"]
R = {(c, j): Cell(p, N, source=f"p{c}/{j}") for c, row in RATES.items() for j, p in row.items()}


def test_the_schedule_names_each_cycles_level_for_every_trained_family() -> None:
    two_turn = frozenset({"two-turn/A", "two-turn/B"})
    assert cell_schedule(CURRICULUM, ["A", "B"]) == [frozenset({"decision/A", "decision/B"}), two_turn, two_turn]
    assert column("decision", "A") == "decision/A"


def test_bwt_forgetting_and_transfer_on_hand_made_numbers() -> None:
    schedule = cell_schedule(CURRICULUM, ["A", "B"])
    trained = ["decision/A", "decision/B", "two-turn/A", "two-turn/B"]
    # BWT: the columns last trained before T = 3 are the decision ones: ((30 - 50) + (36 - 40)) / 2
    assert bwt(R, trained, schedule).value == pytest.approx(-0.12)  # type: ignore[union-attr]
    # F_2: decision columns, best of cycle 1 minus cycle 2: ((50 - 40) + (40 - 40)) / 2
    assert forgetting(R, trained, schedule, 2).value == pytest.approx(0.05)  # type: ignore[union-attr]
    # F_3: every column trained before 3: (50-30) + (40-36) + (60-70) + (50-55), over 4
    assert forgetting(R, trained, schedule, 3).value == pytest.approx(0.0225)  # type: ignore[union-attr]
    assert change(R, "decision/C", 3).value == pytest.approx(0.02)  # type: ignore[union-attr]
    found = retention.retention(R, CURRICULUM, ["decision", "two-turn"], ["A", "B"], ["C"])
    assert found["BWT"] == bwt(R, trained, schedule) and found["BWT two-turn"] is None  # still training at T
    assert found["BWT decision/A"].value == pytest.approx(-0.20)  # type: ignore[union-attr]
    assert found["transfer decision/C"].value == pytest.approx(0.02)  # type: ignore[union-attr]
    assert found["transfer two-turn/C"] is None  # no such cell


def test_the_interval_is_mover_from_the_two_wilson_intervals() -> None:
    one = bwt(R, ["decision/A"], cell_schedule(CURRICULUM, ["A", "B"]))
    after, before = wilson(30, N), wilson(50, N)
    assert one is not None
    assert one.low == pytest.approx(-0.2 - ((0.3 - after.low) ** 2 + (before.high - 0.5) ** 2) ** 0.5, abs=1e-6)
    assert one.high == pytest.approx(-0.2 + ((after.high - 0.3) ** 2 + (0.5 - before.low) ** 2) ** 0.5, abs=1e-6)


def test_rows_of_one_policy_are_one_episode_set() -> None:
    scored = {("p0", "decision", "A", "names=eval"): Scored(10, 1, 2, 5, 1),
              ("p1", "decision", "A", "names=eval"): Scored(10, 6, 7, 9, 6),
              ("p1", "decision", "A", "other"): Scored(10, 4, 4, 8, 4)}
    r = retention.r_matrix(scored, {0: "p0", 1: "p1", 2: "p1"}, ["decision"], ["A"])  # cycle 2's candidate refused
    assert r[(1, "decision/A")] == Cell(10, 20) and r[(2, "decision/A")].source == r[(1, "decision/A")].source
    same = bwt(r, ["decision/A"], cell_schedule(["decision", "two-turn"], ["A"]))
    assert same is not None and (same.value, same.low, same.high) == (0, 0, 0)
    both = merge(scored.values())
    assert (both.n, both.passed, both.formed, both.formed_passed) == (30, 11, 22, 11)
    assert formed_text(Scored(4, 1, 1, None, 0)) == "–"  # episodes have no answer form


def test_each_arm_is_one_swm_learn_command_with_the_same_switches() -> None:
    parser = argparse.ArgumentParser()
    learning.add_task_switches(parser)
    args = parser.parse_args([])
    args.__dict__.update(cycles=2, control_cycles=2, levels="decision", families="mutual_friend", eval_families=None,
                         tasks=200, samples=2, test_per_cell=200, dev_per_cell=100, temperature=0.7, concurrency=1,
                         train_steps=30, train_lr=2e-4, train_batch_size=4, train_rank=8, out=Path("o"), prefix="l")

    def option(cmd: list[str], name: str) -> str:
        return cmd[cmd.index(name) + 1]

    commands = {arm: learning.arm_command(arm, args) for arm in ("rs-sft", "control", "ungated")}
    assert [(option(c, "--update"), option(c, "--keep"), option(c, "--gating")) for c in commands.values()] == [
        ("rs-sft", "passed", "on"), ("rs-sft", "wrong", "on"), ("rs-sft", "passed", "off")]
    for cmd in commands.values():  # same seeds, budget and task switches in every arm
        assert (option(cmd, "--cycles"), option(cmd, "--names"), option(cmd, "--eval-shifts"),
                option(cmd, "--balance"), option(cmd, "--episodes-per-level")) == (
            "2", "disjoint", "unseen-names,long-lists", "on", "400")


def _oracle(prompt: str, body: dict[str, Any]) -> str:
    """Answer mutual friend rightly; anything else with a line the checkers fail."""
    if "Ask " in prompt and "for their friends" in prompt:
        return "Who are your friends?"
    names = re.findall(r"^- (.+)$", prompt, re.M)
    shared = [n for n in names if names.count(n) > 1]
    return f"ANSWER: {shared[0]}" if shared else "ANSWER: nobody"


def test_the_retention_benchmark_writes_its_tables_from_one_tiny_run(tmp_path: Path) -> None:
    with FakeOpenAIServer(scripts={"<text>": _oracle}) as server:
        retention.main(["--update", "memory", "--model", server.model_spec, "--cycles", "3",
                        "--levels", "decision,two-turn,easy", "--families", "mutual_friend,negotiation",
                        "--transfer", "scheduling", "--tasks", "2", "--samples", "2", "--max-turns", "2",
                        "--test-per-cell", "2", "--dev-per-cell", "1", "--shift-per-cell", "1", "--concurrency", "2",
                        "--out", str(tmp_path), "--no-page"])
    table = (tmp_path / "table.md").read_text()
    assert "R[cycle, level/family], deployed curve" in table and "candidate curve" in table
    for name in ("decision/mutual_friend", "two-turn/negotiation", "easy/scheduling"):
        assert name in table
    assert "* BWT:" in table and "* F_3:" in table and "* transfer decision/scheduling:" in table
    # per level over the trained families: the oracle completes mutual friend (2 of the 4 tasks), right when formed
    assert "| 0 | p0 | decision | 2/4 = 50.0% [15.0, 85.0] | 2/4 = 50.0% [15.0, 85.0] | 2/2 = 100.0%" in table
    assert "| 0 | p0 | easy | 0/4 = 0.0% [0.0, 49.0] | 0/4 = 0.0% [0.0, 49.0] | – (none well-formed) |" in table
    assert "names=unseen" in table and "friends=8-10" in table  # the shifted cells
    assert "| 1 | decision | 4 episodes (2 passed) |" in table and "| 3 | easy | 4 episodes" in table


def test_the_learning_benchmark_reports_well_formed_answers_and_shifted_cells(tmp_path: Path) -> None:
    with FakeOpenAIServer(scripts={"<text>": _oracle}) as server:
        learning.main(["--arms", "memory", "--cycles", "1", "--levels", "decision", "--families", "mutual_friend",
                       "--model", server.model_spec, "--tasks", "2", "--samples", "2", "--test-per-cell", "3",
                       "--dev-per-cell", "1", "--shift-per-cell", "2", "--concurrency", "2", "--out", str(tmp_path),
                       "--no-page"])
    table = (tmp_path / "table.md").read_text()
    assert "| correct among well-formed |" in table
    assert "| memory | 0 | 3/3 = 100.0% [43.9, 100.0] | 3/3 = 100.0% [43.9, 100.0] |" in table
    assert "| memory | decision | mutual_friend | names=unseen | p0 | 2/2 = 100.0%" in table
    assert "| memory | decision | mutual_friend | names=eval,friends=8-10 | p1 | 2/2 = 100.0%" in table
