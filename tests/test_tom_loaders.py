"""Loaders: every on-disk format read into the same items, on small fixtures and the shared samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from swm.errors import InputError
from swm.tom.loaders import load_benchmark, load_fantom, load_hitom, parse_choices, select
from swm.tom.scoring import score_answer

FIX = Path(__file__).parent / "fixtures" / "tom"


def test_babi_tomi_with_trace() -> None:
    items = load_benchmark("tomi", FIX / "tomi_mini.txt")
    assert len(items) == 5
    first = items[0]
    assert first.story.splitlines() == ["Jack entered the kitchen.", "Mia entered the kitchen.",
                                        "The apple is in the green_box.", "Mia exited the kitchen.",
                                        "Jack moved the apple to the red_basket."]
    assert first.question == "Where will Mia look for the apple?" and first.answer == "green_box"
    assert [i.qtype for i in items] == ["first_order_tom", "reality", "second_order_tom", "memory",
                                        "first_order_no_tom"]
    assert items[3].story.splitlines()[1] == "Omar likes the pear"  # distractor kept verbatim
    assert items[0].meta["story_type"] == "false_belief" and items[0].task == "tomi"


def test_babi_without_trace_reads_type_from_question(tmp_path: Path) -> None:
    path = tmp_path / "para.txt"
    path.write_text("1 Ann entered the den.\n2 The key is in the box.\n3 Where is the key really?\tbox\t1\n"
                    "1 Ann entered the den.\n2 Where was the key at the beginning?\tbox\t1\n")
    items = load_benchmark("paratomi", path)
    assert [i.qtype for i in items] == ["reality", "memory"] and items[1].story == "Ann entered the den."
    assert items[0].benchmark == "paratomi" and items[0].task == "tomi"


def test_hitom_json_maps_answer_to_letter_and_keeps_cotp() -> None:
    items = load_hitom(FIX / "hitom_mini.json")
    assert len(items) == 2  # the VP item is left out, as the paper's loader does
    assert items[0].options == {"A": "red_box", "B": "blue_crate", "C": "green_drawer"}
    assert items[0].answer_letter == "B" and items[1].answer_letter == "A"
    assert items[1].qtype == "order_2" and "Choose one of: A. red_box" in items[1].question
    assert len(load_hitom(FIX / "hitom_mini.json", prompting_type=None)) == 3


def test_parse_choices_handles_underscored_names() -> None:
    assert parse_choices("A. green_treasure_chest, B. red_box") == {"A": "green_treasure_chest", "B": "red_box"}


def test_mmtom_text_questions() -> None:
    items = load_benchmark("mmtom", FIX / "mmtom_mini.json")
    assert len(items) == 2
    first = items[0]
    assert first.story.startswith("What's inside the apartment") and first.question.startswith("If Ana")
    assert first.options == {"a": "Ana thinks that the cupcake is not inside the fridge.",
                             "b": "Ana thinks that the cupcake is inside the fridge."}
    assert first.answer_letter == "b" and first.answer == first.options["b"] and first.qtype == "type_1.1"


def test_fantom_question_kinds_and_sets() -> None:
    items = load_fantom(FIX / "fantom_mini.json")
    kinds = [i.kind for i in items]
    assert kinds.count("fantom_fact") == 1 and kinds.count("fantom_belief_mc") == 1
    assert kinds.count("fantom_list") == 2 and kinds.count("fantom_binary") == 3  # the no:long one is dropped
    assert {i.group for i in items} == {"c1-p1-s1"}
    belief = next(i for i in items if i.kind == "fantom_belief_mc")
    assert belief.options[belief.answer_letter or ""] == "Zoe does not know the breed of Kai's dog."
    assert "(a)" in belief.question and "(b)" in belief.question
    assert items[0].story.startswith("Kai: I adopted")  # the short context
    assert load_fantom(FIX / "fantom_mini.json", context="full")[0].story.startswith("Kai: Hi all.")


def test_uniform_jsonl_fixture() -> None:
    items = load_benchmark("tomi", FIX / "tomi_uniform.jsonl")
    assert [(i.id, i.qtype, i.answer) for i in items] == [("t-1", "reality", "red_box"),
                                                          ("t-2", "first_order_no_tom", "red_box")]


def test_shared_samples_load(shared_dir: Path) -> None:
    bench = shared_dir / "benchmarks"
    tomi = load_benchmark("tomi", bench / "tomi" / "tomi_test_sample300.jsonl")
    hitom = load_benchmark("hitom", bench / "hitom" / "hitom_cotp_sample300.jsonl")
    mmtom = load_benchmark("mmtom", bench / "mmtom" / "mmtom_text_sample300.jsonl")
    assert len(tomi) == len(hitom) == len(mmtom) == 300
    assert {i.qtype for i in tomi} >= {"first_order_tom", "second_order_no_tom", "reality", "memory"}
    assert all(i.options[i.answer_letter or ""] == i.answer for i in hitom)
    assert all(i.options[i.answer_letter or ""] == i.answer for i in mmtom)


def test_select_is_seeded_and_keeps_file_order() -> None:
    items = load_benchmark("tomi", FIX / "tomi_mini.txt")
    a, b = select(items, 3, seed=1), select(items, 3, seed=1)
    assert [i.id for i in a] == [i.id for i in b] and len(a) == 3
    assert [items.index(i) for i in a] == sorted(items.index(i) for i in a)
    assert select(items, None, 0) == items


def test_bad_inputs_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        load_benchmark("tomi", tmp_path / "missing.txt")
    with pytest.raises(InputError):
        load_benchmark("nope", FIX / "tomi_mini.txt")
    bad = tmp_path / "bad.txt"
    bad.write_text("no number here\n")
    with pytest.raises(InputError):
        load_benchmark("tomi", bad)


def test_percept_tomi_csv_in_its_column_format() -> None:
    """A two-row fixture written in Percept-ToMi's columns (the file itself is not redistributed)."""
    items = load_benchmark("tomi", FIX / "percept_tomi_mini.csv")
    assert [i.id for i in items] == ["tomi-percept-7", "tomi-percept-12"]
    first = items[0]
    assert first.story.splitlines()[:2] == ["Mara entered the attic.", "Theo entered the attic."]
    assert (first.question, first.answer, first.qtype) == ("Where will Theo look for the scarf?", "hamper",
                                                           "first_order_tom")
    assert first.meta["question_type"] == "first_order_1_tom" and first.meta["candidates"] == ["attic", "hamper",
                                                                                                  "trunk"]
    assert score_answer(first, "Not the trunk, the hamper")["strict"] is False
    assert score_answer(first, "the hamper")["strict"] is True


def test_percept_tomi_bad_row_is_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("index,story,question,answer\n1,not a list,Where?,box\n", encoding="utf-8")
    with pytest.raises(InputError, match="not a Percept-ToMi row"):
        load_benchmark("tomi", bad)
