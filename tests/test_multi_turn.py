"""The multi-turn mutual-friend task: generation, splits pinned by digest, each checker rule, a scripted rollout."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest
from test_two_seat import Scripted

from swm.prompts import load
from swm.selfplay.plan import SelfPlayPlan
from swm.selfplay.rewards import RewardConfig, score
from swm.selfplay.rollout import play
from swm.tasks.checkers import Utterance
from swm.tasks.decisions import Stop, stops
from swm.tasks.families import MULTI_TURN, Task, Variant, synthesize, task_of_id
from swm.tasks.levels import seat_prompt
from swm.tasks.multi_turn import (
    BUDGET,
    CAP,
    LIST_PREFILL,
    LIST_RANGE,
    MESSAGE_TOKENS,
    closes,
    follow_up,
    message,
    people_named,
)
from swm.tasks.splits import decision_digest, split_tasks
from swm.tasks.verify import check
from swm.training.trajectory import Generation
from swm.training.transcript import SeatChat

# the splits' first tasks, pinned: a change to the generator that moves them fails here (a new benchmark version)
DIGESTS = {("test", 200): "8f0c5c6a557ee0ec", ("dev", 100): "ffd419e1866ed10a"}
TEST_TASKS = 200


def says(*lines: tuple[str, str]) -> list[Utterance]:
    return [Utterance(agent=a, text=t) for a, t in lines]


def task(seed: int = 1) -> Task:
    return synthesize("mutual_friend", MULTI_TURN, seed, variant=Variant(names="train"))


def free(t: Task) -> Task:
    """The task with its messages in the free form (any one line) instead of the listed one."""
    return t.model_copy(update={"truth": {**t.truth, "form": "free"}})


def others(t: Task, seat: int) -> list[str]:
    return [n for n in t.truth["lists"][seat] if n != t.truth["friend"]]


def test_a_task_has_two_seats_long_lists_one_shared_friend_a_cap_and_a_budget() -> None:
    t = synthesize("mutual_friend", MULTI_TURN, 3, split="heldout", variant=Variant(names="eval"))
    assert t == task_of_id(t.task_id) and t.task_id == "heldout:mutual_friend:multi-turn:3:names=eval"
    a, b = t.truth["lists"]
    assert set(a) & set(b) == {t.truth["friend"]}
    assert all(LIST_RANGE[0] <= len(x) <= LIST_RANGE[1] for x in (a, b))
    assert [x.role for x in t.agents] == ["opener", "responder"] and t.truth["seats"] == t.names
    assert (t.truth["cap"], t.truth["budget"]) == (CAP, BUDGET) == (3, 8)
    lengths = {len(x) for s in range(40) for x in task(s).truth["lists"]}
    assert lengths == set(range(LIST_RANGE[0], LIST_RANGE[1] + 1))
    with pytest.raises(ValueError, match="no multi-turn shape"):
        synthesize("negotiation", MULTI_TURN, 0)


@pytest.mark.parametrize(("split", "n"), sorted(DIGESTS))
def test_the_splits_are_pinned_by_digest(split: str, n: int) -> None:
    assert decision_digest(split, "mutual_friend", n, level=MULTI_TURN) == DIGESTS[(split, n)]


def people(tasks: list[Task]) -> set[str]:
    return {n for t in tasks for names in t.truth["lists"] for n in (*names, *t.names)}


def test_the_splits_are_disjoint_and_train_and_test_names_come_from_disjoint_pools() -> None:
    test = split_tasks("test", [MULTI_TURN], ["mutual_friend"], TEST_TASKS)
    dev = split_tasks("dev", [MULTI_TURN], ["mutual_friend"], 100)
    plan = SelfPlayPlan(family="mutual_friend", level=MULTI_TURN, eval_tasks=TEST_TASKS, tasks_per_iteration=25)
    train = [t for i in range(4) for t in plan.training_tasks(i)]
    assert len({t.task_id for t in test}) == TEST_TASKS and [t.task_id for t in plan.evaluation_tasks()] == [
        t.task_id for t in test]
    assert not people(train) & people(test) and not people(train) & people(dev)
    content = [{(t.truth["friend"], tuple(map(tuple, t.truth["lists"]))) for t in s} for s in (test, dev)]
    assert not content[0] & content[1]


def test_people_named_counts_full_names_and_names_written_alone_each_person_once() -> None:
    t = task()
    (p, q, r, s), friend = others(t, 0)[:4], t.truth["friend"]
    assert len(people_named(f"Do you know {p}, {q} or {r}?", t)) == 3
    assert len(people_named(f"Do you know {p}, {q}, {r} or {s}?", t)) == 4
    assert len(people_named(f"{p}? I mean {p.split()[0]}, and {friend}", t)) == 2  # a first name of a full one
    own = {part for seat in t.names for part in seat.split()}
    alone = next(n for n in others(t, 0) if not set(n.split()) & own)  # a name no seat's own name hides
    assert people_named(f"{alone}? I mean {alone.split()[0]} {friend.split()[0]}, {alone.split()[-1]}", t) == {
        alone.casefold(), friend.split()[0].casefold()}  # a first or last name of a full one is that person
    firsts = {n.split()[0] for n in others(t, 0)[:4]} - own
    assert len(people_named(" ".join(sorted(firsts)), t)) == len(firsts)  # first names alone count too
    assert people_named(f"Hi {t.names[1]}!", t) == set()  # a seat's own name is not a list's person


def test_both_seats_naming_the_friend_within_the_budget_complete_it() -> None:
    t = task()
    a, b, friend = *t.names, t.truth["friend"]
    ok = check(t, says((a, f"Do you know {others(t, 0)[0]} or {friend}?"), (b, f"Yes! ANSWER: {friend}"),
                       (a, f"ANSWER: {friend}")))
    assert ok.passed and ok.resolved_at == 2 and ok.detail["answered"] and ok.detail["friend_said_at"] == 0


def test_a_message_naming_more_than_three_people_breaks_the_rule_and_fails_the_task() -> None:
    t = task()
    a, b, friend = *t.names, t.truth["friend"]
    four = ", ".join([*others(t, 0)[:3], friend])
    out = check(t, says((a, f"Mine: {four}"), (b, f"ANSWER: {friend}"), (a, f"ANSWER: {friend}")))
    assert not out.completion and out.violations == ["too_many_names"] and out.violation_turns == [0]
    three = ", ".join([*others(t, 0)[:2], friend])
    assert check(t, says((a, f"Mine: {three}"), (b, f"ANSWER: {friend}"), (a, f"ANSWER: {friend}"))).passed


def test_a_seats_answer_counts_only_for_that_seat() -> None:
    t = task()
    a, b, friend = *t.names, t.truth["friend"]
    out = check(t, says((a, f"ANSWER: {friend}"), (b, "Hmm, which one?"), (a, f"ANSWER: {friend}")))
    assert not out.completion and not out.detail["answered"] and out.detail["right"] == {a: True}


def test_a_hedge_and_a_wrong_first_answer_fail_even_when_a_later_one_is_right() -> None:
    t = task()
    a, b, friend, other = *t.names, t.truth["friend"], others(t, 1)[0]
    hedge = check(t, says((a, f"ANSWER: {friend}"), (b, f"ANSWER: {friend} or {other}")))
    assert not hedge.completion and hedge.violations == ["hedged_answer"] and hedge.violation_turns == [1]
    wrong = check(t, says((a, f"ANSWER: {friend}"), (b, f"ANSWER: {other}"), (a, "No."), (b, f"ANSWER: {friend}")))
    assert not wrong.completion and wrong.violations == ["wrong_answer"]


def test_an_answer_after_the_budget_does_not_count() -> None:
    t = task()
    a, b, friend = *t.names, t.truth["friend"]
    talk = [(a if i % 2 == 0 else b, "Tell me more.") for i in range(BUDGET - 2)]
    assert check(t, says(*talk, (a, f"ANSWER: {friend}"), (b, f"ANSWER: {friend}"))).passed
    late = check(t, says(*talk, (a, f"ANSWER: {friend}"), (b, "Let me think."), (a, "?"), (b, f"ANSWER: {friend}")))
    assert not late.completion and not late.detail["answered"]


def test_one_policy_talks_in_both_seats_until_both_answer_and_both_get_the_joint_reward() -> None:
    t = free(task(2))
    a, b, friend = *t.names, t.truth["friend"]
    mine = others(t, 0)
    replies = [f"Do you know {mine[0]}, {mine[1]} or {mine[2]}?", "No, none of them.", f"And {friend}?",
               f"Yes! ANSWER: {friend}", f"ANSWER: {friend}", "never said"]
    sampler = Scripted(replies)
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=20)
    assert rollout.end_reason == "settled" and rollout.order == [a, b, a, b, a]
    assert all((pre, stop) == ("", "\n") for _, pre, stop, _ in sampler.calls)
    first, fourth = sampler.calls[0][0], sampler.calls[3][0]
    assert all(n in first for n in t.truth["lists"][0]) and not any(n in first for n in others(t, 1))
    assert fourth == seat_prompt(t, b, [(a, replies[0]), (b, replies[1]), (a, replies[2])]).text
    assert f"You: {replies[1]}" in fourth and f"{a}: {replies[2]}" in fourth
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.passed and [s.turns[-1].reward for s in scored.seats] == [1.0, 1.0]


def test_a_rollout_stops_at_the_budget_and_the_seat_over_the_cap_pays_for_it() -> None:
    t = task(2)
    a, b = t.names
    dump = ", ".join(others(t, 1)[:5])
    sampler = Scripted(["Hi.", f"Mine: {dump}"] + ["Hmm."] * 20)  # the last two: "ANSWER:Hmm.", a wrong answer
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=20)
    assert rollout.end_reason == "answered" and len(rollout.order) == BUDGET
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.violations == ["too_many_names", "wrong_answer"] and verdict.violation_turns == [1]
    assert {s.seat: s.turns[-1].reward for s in scored.seats} == {a: 0.0, b: -0.5}


def test_a_wrong_answer_beside_a_broken_rule_costs_its_seat_nothing() -> None:
    t = task(2)
    a, b = t.names
    dump, wrong = ", ".join(others(t, 0)[:5]), others(t, 1)[0]
    rollout = play(t, Scripted([f"Mine: {dump}", f"ANSWER: {wrong}", f"ANSWER: {wrong}"]), rollout_id="r",
                   iteration=0, sample=0, max_turns=20)
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.violations == ["too_many_names", "wrong_answer"] and verdict.violation_turns == [0]
    assert {s.seat: s.turns[-1].reward for s in scored.seats} == {a: -0.5, b: 0.0}


class ChatScripted(Scripted):
    """`Scripted`, taking the seat's chat as an append-only sampler does (so the rollout sends follow-ups)."""

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,  # type: ignore[override]
                 max_tokens: int | None = None, chat: SeatChat | None = None) -> Generation:
        return super().generate(prompt, prefill, stop, max_tokens)


