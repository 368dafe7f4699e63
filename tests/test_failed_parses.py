"""An answer on a parse that failed every check says so, and the repairs that led there changed something.

The state of such an answer is ``failed check`` (not ``parsed``) in the graph, in `swm ask` (one warning line on
stderr) and in `swm bench tom` (a column per mode); a repair is sampled at another temperature and seed, a
repair that repeats an earlier parse stops the loop, and each attempt's tokens and seconds are logged.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from helpers import STORY, good_parse, wrong_agents_parse

from swm.cli import main
from swm.commands.progress import printer
from swm.context import SWMContext
from swm.graphs import ask, parse
from swm.schemas import ReasonedAnswer, S3APParse
from swm.testing import FakeOpenAIServer, ScriptedChatModel
from swm.tom.report import markdown, summarise

FIX = Path(__file__).parent / "fixtures" / "tom"


def failing(name: str) -> S3APParse:
    """A schema-valid parse with an agent the story never names: it fails the check."""
    return S3APParse(agents_names=["Sally", name], socialized_context=[
        {"timestep": "0", "state": "room", "observations": ["Sally: <same_as_state />", f"{name}: none"],
         "actions": ["Sally: none", f"{name}: none"]}])


def _answer() -> ReasonedAnswer:
    return ReasonedAnswer(reasoning="r", answer="basket")


def _ask(model: ScriptedChatModel, **ctx: Any) -> dict[str, Any]:
    return ask.build().compile().invoke({"narrative": STORY, "question": "Where will Sally look?", "mode": "s3ap"},
                                        context=SWMContext(llm=model, **ctx))


# ---- the state an answer stood on ---------------------------------------------------------------------------
def test_an_answer_on_a_parse_that_failed_every_check_is_recorded_as_failed_check() -> None:
    model = ScriptedChatModel(replies=[failing("Ben"), failing("Carl"), failing("Dora"), _answer()])
    out = _ask(model)
    assert model.calls == 4 and out["answer"] == "basket"
    assert out["world"] is not None and not out["report"].ok
    assert out["social_state"] == "failed check"
    assert any("'Ben' does not appear" in p for p in out["parse_problems"])


def test_a_cached_parse_that_failed_its_check_is_failed_check_too_and_a_good_one_stays_parsed() -> None:
    model = ScriptedChatModel(replies=[failing("Ben"), failing("Carl"), failing("Dora"), _answer(), _answer()])
    ctx = SWMContext(llm=model)
    graph = ask.build().compile()
    graph.invoke({"narrative": STORY, "question": "Where?", "mode": "s3ap"}, context=ctx)
    again = graph.invoke({"narrative": STORY, "question": "Where else?", "mode": "s3ap"}, context=ctx)
    assert again["parse_cached"] is True and again["social_state"] == "failed check"
    assert again["parse_attempts"] == []
    good = _ask(ScriptedChatModel(replies=[good_parse(), _answer()]))
    assert good["social_state"] == "parsed"


# ---- repairs that change something --------------------------------------------------------------------------
def test_a_repair_carries_every_error_the_check_found_in_its_prompt() -> None:
    model = ScriptedChatModel(replies=[failing("Ben"), good_parse()])
    out = parse.build().compile().invoke({"narrative": STORY}, context=SWMContext(llm=model))
    repair = model.prompts[1][1]
    assert out["report"].ok
    assert "agent 'Ben' does not appear in the narrative" in repair and '"Ben"' in repair


def test_each_repair_is_sent_another_temperature_and_seed_over_http() -> None:
    parses = iter([failing("Ben"), failing("Carl"), failing("Dora")])
    lock = threading.Lock()

    def next_parse(prompt: str, body: dict[str, Any]) -> dict[str, Any]:
        with lock:
            return next(parses).model_dump()

    with FakeOpenAIServer(scripts={"S3APParse": next_parse}, record=True) as server:
        out = parse.build().compile().invoke({"narrative": STORY}, context=SWMContext(model=server.model_spec))
        bodies = server.bodies()
    assert [(b.get("temperature"), b.get("seed")) for b in bodies] == [(0.0, None), (0.7, 1), (0.7, 2)]
    assert [(a["attempt"], a["temperature"], a["seed"]) for a in out["parse_attempts"]] == [
        (1, 0.0, None), (2, 0.7, 1), (3, 0.7, 2)]


def test_repair_sampling_can_be_switched_off_and_a_reasoning_model_is_sent_no_temperature() -> None:
    with FakeOpenAIServer(scripts={"S3APParse": failing("Ben").model_dump()}, record=True) as server:
        parse.build().compile().invoke({"narrative": STORY}, context=SWMContext(
            model=server.model_spec, repair_temperature=None, repair_seed=None, max_parse_attempts=2))
        same = server.bodies()
        parse.build().compile().invoke({"narrative": STORY + " Sally comes back."}, context=SWMContext(
            model="reasoning:" + server.model_spec, max_parse_attempts=2))
        reasoning = server.bodies()[2:]
    assert [(b.get("temperature"), b.get("seed")) for b in same] == [(0.0, None), (0.0, None)]
    assert [("temperature" in b, b.get("seed")) for b in reasoning] == [(False, None), (False, 1)]


def test_a_scripted_model_sees_the_repair_temperature_and_no_seed_it_cannot_take() -> None:
    model = ScriptedChatModel(replies=[failing("Ben"), good_parse()])
    parse.build().compile().invoke({"narrative": STORY}, context=SWMContext(llm=model, repair_temperature=0.9))
    assert model.settings == [{}, {"temperature": 0.9}]


@pytest.mark.parametrize("spacing", ["same", "respaced"])
def test_a_repair_that_repeats_an_earlier_parse_stops_the_loop(spacing: str) -> None:
    again = wrong_agents_parse()
    if spacing == "respaced":
        again.socialized_context[0].state = "  room \n"
    model = ScriptedChatModel(replies=[wrong_agents_parse(), again, good_parse()])
    out = parse.build().compile().invoke({"narrative": STORY}, context=SWMContext(llm=model, max_parse_attempts=3))
    assert model.calls == 2, "the third attempt was not paid for"
    first, second = out["parse_attempts"]
    assert second["repeats"] == 1 and first["repeats"] is None and first["digest"] == second["digest"]
    assert out["world"] is not None and any("Sally_1" in p for p in out["parse_problems"])


def test_a_repair_with_another_failing_parse_goes_on_to_the_last_attempt() -> None:
    model = ScriptedChatModel(replies=[failing("Ben"), failing("Carl"), failing("Dora")])
    out = parse.build().compile().invoke({"narrative": STORY}, context=SWMContext(llm=model))
    assert model.calls == 3 and [a["repeats"] for a in out["parse_attempts"]] == [None, None, None]
    assert len({a["digest"] for a in out["parse_attempts"]}) == 3


# ---- per-attempt tokens and seconds -------------------------------------------------------------------------
def test_each_attempt_logs_its_tokens_seconds_and_verdict() -> None:
    model = ScriptedChatModel(replies=[failing("Ben"), good_parse()])
    out = parse.build().compile().invoke({"narrative": STORY}, context=SWMContext(llm=model))
    one, two = out["parse_attempts"]
    assert [one["prompt_tokens"], two["prompt_tokens"]] == [len(text) // 4 for _, text in model.prompts]
    assert one["completion_tokens"] > 0 and one["seconds"] >= 0
    assert one["prompt_tokens"] + two["prompt_tokens"] == out["usage"]["parse"]["prompt_tokens"]
    assert (one["errors"], one["first_problem"]) == (1, "agent 'Ben' does not appear in the narrative")
    assert (two["errors"], two["first_problem"], two["temperature"]) == (0, "", 0.7)


def test_the_progress_line_of_each_attempt_gives_its_tokens_seconds_and_what_the_check_found() -> None:
    seen: list[str] = []
    listen = printer(False, echo=seen.append)
    assert listen is not None
    base = {"prompt_tokens": 812, "completion_tokens": 1536, "seconds": 37.21, "digest": "a"}
    first = {**base, "attempt": 1, "temperature": 0.0, "seed": None, "errors": 3, "repeats": None}
    second = {**base, "attempt": 2, "temperature": 0.7, "seed": 1, "errors": 3, "repeats": 1}
    listen("done", ("check", {"parse_done": False, "parse_attempts": [first], "feedback": "Issues:\n- x"}))
    listen("done", ("check", {"parse_done": True, "parse_attempts": [first, second]}))
    lines = [line.split("] ", 1)[1] for line in seen]
    assert lines == ["parse attempt 1 (temperature 0): tokens 812+1536, 37.2 s; failed the check: 3 error(s)",
                     "parse attempt 2 (temperature 0.7, seed 1): tokens 812+1536, 37.2 s; the same parse as "
                     "attempt 1: repairs stopped"]


# ---- swm ask ------------------------------------------------------------------------------------------------
def _cli_ask(tmp_path: Path, server: FakeOpenAIServer, *extra: str) -> Result:
    story = tmp_path / "story.txt"
    story.write_text(STORY)
    return CliRunner().invoke(main, ["ask", "--story", str(story), "--question", "Where will Sally look?",
                                     "--mode", "s3ap", "--task", "tomi", "--model", server.model_spec,
                                     "--db", str(tmp_path / "swm.db"), *extra])


def test_swm_ask_warns_in_one_line_naming_what_failed_and_the_json_says_failed_check(tmp_path: Path) -> None:
    with FakeOpenAIServer(scripts={"S3APParse": failing("Ben").model_dump()}) as server:
        told = _cli_ask(tmp_path, server)
        as_json = _cli_ask(tmp_path, server, "--json", "--thread-id", "again", "--no-progress")
        calls = server.stats()["by_tool"]
    assert told.exit_code == 0, told.output
    warnings = [line for line in told.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: the answer stands on a parse that failed its check (after 2 attempt(s), the "
                        "repairs stopped when attempt 2 repeated attempt 1): agent 'Ben' does not appear in the "
                        "narrative"]
    progress = [line.split("] ", 1)[1] for line in told.stderr.splitlines() if line.startswith("[")]
    assert re.fullmatch(r"parse attempt 1 \(temperature 0\): tokens \d+\+\d+, \d+\.\d s; failed the check: "
                        r"1 error\(s\)", progress[1]), progress
    assert progress[3].startswith("parse attempt 2 (temperature 0.7, seed 1): tokens ")
    assert progress[3].endswith("; the same parse as attempt 1: repairs stopped")
    assert calls["S3APParse"] == 2, "the repeated parse stopped the loop before a third call"
    out = json.loads(as_json.stdout)
    assert out["social_state"] == "failed check" and out["answer"] and out["parse_cached"] is True
    assert as_json.stderr.count("warning:") == 1 and "(from the cache)" in as_json.stderr
    from swm.checkpoints import open_store

    rows = list(open_store(tmp_path / "swm.db").rows("select social_state from swm_asks order by thread_id"))
    assert [r["social_state"] for r in rows] == ["failed check", "failed check"]


def test_swm_ask_says_nothing_extra_for_a_parse_that_passed(tmp_path: Path) -> None:
    with FakeOpenAIServer(scripts={"S3APParse": good_parse().model_dump()}) as server:
        told = _cli_ask(tmp_path, server, "--no-progress")
    assert told.exit_code == 0 and "warning:" not in told.stderr


def test_the_results_browser_says_the_answer_stood_on_a_parse_that_failed(tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from swm.ui import create_app

    with FakeOpenAIServer(scripts={"S3APParse": failing("Ben").model_dump()}) as server:
        told = _cli_ask(tmp_path, server, "--thread-id", "failed-question", "--no-progress")
    assert told.exit_code == 0, told.output
    page = TestClient(create_app(str(tmp_path / "swm.db"))).get("/runs/failed-question").text
    state = page[page.index('id="social-state"'):]
    assert state.split("</td>")[0].endswith('used, but it failed its check on every attempt made (its problems '
                                           'below)</span>')
    assert "error: agent &#39;Ben&#39; does not appear in the narrative" in page
    assert 'href="/state/parse/' in page


# ---- swm bench tom ------------------------------------------------------------------------------------------
def test_swm_bench_tom_counts_answers_on_failed_parses_per_mode(tmp_path: Path) -> None:
    bad = {"agents_names": ["Zed"], "socialized_context": [
        {"timestep": "0", "state": "room", "observations": ["Zed: none"], "actions": ["Zed: none"]}]}
    with FakeOpenAIServer(scripts={"S3APParse": bad}) as server:
        result = CliRunner().invoke(main, [
            "bench", "tom", "--benchmark", "tomi", "--data", str(FIX / "tomi_mini.txt"), "--modes", "cot,s3ap",
            "--model", server.model_spec, "--db", str(tmp_path / "b.db"), "--thread-id", "run", "--out",
            str(tmp_path / "out"), "--concurrency", "1", "--no-progress"])
        calls = server.stats()["by_tool"]
    assert result.exit_code == 0, result.output
    assert calls["S3APParse"] == 4, "2 stories, each stopped when its repair repeated the first parse"
    data = json.loads((tmp_path / "out" / "tom_tomi.json").read_text())
    by_mode = {r["mode"]: r for r in data["summary"]["overall"]}
    assert (by_mode["s3ap"]["answers_on_failed_parses"], by_mode["s3ap"]["answers_on_failed_parses_rate"]) == (5, 1.0)
    assert by_mode["cot"]["answers_on_failed_parses"] is None
    assert {r["social_state"] for r in data["rows"] if r["mode"] == "s3ap"} == {"failed check"}
    assert "| on failed parses |" in result.output
    assert re.search(r"\| s3ap \| 5 \|.*\| 5 \(1\.000\) \|", result.output)
    assert re.search(r"\| cot \| 5 \|.*\| - \|", result.output)
    header = (tmp_path / "out" / "tom_tomi.csv").read_text().splitlines()[0].split(",")
    assert {"answers_on_failed_parses", "answers_on_failed_parses_rate", "answers_without_state"} <= set(header)


def test_the_summary_counts_failed_checks_and_missing_states_and_names_rows_that_recorded_none() -> None:
    def row(state: str | None, mode: str = "s3ap") -> dict[str, Any]:
        return {"mode": mode, "qtype": "first_order", "kind": "location", "correct": 1, "value": 1.0, "exact": 1,
                "loose": 1, "strict": 1, "calls": 1, "parse_calls": 0, "qa_calls": 1, "prompt_tokens": 1,
                "completion_tokens": 1, "model_seconds": 0.1, "parse_cached": 0, "story_hash": "h",
                "social_state": state}

    rows = [row("failed check"), row("none"), row("parsed"), row("cached"), row(None), row("not used", "cot")]
    summary = summarise(rows, ["s3ap", "cot"])
    s3ap, cot = summary["overall"]
    assert (s3ap["answers_on_failed_parses"], s3ap["answers_on_failed_parses_rate"]) == (2, 0.4)
    assert s3ap["answers_without_state"] == 1 and s3ap["social_state_unknown"] == 1
    assert cot["answers_on_failed_parses"] is None
    text = markdown(summary, "tomi", {})
    assert "| 2 (0.400) [1 none] |" in text
    assert "1 S3AP-mode answer(s) were stored before the social state they stood on was recorded" in text


def test_swm_ask_takes_off_for_the_repair_sampling_and_refuses_a_word_that_is_not_a_number(tmp_path: Path) -> None:
    with FakeOpenAIServer(scripts={"S3APParse": failing("Ben").model_dump()}, record=True) as server:
        told = _cli_ask(tmp_path, server, "--repair-temperature", "off", "--repair-seed", "off", "--no-progress")
        parses = [b for b in server.bodies() if b["tools"][0]["function"]["name"] == "S3APParse"]
        refused = _cli_ask(tmp_path, server, "--repair-temperature", "hot", "--thread-id", "hot")
    assert told.exit_code == 0, told.output
    assert [(b.get("temperature"), b.get("seed")) for b in parses] == [(0.0, None), (0.0, None)]
    assert refused.exit_code == 2 and "'hot' is neither a number (float) nor 'off'" in refused.output
