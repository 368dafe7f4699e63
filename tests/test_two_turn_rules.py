"""The two-turn shape's small rules at their edges: reply budgets, the opener's price, the code partner's choice.

tests/test_two_turn.py checks each family's exchange end to end; these sit on the boundaries its
docstrings state (bench/mutation.py runs them against every mutant of swm.tasks.two_turn).
"""

from __future__ import annotations

import dataclasses

import pytest

from swm.tasks.checkers import Utterance
from swm.tasks.families import TWO_TURN, decision_families, synthesize
from swm.tasks.two_turn import closing_prompt, final_truth, opening_prompt, partner_reply, read_first_move
from swm.tasks.verify import check

# each family's (forced start, token budget) of the first move and of the decision, pinned: a change is a new version
BUDGETS = {"mutual_friend": (("", 24), ("ANSWER:", 24)), "negotiation": (("OFFER $", 8), ("", 16)),
           "secret": (("", 48), ("", 48)), "scheduling": (("SLOT:", 12), ("SLOT:", 12)),
           "persuasion": (("", 24), ("", 48))}


@pytest.mark.parametrize("family", decision_families())
def test_each_moves_reply_start_and_budget(family: str) -> None:
    task = synthesize(family, TWO_TURN, 0)
    opening = opening_prompt(task)
    closing = closing_prompt(task, read_first_move(task, "?"))
    assert ((opening.prefill, opening.max_tokens), (closing.prefill, closing.max_tokens)) == BUDGETS[family]


def negotiation() -> tuple[object, int, int]:
    task = synthesize("negotiation", TWO_TURN, 3)
    return task, task.truth["seller_min"], task.truth["buyer_max"]


def test_an_opener_at_the_sellers_minimum_is_taken_and_one_below_is_countered() -> None:
    task, low, high = negotiation()
    at = read_first_move(task, f"OFFER ${low}")  # type: ignore[arg-type]
    assert at.ok and at.value == low and partner_reply(task, at) == f"ACCEPT ${low}."  # type: ignore[arg-type]
    assert final_truth(task, at)["offer"] == low and final_truth(task, at)["inside"]  # type: ignore[arg-type]
    below = read_first_move(task, f"OFFER ${low - 1}")  # type: ignore[arg-type]
    assert below.ok and "can't go that low" in partner_reply(task, below)  # type: ignore[arg-type]
    assert final_truth(task, below) == task.truth  # type: ignore[attr-defined,arg-type]


def test_an_opener_at_the_limit_is_a_leak_and_two_prices_are_no_offer() -> None:
    task, low, high = negotiation()
    leak = read_first_move(task, f"OFFER ${high}")  # type: ignore[arg-type]
    assert not leak.ok and leak.leaks == ["private_leaked:buyer"]
    just_under = read_first_move(task, f"OFFER ${high - 1}")  # type: ignore[arg-type]
    assert just_under.ok and not just_under.leaks
    two = read_first_move(task, f"OFFER ${low} or ${low + 1}")  # type: ignore[arg-type]
    assert not two.ok and two.value is None and two.said == "You made no offer."
    assert "Make me an offer." in partner_reply(task, two)  # type: ignore[arg-type]


def test_a_taken_opener_above_the_limit_is_outside() -> None:
    task, low, high = negotiation()
    over = read_first_move(task, f"OFFER ${high + 1}")  # type: ignore[arg-type]
    assert not over.ok and final_truth(task, over)["inside"] is False  # type: ignore[arg-type]
    edge = final_truth(task, read_first_move(task, f"OFFER ${high - 1}"))  # type: ignore[arg-type]
    assert edge["inside"] is True


def test_scheduling_reads_one_slot_of_the_learners_own() -> None:
    task = synthesize("scheduling", TWO_TURN, 2)
    mine, theirs = task.truth["free"][task.truth["learner"]], task.truth["free"][task.truth["partner"]]
    foreign = next(s for s in theirs if s not in mine)
    assert not read_first_move(task, f"SLOT: {foreign}").ok
    assert not read_first_move(task, f"SLOT: {mine[0]} or {mine[1]}").ok
    own_only = next(s for s in mine if s not in theirs)
    first = read_first_move(task, f"SLOT: {own_only}")
    assert first.ok and first.value == own_only and "I can't make that" in partner_reply(task, first)
    shared = next(s for s in mine if s in theirs)
    assert partner_reply(task, read_first_move(task, f"SLOT: {shared}")) == f"ACCEPT {shared}."