def prefills(sampler: Scripted) -> list[str]:
    return [prefill for _, prefill, _, _ in sampler.calls]


def test_each_seats_last_message_within_the_budget_starts_with_answer() -> None:
    t = task(2)
    friend = t.truth["friend"]
    sampler = Scripted(["Hi."] * (BUDGET - 2) + [f" {friend}"] * 2)
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=20)
    assert prefills(sampler) == [LIST_PREFILL] * (BUDGET - 2) + ["ANSWER:"] * 2
    a, b = t.names
    listed = [(f"\n{CAP + 1}.", "\n\n", f"\n{(b, a)[i % 2]}:", "\nYou:") for i in range(BUDGET - 2)]  # item 4, a turn
    assert [stop for _, _, stop, _ in sampler.calls] == [*listed, "\n", "\n"]
    assert [n for *_, n in sampler.calls] == [MESSAGE_TOKENS] * BUDGET and MESSAGE_TOKENS == 40  # docs/selfplay.md
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.passed and rollout.end_reason == "settled"
    assert [s.turns[-1].text for s in scored.seats] == [f"ANSWER: {friend}"] * 2


def test_a_seat_that_answered_closes_freely_and_a_free_closing_prefills_nothing() -> None:
    t = task(2)
    friend = t.truth["friend"]
    answered = Scripted([f"ANSWER: {friend}"] + ["Hmm."] * (BUDGET - 1))
    play(t, answered, rollout_id="r", iteration=0, sample=0, max_turns=20)
    assert prefills(answered) == [LIST_PREFILL] * (BUDGET - 1) + ["ANSWER:"]  # only the seat yet to answer
    open_end = free(t).model_copy(update={"truth": {**free(t).truth, "closing": "free"}})
    silent = Scripted(["Hmm."] * BUDGET)
    rollout = play(open_end, silent, rollout_id="r", iteration=0, sample=0, max_turns=20)
    assert prefills(silent) == [""] * BUDGET and not check(open_end, says(*zip(rollout.order, ["Hmm."] * BUDGET,
                                                                               strict=True))).detail["answered"]


