"""The Werewolf signals' tables: the benchmark's report and self-play's per-iteration rows, from hand-built games."""

from __future__ import annotations

import argparse

from test_game_signals import drawn_game, village_game

from bench.selfplay import signals
from bench.werewolf_signals import report
from swm.commands.progress import iteration_line
from swm.games.signals import game_signals, summarise_signals


def test_the_benchmark_reports_each_signal_and_the_games_0_2_needs() -> None:
    args = argparse.Namespace(players=5, max_rounds=2, temperature=0.7)
    done = {0: {"seed": 0, "seconds": 30.0, "moves": 17, "signals": game_signals(drawn_game())},
            1: {"seed": 1, "seconds": 50.0, "moves": 12, "signals": game_signals(village_game())},
            2: {"seed": 2, "seconds": 9.0, "moves": 3, "signals": None, "failed": "ValueError: no reply"}}
    text = report(args, done)
    assert text.startswith("2 games played (1 failed); a game: 40 s ± 127, 14.5 moves")
    assert "| 0.88 [0.64, 0.96] (14/16) |" in text  # legal moves, pooled over both games
    assert "0.83 [0.44, 0.97] (5/6) (0.36; z 2.4)" in text  # village votes on a werewolf, chance 13/36, z 17/7
    assert "| legal moves | 8.00 | 3 | ±0.16 (n=16) |" in text
    assert "| werewolves | 1.00 | 21 |" in text and "| games | 1.00 | 21 |" in text


def test_self_plays_benchmark_tables_the_signals_of_each_iteration() -> None:
    s = summarise_signals([game_signals(drawn_game())])
    rows = signals({"group": {"summaries": {"1": {"signals": s}, "0": {"signals": s, "eval_signals": s}}}})
    lines = rows.strip().splitlines()
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| group 0 train", "| group 0 held-out", "| group 1 train"]
    assert signals({"group": {"summaries": {"0": {"signals": None}}}}) == ""


def test_the_progress_line_of_a_game_iteration_shows_its_legal_move_rate() -> None:
    s = summarise_signals([game_signals(drawn_game())])
    line = iteration_line(0, {"estimator": "group", "signals": s})
    assert "; legal moves 0.80 [0.49, 0.94] (n=10); KL" in line
    assert "legal moves" not in iteration_line(0, {"estimator": "group", "signals": None})


def test_a_reward_of_one_value_prints_no_interval() -> None:
    """n = 1 has no spread to estimate: the line says n = 1 and no ``±0.00``."""
    line = iteration_line(0, {"estimator": "group", "reward": {"finder": {"mean": 1.0, "ci95": None, "n": 1},
                                                               "speaker": {"mean": 0.5, "ci95": 0.25, "n": 8}}})
    assert "finder 1.00 (n=1)" in line and "speaker 0.50±0.25 (n=8)" in line and "±0.00" not in line
