"""The two-seat scheduling task: one shared slot, splits pinned by digest, the checker, a scripted self-play rollout."""

from __future__ import annotations

import pytest
from test_two_seat import Scripted

from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.rewards import RewardConfig, score
from swm.selfplay.rollout import play
from swm.tasks.checkers import Utterance
from swm.tasks.families import DAYS, HOURS, TWO_SEAT, TWO_SEAT_FAMILIES, Task, synthesize
from swm.tasks.splits import decision_digest, split_tasks
from swm.tasks.two_seat import SLOT_PREFILL, SLOTS_PREFILL, seat_prompt
from swm.tasks.verify import check

# the splits' first tasks, pinned: a change to the generator that moves them fails here (a new benchmark version)
# names from the eval pool since 2026-11-28 (the shared pool's digests: test 5ee951f73eaf4185, dev 703593def4c5add4)
DIGESTS = {("test", 200): "88f0b5f37b9077ef", ("dev", 100): "40f23208be4ea854"}
TEST_TASKS = 200
WEEK = [f"{d} {h:02d}:00" for d in DAYS for h in HOURS]


def says(*lines: tuple[str, str]) -> list[Utterance]:
    return [Utterance(agent=a, text=t) for a, t in lines]


def test_a_scheduling_task_has_four_slots_a_seat_and_exactly_one_shared() -> None:
    assert "scheduling" in TWO_SEAT_FAMILIES
    for seed in range(50):
        t = synthesize("scheduling", TWO_SEAT, seed, split="heldout")
        a, b = t.truth["lists"]
        assert set(a) & set(b) == {t.truth["slot"]} and len(a) == len(b) == 4
        assert a == sorted(a, key=WEEK.index) and b == sorted(b, key=WEEK.index), "in week order"
        assert (t.truth["speaker"], t.truth["finder"]) == tuple(t.names)
        assert t.truth["free"] == dict(zip(t.names, (a, b), strict=True))
    t = synthesize("scheduling", TWO_SEAT, 3, split="heldout")
    assert t == synthesize("scheduling", TWO_SEAT, 3, split="heldout")
    assert t.task_id == "heldout:scheduling:two-seat:3" and [x.role for x in t.agents] == ["speaker", "finder"]
    assert all(s in t.agents[0].private for s in t.truth["lists"][0])
    assert not any(s in t.agents[0].private for s in t.truth["lists"][1] if s != t.truth["slot"])


@pytest.mark.parametrize(("split", "n"), sorted(DIGESTS))
def test_the_splits_are_pinned_by_digest(split: str, n: int) -> None:
    assert decision_digest(split, "scheduling", n, level=TWO_SEAT) == DIGESTS[(split, n)]


def test_the_splits_are_disjoint_and_the_test_split_is_large_enough() -> None:
    test = split_tasks("test", [TWO_SEAT], ["scheduling"], TEST_TASKS)
    dev = split_tasks("dev", [TWO_SEAT], ["scheduling"], 100)
    train = [synthesize("scheduling", TWO_SEAT, s) for s in range(300)]
    assert len({t.task_id for t in test}) == TEST_TASKS
    content = [{(t.names[0], t.names[1], tuple(map(tuple, t.truth["lists"]))) for t in split}
               for split in (test, dev, train)]
    assert not content[0] & content[1] and not content[0] & content[2] and not content[1] & content[2]
    plan = SelfPlayPlan(family="scheduling", level=TWO_SEAT, eval_tasks=TEST_TASKS)
    assert [t.task_id for t in plan.evaluation_tasks()] == [t.task_id for t in test]


def task() -> Task:
    return synthesize("scheduling", TWO_SEAT, 1)


def test_only_the_finders_first_answer_counts() -> None:
    t = task()
    a, b = t.names
    slot = t.truth["slot"]
    other = next(s for s in t.truth["lists"][1] if s != slot)
    mine = "\n".join(t.truth["lists"][0])
    ok = check(t, says((a, f"My free slots:\n{mine}"), (b, f"SLOT: {slot}")))
    assert ok.passed and ok.resolved_at == 1 and ok.detail["speaker_listed"] == 1.0 and ok.detail["slot_said"]
    assert ok.detail["answered"] and ok.detail["formatted"] and ok.detail["slots"] == [slot]
    # the speaker cannot know the slot: its answer is not the task's, right or wrong
    by_speaker = check(t, says((a, f"SLOT: {slot}"), (b, "SLOT:")))
    assert not by_speaker.completion and not by_speaker.detail["answered"]
    assert check(t, says((a, f"SLOT: {other}"), (b, f"SLOT: {slot}"))).passed
    wrong = check(t, says((a, "Hi"), (b, f"SLOT: {other}"), (a, "No."), (b, f"SLOT: {slot}")))
    assert not wrong.completion and wrong.violations == ["wrong_answer"] and wrong.detail["formatted"]
    # the answer is read to the end of its line: a slot on the next line is not part of it
    assert not check(t, says((a, "Hi"), (b, f"SLOT: I do not know\n{slot}"))).completion


