"""The mutual-friend checker (a decision, the two-seat finder) reads names however they are spelled: a hedge spelled
apart is still a hedge, and a right name spelled oddly is still right."""

from __future__ import annotations

import pytest

from swm.tasks.checkers import Utterance, check_mutual_friend, letters, named_in
from swm.tasks.multi_turn import multi_turn_task

TASK = multi_turn_task("mutual_friend", 1)  # the friend: Nia Brook; Cara Ford, Fay Quist on the first list


def verdict(text: str) -> tuple[bool, list[str]]:
    v = check_mutual_friend(TASK, [Utterance(agent="B", text=text)])
    return v.completion, v.violations


@pytest.mark.parametrize("other", ["Cara-Ford", "Cara_Ford", "Cara2Ford", "Cara's Ford", "Ｃａｒａ Ｆｏｒｄ",
                                   "Cаra Fоrd",  # Cyrillic а and о
                                   "Ca\u200bra Ford", "Ca\u00adra Ford", "C a r a F o r d", "C.a.r.a F.o.r.d"])
def test_a_hedge_spelled_apart_is_a_hedge(other: str) -> None:
    assert verdict("ANSWER: Cara Ford, Nia Brook") == (False, ["hedged_answer"])  # as it was
    assert verdict(f"ANSWER: Nia Brook, {other}") == (False, ["hedged_answer"])


@pytest.mark.parametrize("spelled", ["Nia Brook", "Nia-Brook", "nia brook", "Ｎｉａ Ｂｒｏｏｋ", "Niа Brook"])
def test_the_friend_spelled_oddly_is_right(spelled: str) -> None:
    assert verdict(f"ANSWER: {spelled}") == (True, [])


def test_letters_keep_ordinary_words_apart() -> None:
    assert letters("Don't stop, U.S.A.!") == "don t stop usa"
    assert named_in("I know Nia Brook well", "Nia Brook") and not named_in("Nia Brookes", "Nia Brook")
    assert not named_in("a n i a b r o o k s", "Nia Brook") and not named_in("Brook Nia", "Nia Brook")
    assert not named_in("anything", "") and named_in("N i a B r o o k", "Nia Brook")