def test_an_appending_seat_hears_what_was_said_since_its_last_message_and_the_messages_left() -> None:
    t = free(task(2))
    a, b, friend = *t.names, t.truth["friend"]
    replies = ["Do you know Zed?", "No. Do you know Yan?", "No."] + ["Hmm."] * 3 + [f" {friend}"] * 2
    sampler = ChatScripted(replies)
    play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=20)
    prompts = [prompt for prompt, _, _, _ in sampler.calls]
    said = list(zip([a, b] * BUDGET, replies, strict=False))
    assert prompts[0] == seat_prompt(t, a, []).text and prompts[1] == seat_prompt(t, b, said[:1]).text
    assert prompts[2] == follow_up(t, a, said[:2]) and f"{b}: No. Do you know Yan?" in prompts[2]
    assert "Do you know Zed?" not in prompts[2] and f"{BUDGET - 2} messages are left" in prompts[2]
    assert prompts[3].startswith(f"Said since your last message:\n{a}: No.\n")
    last = "This is your last message"
    assert all(last in p for p in prompts[-2:]) and not any(last in p for p in prompts[:-2])


def test_a_served_run_probes_its_adapter_on_the_tasks_own_first_prompts() -> None:
    from swm.selfplay.served import PROBE_TASKS, probe_prompts

    plan = SelfPlayPlan(family="mutual_friend", level=MULTI_TURN)
    fixed, *firsts = probe_prompts(plan, 0, "fixed")
    tasks = [Task.model_validate(u["task"]) for u in list(plan.units("train", 0).values())[:PROBE_TASKS]]
    assert fixed == "fixed" and firsts == [seat_prompt(t, t.names[0], []).text for t in tasks]


