"""bench.rungs' tables: the R matrix, each policy against the one before it, and retention from the trained policy."""

from __future__ import annotations

import pytest

from bench.rungs import main, report


def _rows(passed: list[bool]) -> list[dict[str, object]]:
    return [{"task": f"t{i:02d}", "passed": p, "transcript": []} for i, p in enumerate(passed)]


def test_retention_is_read_from_the_trained_policy_to_the_last_on_the_same_tasks() -> None:
    cells = {"base": {"decision": _rows([False] * 20), "two-seat": _rows([False] * 20)},
             "decisions": {"decision": _rows([True] * 12 + [False] * 8), "two-seat": _rows([False] * 20)},
             # forgot most decisions, learned the two-seat rung
             "two-seat": {"decision": _rows([True] * 2 + [False] * 18), "two-seat": _rows([True] * 15 + [False] * 5)}}
    table = report({"cells": cells}, ["base", "decisions", "two-seat"], ["decision", "two-seat"],
                   {"decision": "decisions", "two-seat": "two-seat"})
    assert "| decisions | 12/20 = 0.600" in table
    assert "| decision | base → decisions | 0 | 12 |" in table
    assert "| decision | decisions → two-seat | 10 | 0 |" in table
    retention = [line for line in table.splitlines() if line.startswith("| decision | decisions → two-seat | -0.500")]
    assert retention and retention[0].endswith("| forgotten |")
    # the last policy is the one trained on two-seat: no retention row for it
    assert "| two-seat | two-seat → two-seat" not in table


def test_a_rung_kept_within_its_interval_is_not_called_forgotten() -> None:
    cells = {"a": {"decision": _rows([True] * 10 + [False] * 10)}, "b": {"decision": _rows([True] * 9 + [False] * 11)}}
    table = report({"cells": cells}, ["a", "b"], ["decision"], {"decision": "a"})
    assert table.rstrip().endswith("| not told apart |")


@pytest.mark.parametrize("argv", [["--policy", "nameless"], ["--policy", "a=", "--levels", "easy"],
                                  ["--policy", "a=", "--trained", "decision=b"]])
def test_bad_options_stop_in_one_line(argv: list[str], tmp_path: object) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--out", str(tmp_path)])
    assert str(stop.value).startswith("error: ")
