"""The CLI against a real OpenAI-compatible HTTP server on loopback: call counts, no leaked secrets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from swm.cli import main
from swm.testing import FakeOpenAIServer

STORY = "Sally and Anne are in the room. Sally puts the ball in the basket. Sally leaves. Anne moves the ball."
SECRET = "sk-test-DO-NOT-STORE-4f1c9e"


def test_parse_then_two_questions_cost_one_parse_and_two_answers(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    story = tmp_path / "story.txt"
    story.write_text(STORY)
    db = tmp_path / "run.db"
    runner = CliRunner()
    with FakeOpenAIServer(record=True) as server:
        model = ["--model", server.model_spec, "--db", str(db)]
        parsed = runner.invoke(main, ["parse", str(story), "--task", "tomi", *model])
        assert parsed.exit_code == 0, parsed.output
        s3ap = json.loads(parsed.stdout)
        assert s3ap["agents_names"] == ["Sally", "Anne"]
        assert server.requests == 1
        for question in ("Where will Sally look for the ball?", "Where is the ball?"):
            asked = runner.invoke(main, ["ask", "--story", str(story), "--question", question, "--task", "tomi",
                                         "--json", *model])
            assert asked.exit_code == 0, asked.output
            out = json.loads(asked.stdout)
            assert out["parse_cached"] is True and out["answer"]
        assert server.requests == 3, "one parse for the story, then one QA call per question"
        sent = [b.get("model") for b in server.bodies()]
    assert set(sent) == {server.model_spec.split("@")[0]}
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("run.db*"))
    assert SECRET.encode() not in stored, "the API key must never land in checkpoints or the store"


def test_parse_perspective_and_unknown_agent(tmp_path: Path) -> None:
    story = tmp_path / "story.txt"
    story.write_text(STORY)
    with FakeOpenAIServer() as server:
        base = ["parse", str(story), "--model", server.model_spec, "--db", str(tmp_path / "p.db")]
        ok = CliRunner().invoke(main, [*base, "--perspective", "anne"])
        assert ok.exit_code == 0, ok.output
        assert ok.stdout.startswith("t=0: ")
        unknown = CliRunner().invoke(main, [*base, "--perspective", "Bob"])
    assert unknown.exit_code == 2
    assert "unknown agent 'Bob'" in unknown.output and "known agents: Sally, Anne" in unknown.output


def test_graphs_prints_mermaid_for_every_registered_graph(tmp_path: Path) -> None:
    registered = json.loads((Path(__file__).resolve().parents[1] / "langgraph.json").read_text())["graphs"]
    result = CliRunner().invoke(main, ["graphs", "--json", "--out", str(tmp_path / "png")])
    assert result.exit_code == 0, result.output
    drawn = json.loads(result.stdout)
    assert set(drawn) == set(registered)
    assert all("graph TD" in m for m in drawn.values())
    pytest.importorskip("pygraphviz")
    assert {p.stem for p in (tmp_path / "png").glob("*.png")} == set(registered)


def test_openai_env_vars_route_every_role_without_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    story = tmp_path / "story.txt"
    story.write_text(STORY)
    with FakeOpenAIServer(record=True) as server:
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        result = CliRunner().invoke(main, ["ask", "--story", str(story), "--question", "Where?", "--mode", "cot",
                                           "--db", str(tmp_path / "e.db")])
        assert result.exit_code == 0, result.output
        assert "embedded" not in result.output
        assert [b["model"] for b in server.bodies()] == ["gpt-4o-mini"]