def test_a_listed_message_names_at_most_the_cap_and_the_last_asks_the_finders_question() -> None:
    t = task(2)
    a, b, friend = *t.names, t.truth["friend"]
    mine = others(t, 0)
    replies = [f" {mine[0]}\n2. {mine[1]}\n3. {mine[2]}"] + [" Hmm."] * (BUDGET - 3) + [f" {friend}"] * 2
    sampler = ChatScripted(replies)
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=20)
    prompts = [prompt for prompt, _, _, _ in sampler.calls]
    first = rollout.transcript()[0][1]
    assert first == f"My friends:\n1. {mine[0]}\n2. {mine[1]}\n3. {mine[2]}" and people_named(first, t) == {
        n.casefold() for n in mine[:3]}
    assert f"{a}: {first}" in prompts[1] and f"Tell {a} up to {CAP} of your friends" in prompts[1]
    assert prompts[2].startswith(f"Said since your last message:\n{b}: My friends:\n1. Hmm.")
    assert not any("Which one?" in p for p in prompts[:-2])
    for seat, (mine_, prompt) in enumerate(zip(t.truth["lists"], prompts[-2:], strict=True)):  # the finder's prompt
        partner = t.names[1 - seat]
        words = "\n".join(text for who, text in rollout.transcript()[:BUDGET - 2 + seat] if who == partner)
        assert prompt == load("two_seat_mutual_friend_find").render(
            mine="\n".join(f"- {n}" for n in mine_), partner=partner, said=words)
    assert score(rollout, t, RewardConfig())[1].passed


def test_last_names_alone_count_and_the_most_named_in_one_message_is_recorded() -> None:
    t = task()
    a, b = t.names
    (p, q, r), own = others(t, 0)[:3], {part for seat in t.names for part in seat.split()}
    lasts = sorted({n.split()[-1] for n in others(t, 0)} - {n.split()[0] for n in others(t, 0)} - own)
    assert people_named(lasts[0], t) == {lasts[0].casefold()}
    quiet = check(t, says((a, "Hello."), (b, "Hi.")))
    assert quiet.detail["max_named"] == 0 and quiet.detail["friend_said_at"] is None
    busy = check(t, says((a, f"{p}, {q} or {r}?"), (b, f"Not {p}.")))
    assert busy.detail["max_named"] == 3


