"""`swm bench tom` end to end with scripted models: exact calls per question, resume, the CLI path."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tom_scripted import respond

from swm.checkpoints import open_store
from swm.context import SWMContext
from swm.graphs import ask
from swm.testing import ScriptedChatModel
from swm.tom.loaders import load_benchmark
from swm.tom.report import summarise
from swm.tom.runner import run_benchmark
from swm.validation import validate_s3ap

FIX = Path(__file__).parent / "fixtures" / "tom"
STABLE = ("mode", "qtype", "n", "acc", "ci_low", "ci_high", "exact", "loose", "calls_per_q", "parse_calls_per_q",
          "qa_calls_per_q", "tokens_per_q", "distinct_stories", "parses_from_cache", "answer_errors")


def _ctx(db: str | Path, model: Any) -> SWMContext:
    return SWMContext(llm=model, task="tomi", store=open_store(db))


def _stable(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: r[k] for k in STABLE} for r in summary["overall"] + summary["by_type"]]


def test_scripted_parse_is_valid() -> None:
    from tom_scripted import valid_parse

    story = load_benchmark("tomi", FIX / "tomi_mini.txt")[0].story
    report = validate_s3ap(valid_parse(story).model_dump())
    assert report.ok, report.feedback()


@pytest.mark.parametrize("concurrency", [1, 3])
def test_exact_calls_per_question(tmp_path: Path, concurrency: int) -> None:
    items = load_benchmark("tomi", FIX / "tomi_mini.txt")  # 5 questions on 2 distinct stories
    model = ScriptedChatModel(respond=respond)
    ctx = _ctx(tmp_path / "b.db", model)
    result = run_benchmark(items, ["cot", "s3ap"], ctx, tmp_path / "b.db", "run", concurrency=concurrency,
                           progress=False, ask_graph=ask.build())
    tools = Counter(tool for tool, _ in model.prompts)
    assert tools == {"ReasonedAnswer": 10, "S3APParse": 2}  # CoT 5 × 1; S3AP 5 QA + 1 parse per story
    rows = result["rows"]
    cot = [r for r in rows if r["mode"] == "cot"]
    s3ap = [r for r in rows if r["mode"] == "s3ap"]
    assert all(r["calls"] == 1 and r["qa_calls"] == 1 and r["parse_calls"] == 0 for r in cot)
    assert all(r["qa_calls"] == 1 for r in s3ap)
    per_story = Counter()
    for r in s3ap:
        per_story[r["story_hash"]] += r["parse_calls"]
    assert sorted(per_story.values()) == [1, 1]
    assert sum(r["parse_cached"] for r in s3ap) == 3
    summary = summarise(rows, ["cot", "s3ap"])
    by_mode = {r["mode"]: r for r in summary["overall"]}
    assert by_mode["cot"]["calls_per_q"] == 1.0 and by_mode["s3ap"]["calls_per_q"] == 1.4
    assert by_mode["s3ap"]["parse_calls_per_q"] == 0.4 and by_mode["s3ap"]["parses_from_cache"] == 3
    assert by_mode["s3ap"]["distinct_stories"] == 2
    # the scripted answer (the last container named) is right on reality, memory-free and no-ToM items
    assert by_mode["cot"]["acc"] == pytest.approx(3 / 5)
    assert all(r["prompt_tokens"] > 0 for r in rows)


def test_killed_run_resumes_without_repeating_work(tmp_path: Path, db_target: str | Path) -> None:
    items = load_benchmark("tomi", FIX / "tomi_mini.txt")
    modes = ["cot", "s3ap"]
    reference = ScriptedChatModel(respond=respond)
    ref_summary = summarise(run_benchmark(items, modes, _ctx(tmp_path / "ref.db", reference), tmp_path / "ref.db",
                                          "run", progress=False, ask_graph=ask.build())["rows"], modes)

    qa_calls = {"n": 0}

    def crashing(prompt: str, tool: str | None) -> Any:
        if tool == "ReasonedAnswer":
            qa_calls["n"] += 1
            if qa_calls["n"] == 6:  # the first S3AP answer, after its story's parse finished
                return RuntimeError("killed")
        return respond(prompt, tool)

    db = db_target
    first = ScriptedChatModel(respond=crashing)
    with pytest.raises(RuntimeError, match="killed"):
        run_benchmark(items, modes, _ctx(db, first), db, "run", progress=False, ask_graph=ask.build())
    assert open_store(db).count("tom_results") == 5  # the CoT half finished and was stored
    assert Counter(t for t, _ in first.prompts)["S3APParse"] == 1

    second = ScriptedChatModel(respond=respond)
    resumed = run_benchmark(items, modes, _ctx(db, second), db, "run", progress=False, ask_graph=ask.build())
    # no CoT item again; the interrupted item resumes at its answer node (its parse is checkpointed)
    assert Counter(t for t, _ in second.prompts) == {"ReasonedAnswer": 5, "S3APParse": 1}
    assert resumed["skipped"] == 5
    assert _stable(summarise(resumed["rows"], modes)) == _stable(ref_summary)

    third = ScriptedChatModel(respond=respond)
    again = run_benchmark(items, modes, _ctx(db, third), db, "run", progress=False, ask_graph=ask.build())
    assert third.calls == 0 and _stable(summarise(again["rows"], modes)) == _stable(ref_summary)


# ---- the CLI, against a scripted OpenAI-compatible server on loopback -------------------------
class ScriptedServer:
    """An OpenAI-compatible chat endpoint answering with `tom_scripted.respond`; it can hold request K."""

    def __init__(self, hold_at: int | None = None) -> None:
        self.seen: Counter[str] = Counter()
        self.hold_at = hold_at
        self.reached = threading.Event()
        self.release = threading.Event()
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = "\n".join(str(m.get("content") or "") for m in body["messages"])
                tool = body["tools"][0]["function"]["name"] if body.get("tools") else None
                with lock:
                    outer.seen[tool or "text"] += 1
                    number = sum(outer.seen.values())
                if outer.hold_at is not None and number == outer.hold_at:
                    outer.reached.set()
                    outer.release.wait(60)  # the client is killed meanwhile
                    return
                value = respond(prompt, tool)
                message = {"role": "assistant", "content": None, "tool_calls": [{
                    "id": f"call_{number}", "type": "function",
                    "function": {"name": tool, "arguments": json.dumps(value.model_dump())}}]}
                reply = {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted",
                         "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                         "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 7,
                                   "total_tokens": len(prompt) // 4 + 7}}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.spec = f"scripted@http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted_server() -> Iterator[tuple[str, Counter[str]]]:
    server = ScriptedServer()
    try:
        yield server.spec, server.seen
    finally:
        server.close()


def _bench_args(spec: str, tmp_path: Path, db: str, out: str, thread: str, concurrency: str = "2") -> list[str]:
    return ["bench", "tom", "--benchmark", "tomi", "--data", str(FIX / "tomi_mini.txt"), "--modes", "cot,s3ap",
            "--model", spec, "--db", str(tmp_path / db), "--thread-id", thread, "--out", str(tmp_path / out),
            "--concurrency", concurrency, "--no-progress"]


def test_cli_bench_tom_writes_tables_and_resumes(tmp_path: Path, scripted_server: tuple[str, Counter[str]]) -> None:
    from swm.cli import main

    spec, seen = scripted_server
    out = tmp_path / "out"
    args = _bench_args(spec, tmp_path, "cli.db", "out", "cli-run")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert seen == {"ReasonedAnswer": 10, "S3APParse": 2}
    assert "| cot | 5 | 0.600 |" in result.output and "| s3ap | 5 |" in result.output
    table = (out / "tom_tomi.csv").read_text()
    assert "cot,all,5,0.6," in table
    data = json.loads((out / "tom_tomi.json").read_text())
    by_mode = {r["mode"]: r for r in data["summary"]["overall"]}
    assert by_mode["s3ap"]["calls_per_q"] == 1.4 and by_mode["s3ap"]["tokens_per_q"] > 0
    assert (out / "tom_tomi.md").read_text().startswith("# tomi")
    assert "scorer rule: s3ap-repo" in result.output and "- scorer rule: s3ap-repo" in result.output
    assert {r["rule"] for r in data["rows"]} == {"s3ap-repo"}
    assert all(set(json.loads(r["variants"])) == {"swm-contains", "swm-strict", "exact"} for r in data["rows"])
    assert "| cot | swm-contains |" in result.output  # the named readings beside the headline
    assert "prompt protocol: paper" in result.output
    assert "- prompt protocol: paper (the paper's appendix wording, the S3AP repository's task" in result.output
    assert f"- split: sample, not the paper's split: all 5 questions of {FIX / 'tomi_mini.txt'}" in result.output
    assert data["header"]["split"].startswith("sample, not the paper's split")
    runs = list(open_store(tmp_path / "cli.db").rows("select split from tom_runs where run = ?", ["cli-run"]))
    assert runs[0]["split"] == data["header"]["split"]  # the run record names it too
    assert {r["prompt_protocol"] for r in data["rows"]} == {"paper"}
    assert {json.loads(r["prompts"])["qa"] for r in data["rows"]} == {"qa_paper_tomi@v1"}

    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert sum(seen.values()) == 12  # nothing ran twice
    assert (out / "tom_tomi.csv").read_text() == table
    report = CliRunner().invoke(main, [*args, "--report-only"])
    assert report.exit_code == 0 and "10 of 10 answers finished" in report.output
    assert sum(seen.values()) == 12 and (out / "tom_tomi.csv").read_text() == table


def test_cli_bench_tom_sends_the_appendix_wording_by_default_and_the_repositorys_by_name(
        tmp_path: Path, scripted_server: tuple[str, Counter[str]]) -> None:
    """The user's path: the default run records the appendix parser prompt and manual; --prompts repo the older
    ones; resuming a thread under the other protocol is refused."""
    from swm.cli import main

    spec, _ = scripted_server
    sent = {}
    for protocol in ("paper", "repo"):
        args = [*_bench_args(spec, tmp_path, "p.db", protocol, protocol), "--modes", "s3ap", "--n", "2"]
        result = CliRunner().invoke(main, [*args, *(["--prompts", protocol] if protocol == "repo" else [])])
        assert result.exit_code == 0, result.output
        rows = json.loads((tmp_path / protocol / "tom_tomi.json").read_text())["rows"]
        sent[protocol] = {v for r in rows for k, v in json.loads(r["prompts"]).items() if k != "protocol"}
    assert {"parse_paper@v2", "s3ap_manual@v2", "s3ap_context_schema@v1"} <= sent["paper"]
    assert {"parse_paper@v1", "s3ap_manual@v1", "s3ap_schema@v1"} <= sent["repo"]
    again = CliRunner().invoke(main, [*_bench_args(spec, tmp_path, "p.db", "repo", "repo"), "--modes", "s3ap", "--n",
                                      "2"])
    assert again.exit_code != 0 and "prompt_protocol=repo, not paper" in again.output


def test_cli_bench_tom_paper_split_on_the_shared_hitom_sample(tmp_path: Path, shared_dir: Path,
                                                              scripted_server: tuple[str, Counter[str]]) -> None:
    from swm.cli import main

    spec, seen = scripted_server
    data = shared_dir / "benchmarks" / "hitom" / "hitom_cotp_sample300.jsonl"
    args = ["bench", "tom", "--benchmark", "hitom", "--data", str(data), "--paper-split", "--n", "3", "--modes", "cot",
            "--model", spec, "--db", str(tmp_path / "split.db"), "--out", str(tmp_path / "split"), "--no-progress",
            "--prompts", "swm"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "paper split: hitom: matched by identifier, 52 of 100 records (PARTIAL" in result.output
    assert "- split: paper split: hitom: matched by identifier" in result.output  # the report header
    assert "- prompt protocol: swm (swm's own wording)" in result.output and seen["ReasonedAnswer"] == 3


def test_cli_bench_parse_gold_scores_one() -> None:
    from swm.cli import main

    result = CliRunner().invoke(main, ["bench", "parse", "--stories", "8", "--json"])
    assert result.exit_code == 0, result.output
    table = {r["source"]: r for r in json.loads(result.output)["table"]}
    assert table["gold"]["overall"] == 1.0 and table["gold"]["perfect"] == 8
    assert all(r["overall"] < 1.0 for name, r in table.items() if name.startswith("corrupted:"))


def test_bench_commands_have_help() -> None:
    from swm.cli import main

    for command in (["bench", "tom", "--help"], ["bench", "parse", "--help"]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 0 and "Usage" in result.output


def test_killed_cli_process_resumes_to_the_same_table(tmp_path: Path) -> None:
    """Kill -9 `swm bench tom` while its 8th model call is in flight; the rerun gives the same table."""
    import os
    import signal
    import subprocess
    import sys

    from swm.cli import main

    reference = ScriptedServer()
    try:
        done = CliRunner().invoke(main, _bench_args(reference.spec, tmp_path, "ref.db", "ref", "run", "1"))
        assert done.exit_code == 0, done.output
    finally:
        reference.close()
    server = ScriptedServer(hold_at=8)  # 5 CoT answers, then the S3AP parse and answers of story 1
    try:
        command = [sys.executable, "-m", "swm",
                   *_bench_args(server.spec, tmp_path, "kill.db", "kill", "run", "1")]
        env = {**os.environ, "LANGSMITH_TRACING": "false"}
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            assert server.reached.wait(120), process.stderr.read().decode() if process.poll() is not None else ""
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(30)
        server.release.set()
        assert not (tmp_path / "kill" / "tom_tomi.csv").exists()
        partial = CliRunner().invoke(main, [*_bench_args(server.spec, tmp_path, "kill.db", "kill", "run", "1"),
                                            "--report-only"])
        assert partial.exit_code == 0 and "6 of 10 answers finished" in partial.output, partial.output
        resumed = CliRunner().invoke(main, _bench_args(server.spec, tmp_path, "kill.db", "kill", "run", "1"))
        assert resumed.exit_code == 0, resumed.output
        # 12 calls in all, plus the one that was in flight when the process died
        assert sum(server.seen.values()) == 13
    finally:
        server.close()
    stable = [line.split(",")[:15] for line in (tmp_path / "kill" / "tom_tomi.csv").read_text().splitlines()]
    expected = [line.split(",")[:15] for line in (tmp_path / "ref" / "tom_tomi.csv").read_text().splitlines()]
    assert stable == expected


def test_cli_bench_tom_on_simulated_stories(tmp_path: Path, scripted_server: tuple[str, Counter[str]]) -> None:
    from swm.cli import main

    spec, seen = scripted_server
    args = ["bench", "tom", "--benchmark", "sim", "--n", "2", "--modes", "s3ap", "--model", spec,
            "--db", str(tmp_path / "sim.db"), "--out", str(tmp_path / "sim"), "--no-progress", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    overall = json.loads(result.output[result.output.index("{"):])["summary"]["overall"][0]
    assert overall["distinct_stories"] == 2 and seen["S3APParse"] == 2
    assert seen["ReasonedAnswer"] == overall["n"] >= 8


def test_cli_bench_parse_with_a_parser_and_the_judge(tmp_path: Path,
                                                     scripted_server: tuple[str, Counter[str]]) -> None:
    from swm.cli import main

    spec, seen = scripted_server
    args = ["bench", "parse", "--stories", "2", "--corruptions", "leak", "--parser", spec, "--judge",
            "--judge-model", spec, "--db", str(tmp_path / "p.db"), "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    table = {r["source"]: r for r in json.loads(result.output[result.output.index("{"):])["table"]}
    parsed = table[f"parser:{spec}"]
    assert parsed["structural"] == 1.0 and parsed["observation"] < 1.0  # the scripted parse is valid but blind
    assert table["gold"]["judge_observation"] == 0.5 and table["gold"]["judge_overall"] == 0.65
    assert seen["S3APParse"] == 2 and seen["JudgeVerdict"] == 2 * len(table)

    rows = tmp_path / "parses.jsonl"
    rows.write_text(json.dumps({"id": "x", "story": "Ann entered the den.", "parse": {"agents_names": ["Ann"],
                    "socialized_context": [{"timestep": "0", "state": "none", "observations": ["Ann: none"],
                                            "actions": ["Ann: enters the den"]}]}}) + "\n")
    judged = CliRunner().invoke(main, ["bench", "parse", "--data", str(rows), "--judge-model", spec,
                                       "--db", str(tmp_path / "p.db"), "--json"])
    assert judged.exit_code == 0, judged.output
    result_rows = json.loads(judged.output[judged.output.index("{"):])["results"]
    assert result_rows[0]["judge_observation"] == 0.5 and result_rows[0]["overall"] == pytest.approx(0.65)
