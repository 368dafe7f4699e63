"""LangGraph Studio: `langgraph dev` loads every graph and runs one through its HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from swm.testing import scaled

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = json.loads((ROOT / "langgraph.json").read_text())["graphs"]
pytestmark = pytest.mark.studio


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One `langgraph dev` server for the module (it takes seconds to start)."""
    tmp_path = tmp_path_factory.mktemp("studio")
    exe = shutil.which("langgraph")
    if exe is None:
        pytest.skip("langgraph-cli[inmem] is not installed (dev extra)")
    port = _free_port()
    env = {**os.environ, "SWM_STUDIO_DB": str(tmp_path / "studio.db"), "LANGSMITH_TRACING": "false",
           "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_API_KEY": ""}
    log = open(tmp_path / "studio.log", "w")
    proc = subprocess.Popen([exe, "dev", "--no-browser", "--no-reload", "--port", str(port),
                             "--config", str(ROOT / "langgraph.json")],
                            cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + scaled(90)  # the event: /ok answers
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail("langgraph dev exited:\n" + (tmp_path / "studio.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(f"{url}/ok", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("langgraph dev did not start:\n" + (tmp_path / "studio.log").read_text()[-3000:])
        yield url, tmp_path / "studio.db"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_every_graph_loads_and_ask_runs_through_the_api(studio) -> None:  # type: ignore[no-untyped-def]
    from langgraph_sdk import get_sync_client

    from swm.testing import FakeOpenAIServer

    url, db = studio
    client = get_sync_client(url=url)
    registered = set(json.loads((ROOT / "langgraph.json").read_text())["graphs"])
    assistants = {a["graph_id"] for a in client.assistants.search(limit=100)}
    assert registered <= assistants
    with FakeOpenAIServer() as model:
        thread = client.threads.create()
        out = client.runs.wait(
            thread["thread_id"], "ask",
            input={"narrative": "Sally puts the marble in the basket and leaves. Anne moves it to the box.",
                   "question": "Where will Sally look for the marble?", "mode": "cot"},
            context={"model": model.model_spec, "task": "tomi"},
        )
        assert model.requests == 1
    assert isinstance(out["answer"], str) and out["answer"]
    assert out["usage"]["answer"]["calls"] == 1
    with sqlite3.connect(db) as conn:
        (saved,) = conn.execute("select count(*) from checkpoints where thread_id = ?",
                                (thread["thread_id"],)).fetchone()
    assert saved > 0, "runs are checkpointed in swm's SQLite file"


def test_a_parse_review_waits_on_the_server_and_a_command_through_the_sdk_resumes_it(studio) -> None:  # type: ignore[no-untyped-def]
    """The ask graph's ``parse`` review point over the API: the run stops with the request in the thread's state,
    and ``runs.wait(..., command={"resume": ...})`` answers it, as Studio's resume form does."""
    from langgraph_sdk import get_sync_client

    from swm.testing import FakeOpenAIServer

    url, _ = studio
    client = get_sync_client(url=url)
    story = "Sally puts the marble in the basket and leaves. Anne moves it to the box."
    with FakeOpenAIServer() as model:
        context = {"model": model.model_spec, "task": "tomi", "review": ["parse"]}
        thread = client.threads.create()["thread_id"]
        client.runs.wait(thread, "ask", input={"narrative": story, "question": "Where will Sally look?"},
                         context=context)
        state = client.threads.get_state(thread)
        (pending,) = state["interrupts"]
        assert state["next"] == ["review"] and pending["value"]["review"] == "parse"
        world = pending["value"]["world"]
        world["steps"][-1]["scene"] = "The marble is in the cupboard."
        asked = model.requests
        out = client.runs.wait(thread, "ask", command={"resume": {"world": world}}, context=context)
        assert model.requests == asked + 1  # the answer, and no parse again
    assert out["parse_review"] == "corrected" and out["world"]["steps"][-1]["scene"].endswith("cupboard.")
    assert not client.threads.get_state(thread)["interrupts"]


def test_lifelong_runs_on_the_server_and_streams_progress(studio) -> None:  # type: ignore[no-untyped-def]
    from langgraph_sdk import get_sync_client

    from swm.testing import FakeOpenAIServer

    url, db = studio
    client = get_sync_client(url=url)
    plan = {"run_id": "studio-learn", "cycles": 1, "levels": ["easy"], "families": ["negotiation"],
            "episodes_per_level": 1, "samples_per_task": 1, "max_turns": 2, "out_dir": str(db.parent / "learn")}
    thread = client.threads.create()
    custom: list[tuple[str, dict]] = []  # type: ignore[type-arg]
    with FakeOpenAIServer() as model:
        for part in client.runs.stream(thread["thread_id"], "lifelong", input={"plan": plan},
                                       context={"model": model.model_spec}, stream_mode=["custom", "values"],
                                       stream_subgraphs=True):
            assert part.event != "error", part.data
            if part.event.startswith("custom"):
                custom.append((part.event, part.data))
        # cycle 0: p0 on dev and test; cycle 1: one collected episode, p1 on dev and test; 2 turns each
        assert model.requests == 5 * 2
    state = client.threads.get_state(thread["thread_id"])["values"]
    assert state["phase"] == "done" and state["cycle"] == 2
    assert state["collected"] == 1 and state["evaluated"] == 4
    assert (db.parent / "learn" / "report.md").exists()
    episodes = [data for _, data in custom if data["event"] == "episode"]
    assert len(episodes) == 5 and not any(e["failed"] for e in episodes)
    assert max(e["episodes_done"] for e in episodes) == 5
    assert [d["episodes"] for _, d in custom if d["event"] == "fan_out"] == [2, 1, 2]
    assert [d["cycle"] for _, d in custom if d["event"] == "deploy"] == [0, 1]
    turns = [(namespace, d) for namespace, d in custom if d["event"] == "turn"]
    assert len(turns) == 5 * 2, "every turn of every nested episode reaches the stream"
    assert all("|" in namespace for namespace, _ in turns), "a turn is tagged with the episode branch it came from"


def test_every_graph_declares_input_output_and_a_json_context_schema() -> None:
    import importlib

    from swm.graphs.served import graph_module

    for name, target in json.loads((ROOT / "langgraph.json").read_text())["graphs"].items():
        graph = importlib.import_module(graph_module(target)).graph
        inp, out, ctx = graph.get_input_jsonschema(), graph.get_output_jsonschema(), graph.get_context_jsonschema()
        assert inp["properties"] and out["properties"], name
        objects = {"llm", "chat_models", "store"} & set(ctx["properties"])
        assert not objects, f"{name}: Python objects in the context schema"
        assert "model" in ctx["properties"], name
        if "task" in ctx["properties"]:
            assert "tomi" in ctx["properties"]["task"]["enum"], name
        json.dumps([inp, out, ctx])  # plain JSON, as Studio reads it


def test_the_plan_schema_follows_the_lifelong_loop() -> None:
    from typing import get_args, get_type_hints

    from swm.graphs.lifelong import graph
    from swm.lifelong.plan import DEFAULT_PLAN, LifelongPlan, UpdateMethod
    from swm.lifelong.state import LifelongInput
    from swm.lifelong.update import METHODS
    from swm.tasks.families import TASK_FAMILIES, curriculum_levels, task_families

    assert get_type_hints(LifelongInput)["plan"] is LifelongPlan, "Studio's form is the plan model"
    assert set(DEFAULT_PLAN) == set(LifelongPlan.model_fields), "every plan key is in the input schema Studio shows"
    assert get_args(UpdateMethod) == METHODS
    plan = graph.get_input_jsonschema()["$defs"]["LifelongPlan"]["properties"]
    assert plan["levels"]["items"]["enum"] == list(curriculum_levels()), "the levels are the table's, never typed out"
    families = plan["families"]["items"]
    assert families["enum"] == list(task_families()) and set(TASK_FAMILIES) <= set(families["enum"])


@pytest.mark.parametrize(("graph", "inputs", "field"), [
    ("ask", {"narrative": "Sally leaves.", "question": "Where?", "mode": "bogus"}, "mode"),
    ("ask", {"narrative": "Sally leaves.", "mode": "cot"}, "question"),
    ("episode", {"policies": {"Ann": "plain"}}, "scenario"),
    ("lifelong", {"plan": {"update": "reinforce"}}, "plan.update"),
    ("game", {"policies": {"village": "smart"}}, "policies.village"),
    ("selfplay", {"plan": {"iterations": 0}}, "plan.iterations"),
])
def test_bad_input_names_the_field_before_any_call(graph: str, inputs: dict, field: str) -> None:  # type: ignore[type-arg]
    import importlib

    from swm.context import SWMContext
    from swm.errors import InputError
    from swm.testing import ScriptedChatModel

    llm = ScriptedChatModel(replies=[])
    with pytest.raises(InputError, match=rf"\b{field}: ") as caught:
        importlib.import_module(f"swm.graphs.{graph}").graph.invoke(inputs, context=SWMContext(llm=llm))
    assert isinstance(caught.value, ValueError), "the server passes a ValueError's message to the client"
    assert "\n" not in str(caught.value)


def test_the_server_shows_schemas_and_names_what_went_wrong(studio) -> None:  # type: ignore[no-untyped-def]
    import importlib

    from langgraph_sdk import get_sync_client

    from swm.graphs.served import graph_module

    url, _ = studio
    client = get_sync_client(url=url)
    assistants = {a["graph_id"]: a for a in client.assistants.search(limit=100)}
    for graph_id, assistant in assistants.items():
        schemas = client.assistants.get_schemas(assistant["assistant_id"])
        assert schemas["input_schema"] and schemas["output_schema"] and schemas["context_schema"], graph_id
        local = importlib.import_module(graph_module(GRAPHS[graph_id])).graph.get_context_jsonschema()
        assert set(schemas["context_schema"]["properties"]) == set(local["properties"]), \
            f"{graph_id}: the server shows the graph's own context fields"
    assert "lookahead_width" not in client.assistants.get_schemas(assistants["ask"]["assistant_id"])["context_schema"][
        "properties"], "ask does not show the episode graph's knobs"
    ask = client.assistants.get_schemas(assistants["ask"]["assistant_id"])["input_schema"]
    assert ask["properties"]["mode"]["enum"] == ["vanilla", "cot", "s3ap", "s3ap_only"]
    assert set(ask["required"]) == {"narrative", "question"}
    thread = client.threads.create()
    bad = {"narrative": "Sally leaves.", "question": "Where?", "mode": "bogus"}
    # a key another graph reads (lookahead_width) is let through: the error is the input's
    parts = list(client.runs.stream(thread["thread_id"], "ask", input=bad, context={"model": "none",
                                                                                  "lookahead_width": 2}))
    errors = [p.data for p in parts if p.event == "error"]
    assert errors and errors[0]["error"] == "InputError", parts
    assert "mode: Input should be 'vanilla'" in errors[0]["message"]
    down = {"model": f"m@http://127.0.0.1:{_free_port()}/v1", "max_retries": 0}  # nothing listens there
    parts = list(client.runs.stream(client.threads.create()["thread_id"], "ask", context=down,
                                    input={"narrative": "Sally leaves.", "question": "Where?", "mode": "cot"}))
    errors = [p.data for p in parts if p.event == "error"]
    assert errors and errors[0]["error"] == "ModelUnavailable", parts
    assert "cannot reach the model" in errors[0]["message"], "the one-line reason reaches the client"


def test_a_server_run_reuses_the_parse_a_cli_run_cached(studio, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner
    from langgraph_sdk import get_sync_client

    from swm.cli import main
    from swm.testing import FakeOpenAIServer

    url, db = studio
    story = tmp_path / "story.txt"
    story.write_text("Mia puts the key in the drawer and leaves. Leo moves the key to the shelf.")
    with FakeOpenAIServer() as model:
        cli = CliRunner().invoke(main, ["parse", str(story), "--model", model.model_spec, "--db", str(db)])
        assert cli.exit_code == 0, cli.output
        parsed = model.requests
        assert parsed >= 1
        client = get_sync_client(url=url)
        out = client.runs.wait(client.threads.create()["thread_id"], "ask",
                               input={"narrative": story.read_text(), "question": "Where will Mia look for the key?",
                                      "mode": "s3ap"}, context={"model": model.model_spec})
        assert out["parse_cached"] is True, out
        assert model.requests - parsed == 1, "the server's ask made only its answer call: 0 parse calls"


def test_a_new_thread_is_a_new_lifelong_run_not_the_last_one_replayed(studio) -> None:  # type: ignore[no-untyped-def]
    """Two SDK runs that leave run_id at its default, on two threads with two models, each play their own episodes."""
    from langgraph_sdk import get_sync_client

    from swm.testing import FakeOpenAIServer

    url, db = studio
    client = get_sync_client(url=url)
    plan = {"cycles": 1, "levels": ["easy"], "families": ["negotiation"], "episodes_per_level": 1,
            "samples_per_task": 1, "max_turns": 2}
    runs = []
    for name in ("first", "second"):
        thread = client.threads.create()
        with FakeOpenAIServer() as model:
            client.runs.wait(thread["thread_id"], "lifelong",
                             input={"plan": {**plan, "out_dir": str(db.parent / name)}},
                             context={"model": model.model_spec})
            calls = model.requests
        state = client.threads.get_state(thread["thread_id"])["values"]
        runs.append((thread["thread_id"], calls, state))
    for thread_id, calls, state in runs:
        assert calls == 5 * 2, "each run played its own five episodes on its own model"
        assert state["plan"]["run_id"] == thread_id and state["phase"] == "done"


def test_the_server_refuses_an_unknown_context_key_and_starts_no_model(studio) -> None:  # type: ignore[no-untyped-def]
    """A misspelt context key fails the run with one line naming it, before any node: the server does not
    fall back to the embedded model, so no llama.cpp child is started."""
    psutil = pytest.importorskip("psutil")
    from langgraph_sdk import get_sync_client

    url, _ = studio
    client = get_sync_client(url=url)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    parts = list(client.runs.stream(client.threads.create()["thread_id"], "ask", context={"modle": "gpt-4o"},
                                    input={"narrative": "Sally leaves.", "question": "Where?", "mode": "cot"}))
    errors = [p.data for p in parts if p.event == "error"]
    assert errors and errors[0]["error"] == "InputError", parts
    assert "unknown context key 'modle' (did you mean 'model'?)" in errors[0]["message"]
    assert "\n" not in errors[0]["message"]
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before, "no process was started"
    good = client.assistants.search(graph_id="ask", limit=1)[0]
    assert client.assistants.get_schemas(good["assistant_id"])["context_schema"]["properties"]["model"]


def test_unknown_context_keys_are_named_with_the_closest_valid_one() -> None:
    from swm.errors import InputError
    from swm.graphs import ask
    from swm.graphs.served import context_keys, refuse_unknown_keys

    keys = context_keys(ask.graph)
    assert "model" in keys and "llm" not in keys
    refuse_unknown_keys({"model": "x", "task": "tomi"}, keys)
    with pytest.raises(InputError, match=r"unknown context keys 'modle' \(did you mean 'model'\?\), 'zzz'"):
        refuse_unknown_keys({"modle": "x", "zzz": 1}, keys)