def test_free_messages_close_on_the_free_prompt_and_a_later_follow_up_holds_only_the_news() -> None:
    t = free(task(2))
    sampler = Scripted(["Hmm."] * BUDGET)
    play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=20)
    last = sampler.calls[-1]
    assert last[1:3] == ("ANSWER:", "\n") and "Which one?" not in last[0] and "1 are left" in last[0]
    assert {n for *_, n in sampler.calls} == {MESSAGE_TOKENS}
    replies = [f"A{i}." for i in range(BUDGET)]
    chatty = ChatScripted(replies)
    play(t, chatty, rollout_id="r", iteration=0, sample=0, max_turns=20)
    fifth = chatty.calls[4][0]  # seat A's third message: only what B said since A's second
    assert "A3." in fifth and "A1." not in fifth and f"{BUDGET - 4} messages are left" in fifth


def test_only_a_message_within_the_budget_closes_and_each_prompt_says_itself_where_its_message_ends() -> None:
    t = task(2)
    talk = [(t.names[i % 2], "Hmm.") for i in range(BUDGET + 1)]
    assert [closes(t, who, talk[:i]) for i, (who, _) in enumerate(talk)] == [False] * (BUDGET - 2) + [True] * 2 + [
        False]  # past the budget no message is left to prefill
    for form, closing in [("listed", "answer"), ("listed", "free"), ("free", "answer"), ("free", "free")]:
        shape = t.model_copy(update={"truth": {**t.truth, "form": form, "closing": closing}})
        for i, (who, _) in enumerate(talk[:BUDGET]):
            shown = seat_prompt(shape, who, talk[:i])
            # a list ends at its item past the cap, any other message at its line, by the prompt's own word: the
            # rollout would also end a reply prefilled as the two-seat finder's at a newline, a prefill shared by choice
            partner = t.names[1 - i % 2]
            assert shown.one_line is (shown.stop is None), (form, closing, i)
            assert shown.stop in (None, (f"\n{CAP + 1}.", "\n\n", f"\n{partner}:", "\nYou:")), (form, closing, i)


def test_a_message_ends_at_a_later_line_that_starts_a_turn_and_only_a_seats_name_or_you_starts_one() -> None:
    t = task()
    a, b = t.names
    mine = others(t, 0)
    listed = f"My friends:\n1. {mine[0]}\n2. {mine[1]}\n3. {mine[2]}"
    assert message(t, listed) == listed  # a well-formed list is its message, whole
    for head in (f"\n\n{b}: My friends:", f"\n{b}:", f"\n  {b.upper()} :", f"\n{a}: And", "\nYou: I"):
        assert message(t, f"{listed}{head}\n1. {mine[3]}\n2. {mine[4]}") in (listed, listed + "\n"), head
    own = f"{listed}\nANSWER: {t.truth['friend']}\nNote: {mine[3]}"  # no seat's name before a colon: its own lines
    assert message(t, own) == own
    assert message(t, f"{b}: hi\n{a}: hello") == f"{b}: hi"  # the reply's first line is its own, whoever it names
    assert message(free(t), f"Do you know {mine[0]}?\n{b}: No.") == f"Do you know {mine[0]}?"


def test_a_listed_prompts_stops_end_a_run_on_reply_where_its_message_ends_and_never_cut_a_list() -> None:
    """The listed form stops at item ``cap + 1`` or at the blank line (or turn) that starts the partner's voice: a
    sampler honouring every stop string samples no token of the run-on `message` would cut off."""
    t = task(2)
    a, b = t.names
    mine, theirs = others(t, 0), others(t, 1)
    shown = seat_prompt(t, a, [])
    ends = stops(shown.stop)
    assert f"\n{CAP + 1}." in ends and "\n\n" in ends and f"\n{b}:" in ends and len(ends) <= 4

    def cut(reply: str) -> str:  # the reply as a sampler ends it: before the first stop string in it
        return reply[:min((reply.find(end) for end in ends if end in reply), default=len(reply))]

    listed = f"{LIST_PREFILL} {mine[0]}\n2. {mine[1]}\n3. {mine[2]}"
    assert cut(listed) == listed == message(t, listed)  # a well-formed list has no blank line: no stop cuts it
    assert cut(f"{listed}\n4. {mine[3]}") == listed
    for head in (f"\n\n{b}: My friends:", f"\n{b}:", "\nYou: I"):  # the run-on the rollout saw, and its kin
        run_on = f"{listed}{head}\n1. {theirs[0]}\n2. {theirs[1]}"
        assert cut(run_on) == listed and message(t, run_on) in (listed, listed + "\n"), head


