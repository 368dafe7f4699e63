"""``swm learn``: help, one-line errors, a finished thread's report rewritten with no model call; job ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_lifelong_graph import PLAN, Agents, run

from checkpoints import ExperienceStore
from nodes.lifelong import collect_jobs, eval_jobs
from swm.cli import main
from swm.errors import InputError
from swm.lifelong import store as ls
from swm.lifelong.state import DEFAULT_PLAN


def test_help_names_the_ablation_and_resume() -> None:
    result = CliRunner().invoke(main, ["learn", "--help"])
    assert result.exit_code == 0
    assert "--gating [on|off]" in result.output and "--thread-id" in result.output and "--update" in result.output


def test_unknown_level_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["learn", "--levels", "easy,extreme", "--db", str(tmp_path / "x.db"),
                                       "--model", "m@http://127.0.0.1:9/v1"])
    assert result.exit_code == 2 and "unknown level: extreme" in result.output


def test_a_finished_thread_rewrites_its_report_without_calls(tmp_path: Path) -> None:
    out, _, _ = run(tmp_path, Agents(), PLAN, thread="done")
    report = Path(out["report_path"])
    report.unlink()
    # an unreachable endpoint proves no model is called
    result = CliRunner().invoke(main, ["learn", "--db", str(tmp_path / "run.db"), "--thread-id", "done",
                                       "--model", "m@http://127.0.0.1:9/v1", "--json"])
    assert result.exit_code == 0, result.output
    assert report.is_file() and '"episodes": 28' in result.output
    summary = json.loads(result.stdout)
    assert [p["version"] for p in summary["policies"]] == ["p0", "p1", "p2"]
    assert {"kind", "adapter", "served_as", "deployed"} <= set(summary["policies"][1])
    assert summary["policies"][0]["served_as"] == "<injected ScriptedChatModel>"  # what the episodes recorded
    assert len(summary["splits"]["dev"]) == len(summary["splits"]["test"]) == 4
    assert not set(summary["splits"]["dev"]) & set(summary["splits"]["test"])


def test_episode_ids_are_deterministic_and_seats_follow_the_mode() -> None:
    state = {"plan": {**DEFAULT_PLAN, **PLAN, "run_id": "r"}, "cycle": 1, "incumbent": "p0"}
    jobs = collect_jobs(state)  # type: ignore[arg-type]
    assert [j["episode_id"] for j in jobs] == [j["episode_id"] for j in collect_jobs(state)]  # type: ignore[arg-type]
    assert jobs[0]["episode_id"] == "r/c1/collect/p0/train:negotiation:easy:1000/s0/all"
    assert len({j["episode_id"] for j in jobs}) == len(jobs) == 2
    fixed = {**state, "plan": {**state["plan"], "self_play": False}}
    seats = [j["seat"] for j in collect_jobs(fixed)]  # type: ignore[arg-type]
    assert len(set(seats)) == 2 and "all" not in seats  # the learner takes each seat in turn
    ev = eval_jobs(state, "p3", "test")  # type: ignore[arg-type]
    assert len(ev) == 4 and all(j["task_id"].startswith("heldout:") for j in ev)
    assert ev[0]["episode_id"] == "r/test/p3/heldout:negotiation:easy:0/s0/all"  # no cycle: reused by later cycles
    dev = eval_jobs(state, "p3", "dev")  # type: ignore[arg-type]
    assert len(dev) == 4 and all(j["task_id"].startswith("dev:") for j in dev)


def test_a_store_from_before_the_dev_test_split_is_refused_in_one_line(tmp_path: Path) -> None:
    store = ExperienceStore(tmp_path / "old.db")
    store.insert_all("lifelong_matrix", [{"run_id": "r", "cycle": 0, "metric": "pass", "level": "easy",
                                          "policy_version": "p0", "successes": 1, "n": 2}],
                     pk=("run_id", "cycle", "metric", "level"))
    with pytest.raises(InputError, match="before the dev/test split"):
        ls.matrix(store, "r", "pass")