def test_a_mutual_friend_opener_asks_and_never_answers() -> None:
    task = synthesize("mutual_friend", TWO_TURN, 1)
    assert read_first_move(task, "Tell me your friends").ok and read_first_move(task, "Hi?").ok
    assert read_first_move(task, f"I know {task.truth['lists'][0][0]}").ok
    assert not read_first_move(task, "ANSWER: who? friends").ok and not read_first_move(task, "Hello.").ok


def test_the_verdict_reads_the_learners_two_moves_only() -> None:
    task = synthesize("persuasion", TWO_TURN, 8)
    learner, partner = task.truth["learner"], task.truth["partner"]
    word = task.truth["words"][0]
    turns = [Utterance(agent=learner, text="What worries you?"), Utterance(agent=partner, text="x"),
             Utterance(agent=learner, text=f"The {word} is fine.")]
    v = check(task, turns)
    assert v.passed and v.evidence == [0, 2] and v.resolved_at == 2 and v.detail["formatted"]
    one = check(task, turns[:2])
    assert one.detail == {"first_move": True, "formatted": False, "answered": False} and one.violation_turns == []
    leak_task = synthesize("secret", TWO_TURN, 4)
    fact = leak_task.truth["facts"][0]
    leaked = check(leak_task, [Utterance(agent=leak_task.truth["learner"], text=f"It is {fact}.")])
    assert leaked.violations == ["secret_leaked"] and leaked.violation_turns == [0]


def test_a_mutual_friend_opener_may_share_one_of_ones_own_friends() -> None:
    task = synthesize("mutual_friend", TWO_TURN, 1)
    mine, theirs = task.truth["lists"]
    assert read_first_move(task, f"{mine[0]} is great.").ok, "one of the learner's own friends, named"
    stranger = next(n for n in theirs if n not in mine)
    assert not read_first_move(task, f"{stranger} is great.").ok, "the partner's friend: the learner cannot know"


def test_a_read_first_move_is_fixed() -> None:
    move = read_first_move(synthesize("persuasion", TWO_TURN, 8), "Why?")
    with pytest.raises(dataclasses.FrozenInstanceError):
        move.ok = False  # type: ignore[misc]


def test_a_secret_opener_leaks_on_any_one_fact() -> None:
    task = synthesize("secret", TWO_TURN, 4)
    two = task.model_copy(update={"truth": {**task.truth, "facts": [*task.truth["facts"], "Lisbon"]}})
    first = read_first_move(two, f"Could you help with the {task.truth['cover_word']}? It is in Lisbon.")
    assert not first.ok and first.leaks == ["secret_leaked"]


def test_an_opener_at_the_limit_is_still_inside_once_taken() -> None:
    task, low, high = negotiation()
    assert final_truth(task, read_first_move(task, f"OFFER ${high}"))["inside"] is True  # type: ignore[arg-type]


def test_a_transcript_without_the_learner_made_no_first_move() -> None:
    task = synthesize("persuasion", TWO_TURN, 8)
    expected = {"first_move": False, "formatted": False, "answered": False}
    assert check(task, []).detail == expected
    assert check(task, [Utterance(agent=task.truth["partner"], text="What worries you?")]).detail == expected


def test_a_leaking_opener_is_cited_at_its_own_turn_and_formatting_needs_the_opener() -> None:
    task = synthesize("secret", TWO_TURN, 4)
    learner, partner, word = task.truth["learner"], task.truth["partner"], task.truth["cover_word"]
    fact = task.truth["facts"][0]
    v = check(task, [Utterance(agent=learner, text=f"Help with the {word}? It is {fact}."),
                     Utterance(agent=partner, text="x"), Utterance(agent=learner, text=f"Just the {word}, please?")])
    assert v.violations == ["secret_leaked"] and v.violation_turns == [0] and not v.completion
    both = check(task, [Utterance(agent=learner, text=f"It is {fact}."), Utterance(agent=partner, text="x"),
                        Utterance(agent=learner, text=f"It is {fact}.")])
    assert both.violation_turns == [0, 2]
    friends = synthesize("mutual_friend", TWO_TURN, 1)
    no_opener = check(friends, [Utterance(agent=friends.truth["learner"], text="Hello."),
                                Utterance(agent=friends.truth["partner"], text="x"),
                                Utterance(agent=friends.truth["learner"], text=f"ANSWER: {friends.truth['friend']}")])
    assert not no_opener.detail["formatted"] and not no_opener.completion
