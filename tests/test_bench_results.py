"""Benchmark results pages: a run writes a dated page with where its numbers come from, and the index follows."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.results import ROOT, RunInfo, command_line, results_page, update_index, write_page


def info(day: int, hour: int = 12) -> RunInfo:
    return RunInfo(command="python -m bench.faults --rate 0.2", commit="abc1234", machine="2 cores (test CPU)",
                   when=datetime(2026, 11, day, hour, 5, tzinfo=UTC))


def test_a_page_says_command_commit_machine_and_date_before_the_numbers(tmp_path: Path) -> None:
    (tmp_path / "index.md").write_text("# Results\n\nHand-written text stays.\n")
    page = write_page("faults", "Endpoint faults", info(24), "| case | lost |\n|---|---|\n| tom | 0 |\n", tmp_path)
    text = page.read_text()
    assert page.name == "faults-2026-11-24.md"
    head, body = text.split("| tom | 0 |")[0], text
    for line in ("| Command | `python -m bench.faults --rate 0.2` |", "| Commit | `abc1234` |",
                 "| Machine | 2 cores (test CPU) |", "| Date | 2026-11-24 12:05 UTC |"):
        assert line in head
    assert body.index("| Date |") < body.index("| tom | 0 |")
    # bench/ is not installed: the page says where its command runs
    assert "| Run from | the root folder of a source checkout (`bench/` is not installed with swm" in head
    index = (tmp_path / "index.md").read_text()
    assert "Hand-written text stays." in index and "* [Endpoint faults (2026-11-24)](faults-2026-11-24.md)" in index


def test_a_newer_run_moves_the_older_page_to_history_and_a_same_day_run_gets_the_time(tmp_path: Path) -> None:
    write_page("faults", "Endpoint faults", info(22), "old", tmp_path)
    write_page("engine", "Engine", info(23), "engine", tmp_path)
    write_page("faults", "Endpoint faults", info(24), "new", tmp_path)
    again = write_page("faults", "Endpoint faults", info(24, hour=18), "newer", tmp_path)
    assert again.name == "faults-2026-11-24-1805.md"
    index = (tmp_path / "index.md").read_text()
    latest, history = index.split("### Latest")[1].split("### History")
    assert "faults-2026-11-24-1805.md" in latest and "engine-2026-11-23.md" in latest
    assert "faults-2026-11-22.md" not in latest and "faults-2026-11-22.md" in history
    assert "faults-2026-11-24.md) — superseded by faults-2026-11-24-1805.md" in history
    update_index(tmp_path)  # rewriting the list again changes nothing
    assert (tmp_path / "index.md").read_text() == index


def test_a_run_of_other_workloads_is_its_own_series(tmp_path: Path) -> None:
    write_page("engine-speed", "Engine speed", info(22), "default workloads", tmp_path)
    write_page("engine-speed", "Engine speed (werewolf, 6 rounds)", info(23), "whole games", tmp_path)
    write_page("engine-speed", "Engine speed (werewolf, 6 rounds)", info(24), "whole games again", tmp_path)
    latest, history = (tmp_path / "index.md").read_text().split("### Latest")[1].split("### History")
    assert "engine-speed-2026-11-22.md" in latest and "engine-speed-2026-11-24.md" in latest
    assert "engine-speed-2026-11-23.md) — superseded by engine-speed-2026-11-24.md" in history
    assert "engine-speed-2026-11-22.md" not in history


def test_the_command_names_no_path_outside_the_checkout() -> None:
    line = command_line(["--out", "/somewhere/else/out", "--data", str(ROOT / "docs" / "x.json")], "bench.workers")
    assert line == "python -m bench.workers --out out --data docs/x.json"


def test_results_page_keeps_what_the_run_printed_and_writes_nothing_when_disabled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with results_page("workers", "Many workers", "bench.workers", ["--stories", "2"], folder=tmp_path):
        print("| runner | wall |")
    (page,) = tmp_path.glob("workers-*.md")
    text = page.read_text()
    assert "`python -m bench.workers --stories 2`" in text and "```\n| runner | wall |\n```" in text
    assert f"results page: {page.name}" in capsys.readouterr().out
    with results_page("engine", "Engine", "bench.engine", [], enabled=False, folder=tmp_path):
        print("smoke")
    assert not list(tmp_path.glob("engine-*.md"))



def test_the_results_index_says_where_the_pages_bench_commands_run() -> None:
    """Pages written by a run carry the row themselves; the index says it for the hand-kept ones too."""
    assert "runs from the root folder of a source checkout" in (ROOT / "docs" / "results" / "index.md").read_text()
