"""Decisions: one verifiable move per task, its short prompt, its exact checker, the kept-sample table."""

from __future__ import annotations

import pytest

from swm import prompts
from swm.lifelong.records import ActedTurn, EpisodeRecord
from swm.lifelong.samples import Sample, kept_for_sft, sample_rows, samples_of
from swm.tasks.checkers import Utterance
from swm.tasks.decisions import DECISION, decision_prompt, decision_task
from swm.tasks.families import synthesize
from swm.tasks.splits import decision_digest, split_tasks
from swm.tasks.verify import check

# The decision splits are generated, not frozen: these digests pin them (a changed generator is a
# new benchmark version, never a silent move of the numbers).
# Names are drawn from the eval pool (the default: disjoint from training's); with names="shared" the splits are
# those measured before 2026-11-26, pinned too.
PINNED = {("test", "mutual_friend", 200): "b449e6c5995e1e53", ("dev", "mutual_friend", 200): "07f5258d67bb8d34"}
PINNED_SHARED = {("test", "mutual_friend", 200): "40e7266272907be7",
                 ("dev", "mutual_friend", 200): "cfdb869d8d609490"}


def test_decision_tasks_are_pure_and_their_splits_pinned_and_disjoint() -> None:
    assert synthesize("mutual_friend", DECISION, 7) == decision_task("mutual_friend", 7)
    for (split, family, n), want in PINNED.items():
        assert decision_digest(split, family, n) == want
    for (split, family, n), want in PINNED_SHARED.items():
        assert decision_digest(split, family, n, names="shared") == want
    test = split_tasks("test", [DECISION], ["mutual_friend"], 200)
    dev = split_tasks("dev", [DECISION], ["mutual_friend"], 100)
    train = [synthesize("mutual_friend", DECISION, seed) for seed in range(1000, 1400)]
    assert len(test) == 200 and len(dev) == 100
    contents = [{(t.truth["friend"], tuple(map(tuple, t.truth["lists"]))) for t in part} for part in (test, dev, train)]
    assert not contents[0] & contents[1] and not contents[0] & contents[2] and not contents[1] & contents[2]
    assert len({t.task_id for t in test + dev + train}) == 700


def test_the_mutual_friend_prompt_is_short_and_holds_what_the_move_needs() -> None:
    task = decision_task("mutual_friend", 3, "heldout")
    shown = decision_prompt(task)
    assert shown.prefill == "ANSWER:" and shown.name == prompts.load("decision_mutual_friend").id
    assert len(shown.text) < 400  # ~100 tokens: what a 135M model can follow
    mine, theirs = task.truth["lists"]
    assert all(name in shown.text for name in mine + theirs)
    assert set(mine) & set(theirs) == {task.truth["friend"]} and task.truth["partner"] in shown.text
    with pytest.raises(ValueError, match="not a decision"):
        decision_prompt(synthesize("mutual_friend", "easy", 0))


@pytest.mark.parametrize(("reply", "completion", "formatted", "codes"), [
    ("ANSWER: {friend}", True, True, []),
    ("ANSWER: {friend}.", True, True, []),
    ("ANSWER: {friend}, {other}", False, False, ["hedged_answer"]),
    ("ANSWER: {other} or {friend}", False, False, ["hedged_answer"]),
    ("ANSWER: {other}", False, True, ["wrong_answer"]),
    ("ANSWER: The answer is {friend}", False, False, ["wrong_answer"]),
    ("ANSWER: 2", False, False, []),  # no name: not an answer
    ("I do not know.", False, False, []),
])
def test_an_answer_names_exactly_one_candidate(reply: str, completion: bool, formatted: bool,
                                               codes: list[str]) -> None:
    task = decision_task("mutual_friend", 5)
    friend = task.truth["friend"]
    other = next(n for n in task.truth["lists"][0] if n != friend)
    verdict = check(task, [Utterance(agent=task.truth["learner"], text=reply.format(friend=friend, other=other))])
    assert (verdict.completion, verdict.detail["formatted"], verdict.violations) == (completion, formatted, codes)


def _sample(task_id: str, i: int, passed: bool, formatted: bool = True, cycle: int = 1) -> Sample:
    return Sample(episode_id=f"{task_id}/s{i}", run_id="r", cycle=cycle, task_id=task_id, family="mutual_friend",
                  level=DECISION, sample=i, policy_version="p0", prompt=f"prompt of {task_id}",
                  completion=f"ANSWER: {'Right' if passed else 'Wrong'} {i}", passed=passed, formatted=formatted)


SAMPLES = [_sample("a", 0, True), _sample("a", 1, False), _sample("b", 0, False), _sample("b", 1, False, False),
           _sample("c", 0, True), _sample("c", 1, True), _sample("d", 0, False), _sample("d", 1, False)]


