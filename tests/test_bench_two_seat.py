"""bench.two_seat's table over staged runs, on hand-made results (no model); its McNemar test is swm.stats'
(tests/test_stats.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import bench.two_seat as two_seat
from bench.two_seat import combine


def _rows(passed: list[bool]) -> list[dict[str, object]]:
    return [{"task": f"t{i}", "passed": p, "listed": 1.0, "transcript": []} for i, p in enumerate(passed)]


def _curve(rates: list[float]) -> dict[str, dict[str, float]]:
    return {str(i): {"rollouts": 4, "failed": 0, "pass_rate": r, "sampling_s": 1.0, "update_s": 2.0}
            for i, r in enumerate(rates)}


def test_staged_runs_are_numbered_across_stages_and_compared_with_the_first_warm_start(tmp_path: Path) -> None:
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (first, second, third):
        folder.mkdir()
    warm = [False] * 10
    (first / "two-seat.json").write_text(json.dumps({
        "eval": {"warm": _rows(warm), "selfplay": _rows([True] * 3 + [False] * 7),
                 "shuffled": _rows([False] * 10)},
        "curves": {"selfplay": _curve([0.25, 0.5]), "shuffled": _curve([0.25, 0.0])}}))
    (second / "two-seat.json").write_text(json.dumps({
        "eval": {"warm": _rows([True] * 3 + [False] * 7), "selfplay": _rows([True] * 8 + [False] * 2)},
        "curves": {"selfplay": _curve([0.75, 1.0])}}))
    (third / "two-seat.json").write_text(json.dumps({  # the control's second stage, run on its own
        "eval": {"warm": _rows([False] * 10), "shuffled": _rows([True] + [False] * 9)},
        "curves": {"shuffled": _curve([0.0, 0.25])}}))
    table = combine([first, second, third])
    assert "| selfplay | 3 | 4/4 = 1.000" in table  # the second stage's iteration 1 is the run's iteration 3
    assert "| warm | 0/10 = 0.000" in table  # the first stage's warm start, not the second's
    assert "| selfplay after 4 | 8/10 = 0.800" in table
    assert f"| warm → selfplay after 4 | 0 | 8 | {2 / 2**8:.3g} |" in table
    assert "| shuffled after 2 → selfplay after 2 | 0 | 3 | 0.25 |" in table
    assert "| shuffled | 3 | 1/4 = 0.250" in table
    assert "| shuffled after 4 → selfplay after 4 | 0 | 7 |" in table


def test_the_report_shows_each_tasks_own_roles_rewards() -> None:
    """Two-seat roles (speaker, finder) and multi-turn ones (opener, responder) are both tabled as they are."""
    from bench.two_seat import report  # noqa: PLC0415

    curve = _curve([0.25])
    curve["0"]["reward"] = {"opener": {"mean": 0.125}, "responder": {"mean": 0.5}}  # type: ignore[assignment]
    table = report({"curves": {"selfplay": curve}})
    assert "| selfplay | 0 | 1/4 = 0.250 [" in table and "| opener 0.125, responder 0.500 |" in table


def test_a_stopped_run_keeps_the_iterations_it_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each iteration's summary is saved when the graph reports it, not when the arm's training returns: a run
    killed during iteration 1 still shows iteration 0 (and resumes from its thread)."""
    summary = {"rollouts": 4, "failed": 0, "pass_rate": 0.25, "sampling_seconds": 3.0, "update_seconds": 2.0,
               "seconds": 6.0}

    def stopped_train(plan: object, **kw: Any) -> dict[str, Any]:
        kw["on_event"]("node", "rollout")
        kw["on_event"]("done", ("evaluate", {"summaries": {"0": summary}, "iteration": 1}))
        raise KeyboardInterrupt  # killed during iteration 1

    monkeypatch.setattr(two_seat, "train", stopped_train)
    monkeypatch.setattr(two_seat, "evaluate", lambda plan, iteration, n: _rows([False, True]))
    monkeypatch.setattr(sys, "argv", ["two_seat", "--out", str(tmp_path), "--arms", "selfplay", "--eval-tasks", "2"])
    with pytest.raises(KeyboardInterrupt):
        two_seat.main()
    saved = json.loads((tmp_path / "two-seat.json").read_text())
    assert saved["curves"]["selfplay"]["0"]["pass_rate"] == 0.25
    assert saved["curves"]["selfplay"]["0"]["other_s"] == 1.0  # 6 s less sampling and update
    assert "| selfplay | 0 | 1/4 = 0.250" in (tmp_path / "two-seat.md").read_text()



def test_the_control_arm_shuffles_the_belief_gains_too_so_it_has_no_signal(tmp_path: Path) -> None:
    from swm.selfplay.plan import SelfPlayPlan  # noqa: PLC0415

    def plans(*extra: str) -> dict[str, SelfPlayPlan]:
        args = two_seat.parser().parse_args(["--level", "multi-turn-4", "--out", str(tmp_path), *extra])
        return {arm: SelfPlayPlan.model_validate(two_seat.plan_of(args, arm)) for arm in two_seat.ARMS}

    mixed = plans("--belief", "0.5")
    assert (mixed["selfplay"].reward.belief, mixed["selfplay"].reward.belief_shuffle) == (0.5, False)
    assert mixed["shuffled"].shuffle_rewards and mixed["shuffled"].reward.belief_shuffle
    outcome = plans()
    assert outcome["shuffled"].shuffle_rewards and not outcome["shuffled"].reward.belief_shuffle
    assert outcome["selfplay"].level == "multi-turn-4" and not outcome["selfplay"].shuffle_rewards
