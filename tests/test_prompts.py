"""Prompts are versioned files loaded by name; rendering refuses missing or unexpected values."""

from __future__ import annotations

import pytest

from swm import prompts
from swm.nodes.parse import TASKS


def test_every_prompt_file_loads_with_a_versioned_id() -> None:
    for name, versions in prompts.available().items():
        for version in versions:
            prompt = prompts.load(name, version)
            assert prompt.id == f"{name}@{version}" and prompt.text.strip()


def test_parse_prompt_has_the_appendix_a4_slots() -> None:
    assert prompts.load("parse").placeholders == {
        "context", "task_specific_instructions", "example_analysis", "feedback", "format_instructions"}
    assert prompts.load("parse_paper").placeholders == prompts.load("parse").placeholders
    # the repair block is its own template, sent only after a failed attempt
    assert "Previous attempt had these issues" in prompts.load("parse_feedback").text


@pytest.mark.parametrize("task", TASKS)
def test_each_task_has_its_instructions(task: str) -> None:
    assert prompts.load(f"task_{task}").placeholders == set()


def test_qa_prompts_take_the_paper_fields() -> None:
    assert prompts.load("qa_s3ap").placeholders == {"context", "extra_info", "question"}
    assert prompts.load("qa_cot").placeholders == {"context", "question"}
    assert prompts.load("qa_s3ap_only").placeholders == {"extra_info", "question"}


def test_render_refuses_missing_and_unexpected_values() -> None:
    qa = prompts.load("qa_cot")
    with pytest.raises(KeyError, match="missing"):
        qa.render(context="story")
    with pytest.raises(KeyError, match="unexpected"):
        qa.render(context="story", question="q", extra="x")
    assert "{" not in qa.render(context="story", question="q").replace('{"', "")


def test_json_braces_are_not_placeholders() -> None:
    assert "agents_names" not in prompts.load("example_generic").placeholders


def test_unknown_prompt_and_version_are_clear_errors() -> None:
    with pytest.raises(KeyError, match="no prompt named 'nope'"):
        prompts.load("nope")
    with pytest.raises(KeyError, match="no version 'v99'"):
        prompts.load("parse", "v99")