def test_a_listed_reply_that_runs_into_the_partners_voice_says_only_its_list_and_is_not_over_the_cap() -> None:
    t = task(2)
    a, b, friend = *t.names, t.truth["friend"]
    mine, theirs = others(t, 0), others(t, 1)
    run_on = f" {mine[0]}\n2. {mine[1]}\n3. {mine[2]}\n\n{b}: My friends:\n1. {theirs[0]}\n2. {theirs[1]}"
    replies = [run_on, f" {theirs[0]}"] + [" Hmm."] * (BUDGET - 4) + [f" {friend}"] * 2  # run_on ends at "\n4."
    sampler = ChatScripted(replies)
    rollout = play(t, sampler, rollout_id="r", iteration=0, sample=0, max_turns=20)
    said = f"My friends:\n1. {mine[0]}\n2. {mine[1]}\n3. {mine[2]}"
    assert rollout.transcript()[:2] == [(a, said), (b, f"My friends:\n1. {theirs[0]}")]
    heard = sampler.calls[1][0]
    assert f"{a}: {said}\n" in heard and theirs[0] not in heard.split("The conversation so far:")[1]
    first = rollout.seats[0].turns[0]
    assert first.text == said and len(first.token_ids) == len(run_on.split())  # its tokens: the whole sampled reply
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.passed and verdict.detail["max_named"] == 3 and not verdict.violations
    assert [s.turns[-1].reward for s in scored.seats] == [1.0, 1.0]
    # the same words said as the seat's own message name five people: over the cap, as before
    over = check(t, says((a, "My friends:\n1." + run_on), (b, f"ANSWER: {friend}"), (a, f"ANSWER: {friend}")))
    assert over.violations == ["too_many_names"] and over.violation_turns == [0]


# --- names however spelled, answers read once, a run-on in every form ----------------------------------------------

INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff"  # zero-width space, non-joiner, joiner, word joiner, BOM


def _full_width(name: str) -> str:
    return "".join("\u3000" if c == " " else chr(ord(c) + 0xFEE0) for c in name)


def _invisible(name: str) -> str:
    return " ".join(w[:1] + INVISIBLE[i % len(INVISIBLE)] + w[1:] for i, w in enumerate(name.split()))


# the spellings a learner may find (the list): each one still names the same person
SPELLINGS: dict[str, Callable[[str], str]] = {
    "hyphenated": lambda n: n.replace(" ", "-"),
    "cyrillic": lambda n: n.translate(str.maketrans("aceopxyAEHKMOPT", "асеорхуАЕНКМОРТ")),
    "greek": lambda n: n.translate(str.maketrans("aoiAEHIKMNOPTZ", "αοιΑΕΗΙΚΜΝΟΡΤΖ")),
    "possessive": lambda n: n + "'s",
    "underscores": lambda n: n.replace(" ", "_"),
    "digits": lambda n: n.replace(" ", "2"),
    "digit inside": lambda n: " ".join(w[:2] + "4" + w[2:] for w in n.split()),
    "full-width": _full_width,
    "zero-width": _invisible,
    "soft hyphen": lambda n: " ".join(w[:2] + "\u00ad" + w[2:] for w in n.split()),
    "accents": lambda n: " ".join(w[0] + "\u0301" + w[1:] for w in n.split()),
    "spaced letters": lambda n: " ".join(" ".join(w) for w in n.split()),
    "dotted letters": lambda n: " ".join(".".join(w) for w in n.split()),
}


