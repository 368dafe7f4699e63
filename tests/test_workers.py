"""Batch items spread over Ray workers: a killed worker's item is retried and resumed, none lost or repeated."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_tom_bench import FIX, ScriptedServer

from swm.checkpoints import open_store
from swm.cli import main
from swm.testing import scaled

pytest.importorskip("ray", reason="the workers extra is not installed (pip install -e '.[workers]')")

ROOT = Path(__file__).resolve().parents[1]


def _args(spec: str, db: str, thread: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "swm", "bench", "tom", "--benchmark", "tomi",
            "--data", str(FIX / "tomi_mini.txt"), "--modes", "cot,s3ap", "--model", spec, "--db", db,
            "--thread-id", thread, "--out", str(out), "--no-progress", *extra]


def _answers(db: str, run: str) -> list[tuple[str, str, str, int]]:
    rows = open_store(db).rows("select mode, item_id, answer, correct from tom_results where run = ? "
                               "order by mode, item_id", [run])
    return [(r["mode"], r["item_id"], r["answer"], r["correct"]) for r in rows]


def _refuse_cluster(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    """Make ``ray.init`` in this process fail, noting each call: for a command that must start no cluster."""
    import ray

    calls: list[dict[str, object]] = []

    def refuse(*args: object, **kwargs: object) -> None:
        calls.append(kwargs)
        raise RuntimeError("this run has nothing to play: it must start no Ray cluster")

    monkeypatch.setattr(ray, "init", refuse)
    return calls


def test_a_killed_worker_loses_and_repeats_no_item(pg_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": os.pathsep.join(
        [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
    reference = ScriptedServer()
    try:  # the reference, one process: this one (no interpreter to start and import swm into: ~4 s of CPU)
        done = CliRunner().invoke(main, _args(reference.spec, pg_url, "one", tmp_path / "one", "--concurrency",
                                              "1")[3:])
        assert done.exit_code == 0, done.output[-3000:]
    finally:
        reference.close()

    trace = tmp_path / "trace"
    trace.mkdir()
    server = ScriptedServer(hold_at=3)  # a worker is mid-item when its request is held
    try:
        proc = subprocess.Popen(_args(server.spec, pg_url, "many", tmp_path / "many", "--workers", "2"),
                                env={**env, "SWM_WORKER_TRACE": str(trace)}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            held = server.reached.wait(scaled(240))
            assert held, proc.stderr.read() if proc.poll() is not None else "no request held"
            holders = [int(p.stem) for p in trace.glob("*.pid")]
            assert holders
            # at the driver's priority, not Ray's default nice 19, which starves them beside any other load
            assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in holders} == {os.getpriority(os.PRIO_PROCESS, 0)}
            gone = [os.pidfd_open(pid) for pid in holders]
            for pid in holders:  # kill every worker that holds an item, the held request's among them
                os.kill(pid, signal.SIGKILL)
            for fd in gone:  # the event: each worker has died (its pidfd turns readable), not a pause
                assert select.select([fd], [], [], scaled(60))[0], "a killed worker is still alive"
                os.close(fd)
            server.release.set()
            _, err = proc.communicate(timeout=scaled(300))
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err[-3000:]
    finally:
        server.close()
    answers = _answers(pg_url, "many")
    assert len(answers) == 10 and len({(m, i) for m, i, _, _ in answers}) == 10, "every item once"
    assert answers == _answers(pg_url, "one"), "the same results as one process"
    assert (tmp_path / "many" / "tom_tomi.csv").is_file()


def test_sotopia_episodes_run_as_ray_tasks_and_a_rerun_skips_them(tmp_path: Path) -> None:
    from swm.testing import FakeOpenAIServer

    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    db = str(tmp_path / "s.db")
    with FakeOpenAIServer(latency=0.0) as server:
        spec = f"fake@{server.base_url}"
        cmd = [sys.executable, "-m", "swm", "bench", "sotopia", "--data", "shipped",
               "--n", "2", "--seats", "both", "--policies", "plain", "--max-turns", "2", "--model", spec,
               "--judge-model", spec, "--db", db, "--thread-id", "sw", "--out", str(tmp_path / "out"),
               "--no-progress", "--json", "--workers", "2"]
        first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=scaled(300))
        assert first.returncode == 0, first.stderr[-3000:]
        calls = server.requests
        with pytest.MonkeyPatch.context() as patch:  # the rerun here: no interpreter to start and import swm into
            started = _refuse_cluster(patch)
            again = CliRunner().invoke(main, cmd[3:])
        assert again.exit_code == 0, again.output[-3000:]
        assert server.requests == calls, "a finished run makes no call"
        assert not started, "nor starts a Ray cluster (seconds of its processes starting for nothing)"
    rows = list(open_store(db).rows("select episode_id, status from episodes where bench_run = ?", ["sw"]))
    assert len(rows) == 4 and {r["status"] for r in rows} == {"done"}
    assert len({r["episode_id"] for r in rows}) == 4


def test_games_on_ray_workers_give_the_table_of_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def bench(name: str, *extra: str, here: bool = False) -> dict[str, object]:
        """Run the bench in a process of its own, or ``here`` (no interpreter to start and import swm into)."""
        cmd = [sys.executable, "-m", "swm", "bench", "games", "--n", "4",
               "--policies", "random", "--players", "6", "--db", str(tmp_path / f"{name}.db"), "--thread-id", name,
               "--out", str(tmp_path / name), "--no-progress", "--json", *extra]
        if here:
            result = CliRunner().invoke(main, cmd[3:])
            assert result.exit_code == 0, result.output[-3000:]
        else:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=scaled(300))
            assert done.returncode == 0, done.stderr[-3000:]
        return json.loads((tmp_path / name / "games.json").read_text())["table"]

    table = bench("one", here=True)  # the reference, one process
    assert bench("many", "--workers", "2") == table  # seeded random seats: same games, same table
    started = _refuse_cluster(monkeypatch)
    assert bench("many", "--workers", "2", here=True) == table  # the rerun skips every game...
    assert not started, "...and starts no Ray cluster"


def test_learn_plays_its_episodes_on_ray_workers_with_the_calls_of_one_process(tmp_path: Path) -> None:
    from bench.interrupts import episode_ids, finished, learn_command, start
    from swm.testing import FakeOpenAIServer

    with FakeOpenAIServer(latency=0.0) as server:
        # the reference, one process: this one (no interpreter to start and import swm into: ~4 s of CPU)
        result = CliRunner().invoke(main, learn_command(server.model_spec, tmp_path / "ref.db", "ref",
                                                        tmp_path / "ref")[3:])
        assert result.exit_code == 0, result.output[-3000:]
        reference_calls = before = server.requests  # a fresh server: every request so far is the reference's
        with pytest.MonkeyPatch.context() as patch:  # a finished thread rerun on workers: no call, no cluster
            started = _refuse_cluster(patch)
            again = CliRunner().invoke(main, [*learn_command(server.model_spec, tmp_path / "ref.db", "ref",
                                                             tmp_path / "ref")[3:], "--workers", "2"])
        assert again.exit_code == 0 and "already finished" in again.stderr, again.output[-3000:]
        assert not started and server.requests == reference_calls
        rc, out, err = finished(start([*learn_command(server.model_spec, tmp_path / "w.db", "w", tmp_path / "w"),
                                       "--workers", "2"]))
        assert rc == 0, err[-3000:]
        calls = server.requests - before
    ids = episode_ids(tmp_path / "w.db", "w")
    assert len(ids) == len(set(ids)) == len(episode_ids(tmp_path / "ref.db", "ref")) >= 10
    assert calls == reference_calls
    assert {i.removeprefix("w/") for i in ids} == {i.removeprefix("ref/")
                                                     for i in episode_ids(tmp_path / "ref.db", "ref")}


def test_sigterm_to_learn_on_ray_workers_drains_and_a_rerun_finishes(tmp_path: Path) -> None:
    """SIGTERM to the driver of a run on Ray workers drains it: one line, finished episodes kept, no abort.

    ray.init puts its own SIGTERM handler (sys.exit) in place of swm's drain, and the run died mid-step with Ray's
    threads in flight (SIGABRT and a C++ stack dump): the handler is put back. The rerun resumes in one process
    (no second cluster to start: a drained thread resumes wherever it is run).
    """

    from bench.interrupts import episode_ids, finished, learn_command, start, wait_for_episode
    from swm.testing import FakeOpenAIServer

    db = tmp_path / "t.db"
    with FakeOpenAIServer(latency=0.2) as server:
        command = learn_command(server.model_spec, db, "t", tmp_path / "t")
        proc = start([*command, "--workers", "2"])
        try:
            stored = wait_for_episode(db, "t", proc, timeout=300)  # the event: a first episode stored by a worker
            proc.send_signal(signal.SIGTERM)
            rc, _, err = finished(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert rc == 143, err[-3000:]  # not -6 (SIGABRT) nor 1 (Ray's sys.exit)
        assert "SIGTERM: stopping at the next step" in err and "Traceback" not in err, err[-3000:]
        assert "stopped on SIGTERM: finished steps are checkpointed; rerun with the same --db" in err, err[-3000:]
        assert stored <= set(episode_ids(db, "t")), "finished episodes are kept"
        rerun = CliRunner().invoke(main, command[3:])  # one process: this one (no interpreter to start)
        assert rerun.exit_code == 0, rerun.output[-3000:]
        assert "resuming thread" in rerun.stderr and "already finished" not in rerun.stderr, rerun.output[-3000:]
    ids = episode_ids(db, "t")
    assert len(ids) == len(set(ids)) >= 10 and stored <= set(ids)


def test_a_local_cluster_slow_to_start_is_one_line_not_a_traceback(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray gives its node 30 s to start and then raises a bare Exception: on a loaded machine that is one line."""
    import ray

    def slow(*args: object, **kwargs: object) -> None:
        raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")

    monkeypatch.setattr(ray, "init", slow)
    server = ScriptedServer()
    try:
        result = CliRunner().invoke(main, _args(server.spec, str(tmp_path / "r.db"), "r", tmp_path / "out",
                                                "--workers", "2")[3:])
    finally:
        server.close()
    assert result.exit_code == 3, result.output
    assert result.output.strip().splitlines()[-1].startswith(
        "error: Ray could not start a local cluster of 2 CPUs (Exception: The current node timed out during startup")
    assert "Traceback" not in result.output


