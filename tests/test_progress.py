"""Live progress: turns appear on stderr as they are played, steps of ask/parse as they start; --no-progress
silences them (the old --quiet / -q too, hidden); a repeated parse says why."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner
from test_episode_scripts import model

from swm.cli import main
from swm.commands.progress import describe, finished, printer
from swm.testing import FakeOpenAIServer

STORY = "Sally puts the ball in the basket. Sally leaves. Anne moves the ball to the box."


def test_play_prints_each_turn_while_the_episode_runs(tmp_path: Path) -> None:
    from swm.commands._common import make_context, run_graph
    from swm.graphs import episode
    from swm.scenarios import resolve

    llm = model()
    ctx = make_context(tmp_path / "p.db")
    ctx.llm = llm
    seen: list[tuple[str, int]] = []
    listen = printer(False, echo=lambda line: seen.append((line, llm.calls)))
    scenario = resolve("swm-bike-sale")
    inputs = {"scenario": scenario.model_dump(mode="json"), "episode_id": "ep", "tested_agent": scenario.names[0],
              "policies": {n: "plain" for n in scenario.names}, "max_turns": 3, "judge": False}
    run_graph(episode.build(), inputs, ctx, tmp_path / "p.db", "ep", "play", listen)
    turns = [(line, calls) for line, calls in seen if "] turn " in line]
    assert [line.split("] ")[1].split(":")[0] for line, _ in turns] == [
        f"turn 1/3 {scenario.names[0]}", f"turn 2/3 {scenario.names[1]}", f"turn 3/3 {scenario.names[0]}"]
    # each line was printed right after its own turn's call, not at the end of the episode
    assert [calls for _, calls in turns] == [1, 2, 3]
    assert "episode ends" in turns[-1][0] and "episode ends" not in turns[0][0]


def test_play_cli_progress_goes_to_stderr_and_no_progress_turns_it_off(tmp_path: Path) -> None:
    args = ["play", "--policy", "plain", "--max-turns", "2", "--no-judge", "--db", str(tmp_path / "p.db")]
    loud = CliRunner().invoke(main, args, obj={"llm": model()})
    assert loud.exit_code == 0, loud.output
    assert loud.stderr.count("] turn ") == 2 and "] turn " not in loud.stdout
    quiet = CliRunner().invoke(main, [*args, "--no-progress"], obj={"llm": model()})
    assert quiet.exit_code == 0 and "] turn " not in quiet.stderr
    assert quiet.stdout.count("Turn #") == loud.stdout.count("Turn #") == 2
    for old in ("--quiet", "-q"):  # the old name still works, and says which name to use
        kept = CliRunner().invoke(main, [*args, old], obj={"llm": model()})
        assert kept.exit_code == 0 and "] turn " not in kept.stderr and "is now --no-progress" in kept.stderr


def test_ask_shows_its_steps_over_http_and_no_progress_hides_them(tmp_path: Path) -> None:
    story = tmp_path / "s.txt"
    story.write_text(STORY)
    with FakeOpenAIServer() as server:
        args = ["ask", "--story", str(story), "--question", "Where will Sally look?", "--model",
                server.model_spec, "--db", str(tmp_path / "x.db")]
        loud = CliRunner().invoke(main, args)
        quiet = CliRunner().invoke(main, [*args, "--no-progress", "--question", "Where is the ball?"])
    assert loud.exit_code == 0, loud.output
    lines = [line for line in loud.stderr.splitlines() if line.startswith("[")]
    steps = [line.split("] ")[1] for line in lines]
    assert steps[0] == "parsing the story into S3AP …" and steps[2] == "answering the question …" and len(steps) == 3
    assert re.fullmatch(r"parse attempt 1 \(temperature 0\): tokens \d+\+\d+, \d+\.\d s; passed the check", steps[1])
    assert quiet.exit_code == 0, quiet.output
    assert not [line for line in quiet.stderr.splitlines() if line.startswith("[")]


def test_self_play_iteration_summaries_are_described() -> None:
    summary = {"estimator": "group", "sampler": "torch", "reward": {"seller": {"mean": 0.5, "ci95": 0.1, "n": 4}},
               "eval_reward": None, "kl": 0.01234, "filtered_rate": 0.0, "failed": 0, "tokens_per_s": 12.0,
               "seconds": 3}
    lines = finished("evaluate", {"summaries": {"0": summary}, "iteration": 1})
    assert len(lines) == 1 and lines[0].startswith("iteration 0 [group, torch]: reward seller 0.50±0.10 (n=4)")
    assert finished("rollout", {"rolled": 1}) == ["rollout played"]
    assert describe({"event": "fan_out", "node": "rollout", "iteration": 1, "rollouts": 4}) == \
        "iteration 1: playing rollouts (4) …"
    assert describe({"event": "unknown"}) is None


def test_every_command_names_its_progress_switch_the_same_and_hides_the_old_name() -> None:
    from test_docs import commands

    switches = {}
    for path, command in commands(main):
        names = {opt for p in command.params for opt in getattr(p, "opts", [])}
        if names & {"--quiet", "-q", "--no-progress"}:
            switches[path] = names & {"--quiet", "-q", "--no-progress"}
            shown = CliRunner().invoke(main, [*path.split()[1:], "--help"]).output
            assert "--quiet" not in shown and "-q," not in shown, path
    assert set(switches) >= {"swm parse", "swm ask", "swm play", "swm selfplay", "swm learn", "swm bench tom",
                             "swm bench sotopia", "swm bench games"}
    assert all(names == {"--no-progress"} for names in switches.values()), switches


def test_a_repeated_parse_says_why_it_was_repeated() -> None:
    seen: list[str] = []
    listen = printer(False, echo=seen.append)
    assert listen is not None
    listen("node", "parse")
    listen("done", ("check", {"parse_done": False, "feedback": "Previous attempt:\n{}\nIssues:\n- agent 'Bob' does "
                                                                "not appear in the narrative\n- step 2: no state"}))
    listen("node", "parse")
    assert seen[1].endswith("parsing the story into S3AP (attempt 2, after: agent 'Bob' does not appear in the "
                            "narrative) …"), seen


def test_a_fan_outs_tasks_say_their_step_once() -> None:
    """Self-play's rollouts start as one task each: "playing rollouts" once an iteration, not once a rollout."""
    seen: list[str] = []
    listen = printer(False, echo=seen.append)
    assert listen is not None
    for node in ("rollout", "rollout", "rollout", "score", "advantages", "update", "evaluate", "rollout", "rollout"):
        listen("node", node)
    steps = [line.split("] ", 1)[1] for line in seen]
    assert steps == ["playing rollouts …", "scoring turns …", "computing advantages …", "PPO update …",
                     "playing the held-out tasks …", "playing rollouts …"]