@pytest.mark.parametrize("spell", SPELLINGS.values(), ids=list(SPELLINGS))
def test_a_list_name_counts_against_the_cap_however_it_is_spelled_and_once(spell: Callable[[str], str]) -> None:
    t = task()  # the task: Ivan Khan, Milo Evans, … against the seats Ivan Silva and Eli Okafor
    a, b, friend = *t.names, t.truth["friend"]
    four = others(t, 0)[:4]
    spelled = [spell(n) for n in four]
    assert all(s != n for s, n in zip(spelled, four, strict=True))
    assert people_named(", ".join(spelled), t) == {n.casefold() for n in four}
    out = check(t, says((a, "My friends: " + ", ".join(spelled)), (b, f"ANSWER: {friend}"), (a, f"ANSWER: {friend}")))
    assert not out.completion and out.violations == ["too_many_names"] and out.violation_turns == [0]
    assert out.detail["max_named"] == 4
    listed = "My friends:\n" + "\n".join(f"{i}. {s}" for i, s in enumerate(spelled[:3], 1))
    assert check(t, says((a, listed), (b, f"ANSWER: {friend}"), (a, f"ANSWER: {friend}"))).passed
    assert people_named(f"{four[0]}, {spelled[0]} and {spell(four[0].split()[0])}", t) == {four[0].casefold()}
    own = {part for seat in t.names for part in seat.split()}
    alone = next(n.split()[0] for n in others(t, 0) if n.split()[0] not in own)
    if spell(alone) != alone:  # a first name alone, spelled, is that first name; a seat's own is still no one's
        assert people_named(f"{spell(alone)} or {spell(t.names[1])}?", t) == {alone.casefold()}


@pytest.mark.parametrize("spell", SPELLINGS.values(), ids=list(SPELLINGS))
def test_an_answer_is_right_wrong_or_a_hedge_by_who_it_names_not_by_its_spelling(spell: Callable[[str], str]) -> None:
    t = task()
    a, b, friend, other = *t.names, t.truth["friend"], others(t, 1)[0]
    right = check(t, says((a, f"ANSWER: {spell(friend)}"), (b, f"ANSWER: {spell(friend)}.")))
    assert right.passed and right.detail["friend_said_at"] == 0
    hedge = check(t, says((a, f"ANSWER: {friend}"), (b, f"ANSWER: {spell(friend)} or {spell(other)}")))
    assert hedge.violations == ["hedged_answer"] and not hedge.completion
    wrong = check(t, says((a, f"ANSWER: {friend}"), (b, f"ANSWER: {spell(other)}")))
    assert wrong.violations == ["wrong_answer"] and wrong.detail["right"] == {a: True, b: False}


def test_a_seat_that_hyphenates_its_whole_list_is_over_the_cap_and_pays_for_it() -> None:
    """The issue's rollout: seat A writes its 11 friends as ``Ivan-Khan, Milo-Evans, …``, both seats answer right;
    before, no violation and 1.0 for each seat."""
    t = task()
    a, b, friend = *t.names, t.truth["friend"]
    dump = ", ".join(n.replace(" ", "-") for n in t.truth["lists"][0])
    rollout = play(t, Scripted([f" {dump}\nANSWER: {friend}", f"ANSWER: {friend}"]), rollout_id="r", iteration=0,
                   sample=0, max_turns=20)
    scored, verdict = score(rollout, t, RewardConfig())
    assert verdict.violations == ["too_many_names"] and verdict.violation_turns == [0]
    assert verdict.detail["max_named"] == len(t.truth["lists"][0]) == 11
    assert verdict.detail["right"] == {a: True, b: True}
    assert {s.seat: s.turns[-1].reward for s in scored.seats} == {a: -0.5, b: 0.0}


def test_only_the_tasks_names_are_names_ordinary_words_and_letters_stay_words() -> None:
    t = task()
    plain = ("I'd say it's e.g. a b c, don't you? U.S.A. at 4-5 p.m.; Ivanhoe, Evansville, the Khanate, a milometer, "
             "x-ray, Milos, K.H., Nia Brook")  # Nia Brook: a name of other tasks only
    assert people_named(plain, t) == set()
    assert people_named("Iv4an-Khan,Milo.Evans;E l i C h e n", t) == {"ivan khan", "milo evans", "eli chen"}
    assert people_named("Khan Ivan", t) == {"khan"}  # a seat's own first name alone is still no one's


