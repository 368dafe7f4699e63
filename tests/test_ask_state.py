"""`swm ask` never hides how an answer was made: an S3AP-mode answer without a social state is refused
(exit 6, one line, no QA call) unless --allow-without-state, and the output says which state was used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import STORY, good_parse

from swm.cli import main
from swm.context import SWMContext
from swm.graphs import ask
from swm.schemas import ReasonedAnswer
from swm.testing import FakeOpenAIServer, ScriptedChatModel

UNUSABLE = {"agents_names": "not a list", "socialized_context": 3}  # fails the S3AP schema on every attempt


def _ask(tmp_path: Path, server: FakeOpenAIServer, *extra: str) -> Result:
    story = tmp_path / "story.txt"
    story.write_text(STORY)
    return CliRunner().invoke(main, ["ask", "--story", str(story), "--question", "Where will Sally look?",
                                     "--mode", "s3ap", "--task", "tomi", "--model", server.model_spec,
                                     "--db", str(tmp_path / "swm.db"), "--quiet", *extra])


def test_no_social_state_means_no_answer_exit_6_and_no_qa_call(tmp_path: Path) -> None:
    with FakeOpenAIServer(scripts={"S3APParse": UNUSABLE}) as server:
        refused = _ask(tmp_path, server)
        calls = server.stats()["by_tool"]
    assert refused.exit_code == 6, refused.output
    assert refused.stdout == ""
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no usable parse after 3 attempt(s)" in errors[0]
    assert "--allow-without-state" in errors[0]
    assert "ReasonedAnswer" not in calls, "the question was not sent to the QA model"


def test_json_says_the_state_was_missing_and_the_answer_not_given(tmp_path: Path) -> None:
    with FakeOpenAIServer(scripts={"S3APParse": UNUSABLE}) as server:
        refused = _ask(tmp_path, server, "--json")
    assert refused.exit_code == 6
    out = json.loads(refused.stdout)
    assert out["social_state"] == "none" and out["answer"] == "" and out["world"] is None
    assert out["answer_error"].startswith("not answered: no social state could be parsed")


def test_allow_without_state_answers_and_says_so(tmp_path: Path) -> None:
    with FakeOpenAIServer(scripts={"S3APParse": UNUSABLE}) as server:
        answered = _ask(tmp_path, server, "--allow-without-state")
        as_json = _ask(tmp_path, server, "--allow-without-state", "--json", "--thread-id", "second")
    assert answered.exit_code == 0, answered.output
    assert answered.stdout.strip()
    assert "answered WITHOUT a social state" in answered.stderr
    assert json.loads(as_json.stdout)["social_state"] == "none"


def test_a_parsed_state_is_named_then_cached(tmp_path: Path) -> None:
    with FakeOpenAIServer(scripts={"S3APParse": good_parse().model_dump()}) as server:
        first = _ask(tmp_path, server, "--json")
        second = _ask(tmp_path, server, "--json", "--thread-id", "again")
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert one["social_state"] == "parsed" and two["social_state"] == "cached"
    assert one["story_hash"] == two["story_hash"] and one["answer"]


@pytest.mark.parametrize(("allow", "calls", "answer"), [(True, 4, "basket"), (False, 3, "")])
def test_the_graph_answers_without_state_only_when_the_context_allows(allow: bool, calls: int, answer: str) -> None:
    bad = "no JSON here"  # a reply no parse can be read from, on every attempt
    model = ScriptedChatModel(replies=[bad, bad, bad, ReasonedAnswer(reasoning="r", answer="basket")])
    out = ask.build().compile().invoke({"narrative": STORY, "question": "Where?"},
                                       context=SWMContext(llm=model, allow_without_state=allow))
    assert out.get("world") is None and out["social_state"] == "none"
    assert model.calls == calls and out["answer"] == answer


def test_modes_without_a_parse_say_the_state_was_not_used() -> None:
    model = ScriptedChatModel(replies=[ReasonedAnswer(reasoning="r", answer="basket")])
    out = ask.build().compile().invoke({"narrative": STORY, "question": "Where?", "mode": "cot"},
                                       context=SWMContext(llm=model, allow_without_state=False))
    assert out["social_state"] == "not used" and out["answer"] == "basket"