def test_two_slots_named_is_a_hedge_even_with_the_right_one() -> None:
    t = task()
    a, b = t.names
    slot = t.truth["slot"]
    other = next(s for s in t.truth["lists"][1] if s != slot)
    hedge = check(t, says((a, "Hi"), (b, f"SLOT: {slot} or {other}")))
    assert not hedge.completion and hedge.violations == ["hedged_answer"] and not hedge.detail["formatted"]
    # the same slot written twice is one slot
    assert check(t, says((a, "Hi"), (b, f"SLOT: {slot} ({slot})"))).passed


def noon_task() -> Task:
    """The task with its shared slot moved to Wed 12:00 (no generated slot is at noon)."""
    t = task()
    old = t.truth["slot"]
    lists = [sorted([s if s != old else "Wed 12:00" for s in slots]) for slots in t.truth["lists"]]
    return t.model_copy(update={"truth": {**t.truth, "slot": "Wed 12:00", "lists": lists,
                                          "free": dict(zip(t.names, lists, strict=True))}})


def test_12pm_is_noon_and_times_are_read_however_written() -> None:
    t = noon_task()
    a, b = t.names
    for said in ("SLOT: Wed 12pm", "SLOT: Wednesday 12:00", "SLOT: wed 12 PM"):
        assert check(t, says((a, "Hi"), (b, said))).passed, said
    for said in ("SLOT: Wed 12am", "SLOT: Wed 24:00", "SLOT: Thu 12pm"):
        assert not check(t, says((a, "Hi"), (b, said))).completion, said
    plain = task()
    a, b = plain.names
    day, hour = plain.truth["slot"].split()
    h = int(hour[:2])
    written = f"{day} {h - 12 if h > 12 else h}{'pm' if h >= 12 else 'am'}"
    assert check(plain, says((a, "Hi"), (b, f"SLOT: {written}"))).passed, written
    # the speaker's share counts its slots however written
    own = plain.truth["lists"][0]
    d0, h0 = own[0].split()
    twelve = int(h0[:2])
    spoken = f"I'm free {d0} {twelve - 12 if twelve > 12 else twelve}{'pm' if twelve >= 12 else 'am'} and {own[1]}"
    assert check(plain, says((a, spoken), (b, "SLOT: nothing"))).detail["speaker_listed"] == 0.5


def test_one_policy_plays_both_seats_and_both_get_the_joint_reward() -> None:
    t = synthesize("scheduling", TWO_SEAT, 2)
    a, b = t.names
    listed = "\n" + "\n".join(t.truth["lists"][0])
    sampler = Scripted([listed, f" {t.truth['slot']}", "never said"])
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=4)
    assert rollout.end_reason == "settled" and rollout.order == [a, b]
    (p0, pre0, stop0, _), (p1, pre1, stop1, cap1) = sampler.calls
    assert (pre0, stop0, pre1, stop1, cap1) == (SLOTS_PREFILL, None, SLOT_PREFILL, "\n", 12)
    assert all(s in p0 for s in t.truth["lists"][0])
    assert not any(s in p0 for s in t.truth["lists"][1] if s != t.truth["slot"])
    assert all(s in p1 for s in t.truth["lists"][1]) and t.truth["lists"][0][0] in p1
    assert p1 == seat_prompt(t, b, [(a, SLOTS_PREFILL + listed)]).text
    assert seat_prompt(t, a, []).name == "two_seat_scheduling_speak@v1"
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.passed
    assert [s.role for s in scored.seats] == ["speaker", "finder"]
    assert [s.turns[-1].reward for s in scored.seats] == [1.0, 1.0]


def test_a_wrong_answer_ends_the_exchange_and_scores_zero_not_a_penalty() -> None:
    t = synthesize("scheduling", TWO_SEAT, 4)
    other = next(s for s in t.truth["lists"][1] if s != t.truth["slot"])
    rollout = play(t, Scripted(["\n" + t.truth["lists"][0][0], f" {other}"]), rollout_id="r", iteration=0, sample=0,
                   max_turns=4)
    assert rollout.end_reason == "answered"
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.violations == ["wrong_answer"] and [s.turns[-1].reward for s in scored.seats] == [0.0, 0.0]