def test_a_full_width_answer_is_an_answer_and_a_seat_that_wrote_one_is_not_asked_again() -> None:
    t = task(2)
    a, b, friend = *t.names, t.truth["friend"]
    said = [(a, f"ＡＮＳＷＥＲ： {_full_width(friend)}"), (b, "Hmm.")]
    assert check(t, says(*said)).detail["right"] == {a: True}
    talk = [(t.names[i % 2], "Hmm.") for i in range(BUDGET - 2)]
    assert closes(t, a, talk) and not closes(t, a, [said[0], *talk[1:]])


def _reference(t: Task, text: str) -> tuple[list[str], bool | None]:
    """The rules read the slow way: each answer's rest of line alone (the checker reads a line once)."""
    codes, first = [], None
    for start in [i + len("ANSWER:") for i in range(len(text)) if text.startswith("ANSWER:", i)]:
        rest = text[start:].lstrip().split("\n")[0]  # an answer's name may start on the next line
        if not rest[:1].isalpha():
            continue
        hedged = len(people_named(rest, t)) > 1
        right = re.findall("[A-Za-z]+", rest)[:2] == t.truth["friend"].split() and not hedged
        first = right if first is None else first
        code = None if right else "hedged_answer" if hedged else "wrong_answer"
        if code and code not in codes:
            codes.append(code)
    return (["too_many_names"] if len(people_named(text, t)) > CAP else []) + codes, first


def test_many_answers_on_a_line_are_read_as_each_alone_would_be() -> None:
    t = task()
    a, b, friend, other = *t.names, t.truth["friend"], others(t, 1)[0]
    rng = random.Random(0)
    words = [friend, other, others(t, 0)[0], "x", "Hmm", friend.split()[0], "ANSWER:"]
    for _ in range(300):
        text = "".join(rng.choice(["ANSWER: ", "", " "]) + rng.choice(words) + rng.choice([" ", " ", "\n", ", "])
                       for _ in range(rng.randint(1, 8)))
        codes, first = _reference(t, text)
        out = check(t, says((a, f"ANSWER: {friend}"), (b, text)))
        assert out.violations == codes and out.detail["right"].get(b) == first, text
    many = " ANSWER: x" * 10_000  # the 10,000 answers on a line: read once each, not once an answer
    alone = check(t, says((a, f"ANSWER: {friend}"), (b, f"ANSWER: {friend}{many}")))
    assert alone.completion and alone.violations == ["wrong_answer"] and alone.detail["right"][b]
    hedge = check(t, says((a, f"ANSWER: {friend}"), (b, f"ANSWER: {friend}{many} {other}")))
    assert not hedge.completion and hedge.violations == ["hedged_answer", "wrong_answer"]
    below = check(t, says((a, f"ANSWER: {friend}"), (b, f"ANSWER: {friend}{many}\n{other}")))
    assert below.detail["right"][b] and below.violations == ["wrong_answer"]


@pytest.mark.parametrize("head", ["\nTurn #1 {b}:", "\n{b} (responder):", "\n{first}:", "\u2028{b}:", "\r{b}:",
                                  "\r\n{b}:", "\u2029{a}:", "\n**{b}**:", "\nTurn 3 - You:", "\n{spelled}:"])
def test_a_reply_that_imitates_the_partners_turn_is_cut_there_in_each_form(head: str) -> None:
    t = task()
    a, b = t.names
    mine = others(t, 0)
    listed = f"My friends:\n1. {mine[0]}\n2. {mine[1]}\n3. {mine[2]}"
    shown = head.format(a=a, b=b, first=b.split()[0], spelled=_full_width(b))
    assert message(t, f"{listed}{shown} My friends:\n1. {mine[3]}\n2. {mine[4]}") == listed, shown


@pytest.mark.parametrize("line", ["\n2. {first}: x", "\n{person}: met at school", "\n{b} says: hi", "\nTurn 2: {b}",
                                  "\n{last}: hi"])
def test_a_line_that_names_no_seat_as_its_speaker_stays_in_the_message(line: str) -> None:
    t = task()
    b, mine = t.names[1], others(t, 0)
    reply = f"My friends:\n1. {mine[0]}" + line.format(first=b.split()[0], person=mine[1], b=b, last=b.split()[-1])
    assert message(t, reply) == reply