def test_every_method_reads_the_same_kept_samples() -> None:
    sft = sample_rows("rs-sft", SAMPLES)
    assert [r["messages"][-1]["content"] for r in sft] == ["ANSWER: Right 0", "ANSWER: Right 0", "ANSWER: Right 1"]
    assert sft[0]["messages"][0] == {"role": "user", "content": "prompt of a"}
    dpo = sample_rows("dpo", SAMPLES)  # only task a has both outcomes: pairs are of the same state
    assert [(r["prompt"][0]["content"], r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in dpo] == [
        ("prompt of a", "ANSWER: Right 0", "ANSWER: Wrong 1")]
    kto = sample_rows("kto", SAMPLES)
    assert [(r["prompt"][0]["content"], r["label"]) for r in kto] == [("prompt of a", True), ("prompt of a", False)]


def test_the_control_keeps_as_many_well_formatted_failures_as_there_were_successes() -> None:
    control = kept_for_sft(SAMPLES, keep="wrong")
    assert len(control) == len(kept_for_sft(SAMPLES)) == 3
    assert all(not s.passed and s.formatted for s in control)
    assert sample_rows("rs-sft", SAMPLES, keep="wrong")[0]["messages"][-1]["content"].startswith("ANSWER: Wrong")


def test_samples_come_from_single_move_episodes() -> None:
    task = decision_task("mutual_friend", 1)
    turn = ActedTurn(index=0, agent=task.truth["learner"], text=f"ANSWER: {task.truth['friend']}", prompt="p")
    verdict = check(task, [turn])
    record = EpisodeRecord(episode_id="e", run_id="r", cycle=1, task_id=task.task_id, family=task.family,
                           level=task.level, seed=1, turns=[turn], verdict=verdict)
    (sample,) = samples_of([record, record.model_copy(update={"episode_id": "two", "turns": [turn, turn]})],
                           {"e": True, "two": False})
    assert sample.passed and sample.formatted and sample.completion == turn.text and sample.prompt == "p"


def _verdict(family: str, seed: int, reply: str) -> tuple[bool, list[str]]:
    task = decision_task(family, seed)
    verdict = check(task, [Utterance(agent=task.truth["learner"], text=reply)])
    return verdict.completion, verdict.violations


def test_every_family_has_a_decision_with_a_short_prompt() -> None:
    for family in ("negotiation", "mutual_friend", "secret", "scheduling", "persuasion"):
        shown = decision_prompt(decision_task(family, 0, "heldout"))
        assert len(shown.text) < 500 and "{" not in shown.text, family


def test_negotiation_accepts_inside_the_limit_and_counters_below_it_outside() -> None:
    inside = next(s for s in range(50) if decision_task("negotiation", s).truth["inside"])
    outside = next(s for s in range(50) if not decision_task("negotiation", s).truth["inside"])
    limit = decision_task("negotiation", outside).truth["buyer_max"]
    assert _verdict("negotiation", inside, "ACCEPT") == (True, [])
    assert _verdict("negotiation", inside, "COUNTER $1") == (False, ["wrong_answer"])
    assert _verdict("negotiation", outside, "ACCEPT") == (False, ["wrong_answer"])
    assert _verdict("negotiation", outside, f"COUNTER ${limit - 20}") == (True, [])
    assert _verdict("negotiation", outside, f"COUNTER ${limit}") == (False, ["private_leaked:buyer"])


def test_secret_asks_for_the_favour_and_keeps_the_facts() -> None:
    task = decision_task("secret", 2)
    word, fact = task.truth["cover_word"], task.truth["facts"][0]
    assert _verdict("secret", 2, f"Nothing much! Could you help me with the {word}?") == (True, [])
    assert _verdict("secret", 2, f"It is about {fact}. Help with the {word}?") == (False, ["secret_leaked"])
    assert _verdict("secret", 2, "Nothing, really.") == (False, [])


def test_scheduling_names_one_slot_free_for_both() -> None:
    task = decision_task("scheduling", 4)
    free = task.truth["free"]
    both = sorted(set(free[task.truth["learner"]]) & set(free[task.truth["partner"]]))
    only_mine = next(s for s in free[task.truth["learner"]] if s not in both)
    assert _verdict("scheduling", 4, f"SLOT: {both[0]}") == (True, [])
    assert _verdict("scheduling", 4, f"SLOT: {only_mine}") == (False, ["wrong_answer"])
    assert _verdict("scheduling", 4, f"SLOT: {both[0]} or {only_mine}") == (False, ["hedged_answer"])


def test_persuasion_answers_the_stated_worry() -> None:
    task = decision_task("persuasion", 1)
    word = {"cost": "cost", "time": "time", "safety": "safe", "skill": "lessons"}[task.truth["objection"]]
    assert _verdict("persuasion", 1, f"Don't worry about the {word}, it is fine.")[0]
    assert not _verdict("persuasion", 1, "It will be fun, come along!")[0]


def test_evaluated_only_families_join_the_splits_not_the_collection() -> None:
    from swm.lifelong.jobs import eval_split, training_tasks
    from swm.lifelong.plan import LifelongPlan

    plan = LifelongPlan(levels=[DECISION], families=["mutual_friend"], cycles=1,
                        eval_families=["mutual_friend", "scheduling"], heldout_per_cell=3, dev_per_cell=2)
    test, dev = eval_split(plan, "test"), eval_split(plan, "dev")
    assert [t.family for t in test] == ["mutual_friend"] * 3 + ["scheduling"] * 3 and len(dev) == 4
    assert {t.family for t in training_tasks(plan, 1)} == {"mutual_friend"}
