"""`bench.transcripts` counts what the seats said, read the checker's way, on a hand-made evaluation."""

from __future__ import annotations

import json
from pathlib import Path

from bench.transcripts import read, report
from swm.tasks.splits import split_tasks


def _eval(tmp_path: Path) -> Path:
    a, b = split_tasks("test", ["multi-turn-4"], ["mutual_friend"], 2)
    rows = []
    for task, right in ((a, True), (b, False)):
        (sa, sb), (la, lb), friend = task.truth["seats"], task.truth["lists"], task.truth["friend"]
        mine = next(n for n in lb if n != friend)
        theirs = next(n for n in la if n != friend)
        transcript = [[sa, "My friends:\n1. " + "\n2. ".join(la[:2])],
                      [sb, f"My friends:\n1. {mine.replace(' ', '-')}\n2. {theirs}"],  # a spelling still counts
                      [sa, f"ANSWER: {friend}" if right else "ANSWER: First Last"],
                      [sb, f"ANSWER: {friend}" if right else f"ANSWER: {sa}"]]
        rows.append({"task": task.task_id, "passed": right, "listed": 1.0, "transcript": transcript})
    path = tmp_path / "two-seat.json"
    path.write_text(json.dumps({"eval": {"warm": rows, "selfplay": rows[:1] + [{**rows[1], "passed": True}]}}))
    return path


def test_answers_and_lists_are_counted_as_the_checker_reads_them(tmp_path: Path) -> None:
    path = _eval(tmp_path)
    counts = read(json.loads(path.read_text())["eval"]["warm"])
    assert counts["tasks"] == 2 and counts["passed"] == 1 and counts["answers"] == 4
    assert counts["answers right"] == 2 and counts["answers copying the placeholder"] == 1
    assert counts["answers naming a seat"] == 1 and counts["lists"] == 4
    # the responder listed one of its own (hyphenated) and one of the opener's: one name not its own, per task
    assert counts["listed names not on the seat's own list (responder)"] == 2
    assert counts["listed names not on the seat's own list (opener)"] == 0
    page = report([f"{path}:warm", f"{path}:selfplay"])
    assert "1 lost" not in page and "0 lost, 1 gained, exact McNemar p = 1" in page


def test_empty_answers_and_the_answers_the_attempt_credit_pays_are_counted(tmp_path: Path) -> None:
    counts = read(json.loads(_eval(tmp_path).read_text())["eval"]["warm"])
    assert counts["answers the attempt credit pays"] == 2, "the right ones; a placeholder or a seat is no attempt"
    assert counts["answers with nothing after ANSWER:"] == 0
    (task,) = split_tasks("test", ["multi-turn-4"], ["mutual_friend"], 1)
    (sa, sb), wrong = task.truth["seats"], next(n for n in task.truth["lists"][1] if n != task.truth["friend"])
    row = {"task": task.task_id, "passed": False, "listed": 0.0,
           "transcript": [[sa, "ANSWER:"], [sb, f"ANSWER: {wrong}"]]}
    counts = read([row])
    assert counts["answers with nothing after ANSWER:"] == 1 and counts["answers the attempt credit pays"] == 1


def test_training_rollouts_are_counted_iteration_by_iteration(tmp_path: Path) -> None:
    """`--training` reads the store's training rollouts: joint successes and each seat's first answer, as scored."""
    from bench.transcripts import training
    from swm.checkpoints import ExperienceStore
    from swm.selfplay.rewards import RewardConfig, score
    from swm.selfplay.store import put_rollout
    from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

    (task,) = split_tasks("test", ["multi-turn-4"], ["mutual_friend"], 1)
    (sa, sb), friend = task.truth["seats"], task.truth["friend"]
    wrong = next(n for n in task.truth["lists"][1] if n != friend)
    store = ExperienceStore(tmp_path / "bench.sqlite")
    for iteration, said in enumerate(((f"ANSWER: {friend}", f"ANSWER: {friend}"), ("ANSWER:", f"ANSWER: {wrong}"))):
        seats = [SeatTrajectory(seat=seat, role=seat, turns=[SeatTurn(turn=i, prompt="", text=text, prompt_ids=[],
                                                                     token_ids=[1], logprobs=[0.0])])
                 for i, (seat, text) in enumerate(zip((sa, sb), said, strict=True))]
        rollout = Rollout(rollout_id=f"r{iteration}", task_id=task.task_id, iteration=iteration, sample=0, seats=seats)
        put_rollout(store, "two-seat-selfplay", "train", score(rollout, task, RewardConfig())[0])
    table = training(tmp_path / "bench.sqlite")
    assert "| two-seat-selfplay | 0 | 1 | 1 | 2 | 2 | 0 | 2 |" in table, table
    assert "| two-seat-selfplay | 1 | 1 | 0 | 1 | 0 | 1 | 1 |" in table, table
