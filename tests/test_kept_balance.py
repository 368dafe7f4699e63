"""What rs-sft clones of a cycle's samples: balanced so no answer or first name dominates; all of them ungated."""

from __future__ import annotations

from collections import Counter

import pytest

from swm.lifelong.samples import Sample, answer_keys, balance, kept_for_sft, sample_rows
from swm.tasks.families import DECISION, TWO_TURN


def move(task: str, answer: str, passed: bool = True, family: str = "mutual_friend", level: str = DECISION,
         cycle: int = 1, formatted: bool = True, turn: int | None = None) -> Sample:
    episode = f"r/c{cycle}/collect/p0/{task}/s0/all" + (f"#{turn}" if turn is not None else "")
    return Sample(episode_id=episode, run_id="r", cycle=cycle, task_id=task, family=family, level=level, sample=0,
                  policy_version="p0", prompt=f"prompt {task} {turn}", completion=answer, passed=passed,
                  formatted=formatted)


# the shortcut of the replication: a favourite first name on 6 of 10 kept answers
NIA = [move(t, "ANSWER: Nia Patel") for t in "abc"] + [move(t, "ANSWER: Nia Chen") for t in "def"] + [
    move("g", "ANSWER: Ben Ford"), move("h", "ANSWER: Cara Diaz"), move("i", "ANSWER: Eli Ito"),
    move("j", "ANSWER: Gus Khan.")]


def firsts(samples: list[Sample]) -> Counter[str]:
    return Counter(s.completion.split()[1] for s in samples)


def test_the_answer_and_its_first_name_are_the_keys() -> None:
    assert answer_keys(move("a", "ANSWER: Nia Patel.")) == ["answer:nia patel", "first name:nia"]
    assert answer_keys(move("a", "SLOT: Mon 14:00", family="scheduling")) == ["answer:mon 14:00"]
    assert answer_keys(move("a", "ACCEPT", family="negotiation")) == []  # two right moves by design


def test_no_first_name_holds_more_than_its_share_of_what_is_kept() -> None:
    # share 0.15 of 10: one each; the first Nia stays, the other five go
    small = balance(NIA, 0.15)
    assert [s.task_id for s in small] == ["a", "g", "h", "i", "j"]
    # share 0.5: the passes stop at 8 kept, Nia on 4 of them (no more than half)
    half = balance(NIA, 0.5)
    assert len(half) == 8 and firsts(half)["Nia"] == 4 and Counter(s.completion for s in half)["ANSWER: Nia Patel"] == 3
    assert balance(NIA, 1.0) == NIA


def test_each_cycle_and_family_is_balanced_on_its_own() -> None:
    other_cycle = [move(f"{t}2", "ANSWER: Nia Patel", cycle=2) for t in "xy"]
    accepts = [move(f"n{i}", "ACCEPT", family="negotiation") for i in range(5)]
    kept = balance(NIA + other_cycle + accepts, 0.15)
    assert [s.task_id for s in kept if s.cycle == 2] == ["x2"]  # its own cap: 2 kept -> 1 each
    assert len([s for s in kept if s.family == "negotiation"]) == 5


def test_a_two_turn_task_is_kept_or_dropped_whole_on_its_decision() -> None:
    rows = [move("a", "Who are your friends?", level=TWO_TURN, turn=0), move("a", "ANSWER: Nia Patel", level=TWO_TURN,
                                                                             turn=2),
            move("b", "Who are your friends?", level=TWO_TURN, turn=0), move("b", "ANSWER: Nia Chen", level=TWO_TURN,
                                                                             turn=2),
            move("c", "Who are your friends?", level=TWO_TURN, turn=0), move("c", "ANSWER: Ben Ford", level=TWO_TURN,
                                                                             turn=2)]
    kept = balance(rows, 0.15)
    assert [(s.task_id, s.episode_id[-2:]) for s in kept] == [("a", "#0"), ("a", "#2"), ("c", "#0"), ("c", "#2")]


def test_rs_sft_clones_the_balanced_passing_samples_and_the_control_as_many_wrong_ones() -> None:
    wrong = [move(f"w{i}", f"ANSWER: Nia Rossi {i}", passed=False) for i in range(8)] + [
        move("x", "ANSWER: 1", passed=False, formatted=False)]
    samples = NIA + wrong
    assert len(kept_for_sft(samples)) == 10 and len(kept_for_sft(samples, share=0.15)) == 5
    control = kept_for_sft(samples, "wrong", share=0.15)
    assert len(control) == 1 and not control[0].passed  # as many as the balanced passing ones, themselves balanced
    rows = sample_rows("rs-sft", samples, share=0.15)
    assert [r["messages"][-1]["content"] for r in rows] == [s.completion for s in kept_for_sft(samples, share=0.15)]


def test_gating_off_clones_every_sample_whatever_the_checker_said() -> None:
    samples = [move("a", "ANSWER: Ben Ford"), move("b", "ANSWER: Cara Diaz", passed=False),
               move("c", "I do not know", passed=False, formatted=False)]
    assert kept_for_sft(samples, gated=False) == samples
    assert kept_for_sft(samples) == samples[:1]
    assert [r["messages"][-1]["content"] for r in sample_rows("rs-sft", samples, gated=False)] == [
        "ANSWER: Ben Ford", "ANSWER: Cara Diaz", "I do not know"]
    with pytest.raises(ValueError, match="different arms"):
        kept_for_sft(samples, "wrong", gated=False)
    # dpo and kto learn from the verdict itself: gating leaves their rows as they were
    assert sample_rows("dpo", samples, gated=False) == sample_rows("dpo", samples)