def test_sigterm_to_a_sotopia_bench_on_ray_workers_starts_no_new_episode(tmp_path: Path) -> None:
    """SIGTERM to `swm bench sotopia --workers 2` drains it as without workers: the episodes in flight finish on
    their workers, none is handed out after the signal, exit 143 with the one line; the rerun plays the rest.

    The drain is the driver's: a worker's graph does not see it, and every episode used to be handed out anyway
    (4 of 4 played, exit 0).
    """
    from bench.interrupts import finished, start, wait_for_requests
    from swm.testing import FakeOpenAIServer

    db = str(tmp_path / "s.db")
    with FakeOpenAIServer(latency=0.2) as server:
        cmd = [sys.executable, "-m", "swm", "bench", "sotopia", "--data", "shipped", "--n", "2", "--seats", "first",
               "--policies", "plain,foresee", "--max-turns", "4", "--model", server.model_spec, "--judge-model",
               server.model_spec, "--db", db, "--thread-id", "sw", "--out", str(tmp_path / "out"), "--no-progress",
               "--workers", "2"]
        proc = start(cmd)
        try:
            wait_for_requests(server, 1, proc, timeout=300)  # the event: a worker's first model call
            proc.send_signal(signal.SIGTERM)
            rc, _, err = finished(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert rc == 143, err[-3000:]
        assert "SIGTERM: stopping at the next step" in err and "Traceback" not in err, err[-3000:]
        done = list(open_store(db).rows("select episode_id from episodes where bench_run = ? and status = 'done'",
                                        ["sw"]))
        assert len(done) <= 2, f"{len(done)} episodes played: only the 2 in flight may finish"
        rerun = CliRunner().invoke(main, cmd[3:-2])  # one process: the rest, without a cluster to start
        assert rerun.exit_code == 0, rerun.output[-3000:]
    rows = list(open_store(db).rows("select episode_id, status from episodes where bench_run = ?", ["sw"]))
    assert len(rows) == 4 and {r["status"] for r in rows} == {"done"}
