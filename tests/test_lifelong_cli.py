"""``swm learn``: help, one-line errors, a finished thread's report rewritten with no model call; job ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_lifelong_graph import PLAN, Agents, run

from swm.checkpoints import ExperienceStore
from swm.cli import main
from swm.errors import InputError
from swm.lifelong import store as ls
from swm.lifelong.jobs import collect_jobs, eval_jobs
from swm.lifelong.plan import DEFAULT_PLAN
from swm.testing import ScriptedChatModel


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
                                       "--model", "m@http://127.0.0.1:9/v1", "--out", str(report.parent), "--json"])
    assert result.exit_code == 0, result.output
    assert report.is_file() and '"episodes": 28' in result.output
    summary = json.loads(result.stdout)
    assert [p["version"] for p in summary["policies"]] == ["p0", "p1", "p2"]
    assert {"kind", "adapter", "served_as", "deployed"} <= set(summary["policies"][1])
    assert summary["policies"][0]["served_as"] == "<injected ScriptedChatModel>"  # what the episodes recorded
    assert len(summary["splits"]["dev"]) == len(summary["splits"]["test"]) == 4
    assert not set(summary["splits"]["dev"]) & set(summary["splits"]["test"])
    # the held-out results, the numbers a user runs it for: R per metric and curve, cell by cell, and its metrics
    from swm.checkpoints import ExperienceStore

    stored = list(ExperienceStore(tmp_path / "run.db").rows(
        "select cycle, level, successes, n from lifelong_matrix where run_id = 'done' and metric = 'pass' and "
        "curve = 'deployed'"))
    r = summary["heldout"]["pass"]["deployed"]["R"]
    assert stored and len(stored) == sum(len(cells) for cells in r.values())
    for row in stored:
        cell = r[str(row["cycle"])][row["level"]]
        assert (cell["successes"], cell["n"]) == (row["successes"], row["n"]) and cell["low"] <= cell["high"]
        assert cell["rate"] == (row["successes"] / row["n"] if row["n"] else None)
    metrics = summary["heldout"]["pass"]["deployed"]["metrics"]
    assert "ACC" in metrics and "**ACC**" in report.read_text()
    assert set(summary["heldout"]) == {"completion", "pass"}
    assert set(summary["heldout"]["pass"]) == {"deployed", "candidate"}


def test_a_rerun_writes_only_into_its_own_out_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copied database names another run's folder in its plan: the rerun must not write there."""
    out, _, _ = run(tmp_path, Agents(), PLAN, thread="done")
    theirs = Path(out["report_path"])
    before = theirs.read_text()
    theirs.write_text("another run's report")
    here = tmp_path / "copy"
    here.mkdir()
    monkeypatch.chdir(here)
    result = CliRunner().invoke(main, ["learn", "--db", str(tmp_path / "run.db"), "--thread-id", "done",
                                       "--model", "m@http://127.0.0.1:9/v1"])
    assert result.exit_code == 0, result.output
    assert theirs.read_text() == "another run's report"
    assert (here / "swm-learn-done" / "report.md").read_text().split("\n")[:3] == before.split("\n")[:3]


def test_a_second_run_of_a_held_thread_is_refused_before_it_builds_anything(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease is checked first: a run refused because another holds the thread builds no context (model,
    stores) and records no run; it built both, then was refused."""
    from swm.checkpoints import hold_lease
    from swm.commands import learn

    built: list[object] = []
    make_context = learn.make_context
    monkeypatch.setattr(learn, "make_context", lambda *a, **k: built.append(a) or make_context(*a, **k))
    db = tmp_path / "run.db"
    with hold_lease(db, "held"):
        result = CliRunner().invoke(main, ["learn", "--db", str(db), "--thread-id", "held",
                                           "--model", "m@http://127.0.0.1:9/v1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 5 and "error: thread held is already running" in result.output, result.output
    assert built == [], "the context was built before the refusal"
    store = ExperienceStore(db)
    assert not store.has_table("swm_runs") or store.count("swm_runs") == 0, "the refused run recorded itself"


def test_changed_options_on_an_existing_thread_are_refused_with_the_differences(tmp_path: Path) -> None:
    run(tmp_path, Agents(), PLAN, thread="done")
    args = ["learn", "--db", str(tmp_path / "run.db"), "--thread-id", "done", "--model", "m@http://127.0.0.1:9/v1",
            "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(main, [*args, "--max-turns", "5", "--families", "negotiation,secret",
                                       "--gating", "off"])
    assert result.exit_code == 2
    assert "error: thread done was started with other options (max_turns: 2 → 5; gating: True → False)" \
        in result.output, result.output
    same = CliRunner().invoke(main, [*args, "--max-turns", "2", "--cycles", "2"])  # as started: no difference
    assert same.exit_code == 0 and "already finished" in same.output
    fewer = CliRunner().invoke(main, [*args, "--cycles", "1"])
    assert fewer.exit_code == 2 and "cycles: 2 → 1" in fewer.output


def test_more_cycles_extend_a_finished_thread(tmp_path: Path) -> None:
    from swm.checkpoints import ExperienceStore

    agents = Agents()
    run(tmp_path, agents, PLAN, thread="done")
    played = agents.acts
    result = CliRunner().invoke(main, ["learn", "--db", str(tmp_path / "run.db"), "--thread-id", "done",
                                       "--model", "m@http://127.0.0.1:9/v1", "--out", str(tmp_path / "out"),
                                       "--cycles", "3", "--json"], obj={"llm": ScriptedChatModel(respond=agents)})
    assert result.exit_code == 0, result.output
    assert "extending finished thread done from 2 to 3 cycles" in result.output
    store = ExperienceStore(tmp_path / "run.db")
    cycles = sorted({int(r["cycle"]) for r in store.rows("select cycle from lifelong_matrix where run_id = 'done'")})
    assert cycles == [0, 1, 2, 3]
    assert agents.acts > played  # cycle 3 was played, cycles 0-2 were not played again
    ids = [r["episode_id"] for r in store.rows("select episode_id from lifelong_episodes where run_id = 'done'")]
    assert len(ids) == len(set(ids))
    assert (tmp_path / "out" / "report.md").read_text().split("\n")[2].startswith("Cycles 3, ")


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


def test_eval_families_from_the_command_line_become_the_plans_list(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`--eval-families` (an optional list) is split and checked like --families, and absent means None."""
    import swm.commands.learn as learn

    seen: list[object] = []

    def capture(thread: str, folder: str, options: dict[str, object]) -> dict[str, object]:
        seen.append(options["eval_families"])
        raise InputError("stop here")

    monkeypatch.setattr(learn, "build_plan", capture)
    common = ["learn", "--db", str(tmp_path / "x.db"), "--model", "m@http://127.0.0.1:9/v1"]
    CliRunner().invoke(main, [*common, "--eval-families", "mutual_friend,persuasion"])
    CliRunner().invoke(main, common)
    assert seen == [["mutual_friend", "persuasion"], None]
    bad = CliRunner().invoke(main, [*common, "--eval-families", "mutual_friend,bogus"])
    assert bad.exit_code == 2 and "unknown eval_family: bogus" in bad.output
