"""Endpoint keys: each endpoint gets only its own key, and no key in a URL is ever stored or printed."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from swm.cli import main
from swm.credentials import MASK, endpoint_key, may_hold_secret, redact_spec, redact_text, redact_url, split_credentials
from swm.llm import call_model, make_chat_model
from swm.testing import FakeOpenAIServer

KEY = "sk-SEKRET-0123456789"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        fake.configure(retry_after_ms=1)
        yield fake


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "SWM_API_KEY_127_0_0_1"):
        monkeypatch.delenv(name, raising=False)


def keyed(server: FakeOpenAIServer, how: str) -> str:
    host = server.base_url.removeprefix("http://")
    return {"password": f"fake@http://swm:{KEY}@{host}", "user": f"fake@http://{KEY}@{host}",
            "query": f"fake@{server.base_url}?api_key={KEY}"}[how]


@pytest.mark.parametrize("url, shown", [
    ("https://user:PWX@host.example/v1", "https://user:***@host.example/v1"),
    ("https://TKX@host.example/v1", "https://***@host.example/v1"),
    ("https://host.example/v1?api_key=PWX&x=1", "https://host.example/v1?api_key=***&x=1"),
    ("https://host.example/v1?token=PWX", "https://host.example/v1?token=***"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
])
def test_urls_are_redacted(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "X" not in redact_spec(f"m@{url}")
    assert redact_text(f"see {url}, then") == f"see {shown}, then"
    clean, key = split_credentials(url)
    assert key in ("PWX", "TKX", None) and "X" not in clean


def test_openai_key_goes_only_to_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert endpoint_key("https://api.openai.com/v1") == ("https://api.openai.com/v1", "sk-openai")
    assert endpoint_key("http://10.0.0.5:8000/v1")[1] is None
    assert endpoint_key("https://api.openai.com.evil.example/v1")[1] is None
    monkeypatch.setenv("OPENAI_BASE_URL", "https://proxy.example/v1")
    assert endpoint_key("https://proxy.example/v1")[1] == "sk-openai"
    monkeypatch.setenv("SWM_API_KEY_10_0_0_5", "sk-vllm")
    assert endpoint_key("http://10.0.0.5:8000/v1")[1] == "sk-vllm"


def test_a_name_at_url_endpoint_never_receives_the_openai_key(server: FakeOpenAIServer,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    call_model(make_chat_model(server.model_spec), "Hello?")
    assert "Bearer sk-openai" not in server.stats()["by_auth"]
    monkeypatch.setenv("SWM_API_KEY_127_0_0_1", "sk-local")
    call_model(make_chat_model(server.model_spec), "Hello?")
    assert server.stats()["by_auth"].get("Bearer sk-local") == 1
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)  # OpenAI's key goes where the user pointed OpenAI
    monkeypatch.delenv("SWM_API_KEY_127_0_0_1")
    call_model(make_chat_model("fake"), "Hello?")
    assert server.stats()["by_auth"].get("Bearer sk-openai") == 1


@pytest.mark.parametrize("how", ["password", "user", "query"])
def test_a_key_in_the_url_is_sent_as_the_key_and_nowhere_else(server: FakeOpenAIServer, how: str) -> None:
    call_model(make_chat_model(keyed(server, how)), "Hello?")
    assert server.stats()["by_auth"] == {f"Bearer {KEY}": 1}


def _leaks(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]


def test_no_key_in_an_endpoint_url_reaches_disk_or_output(server: FakeOpenAIServer, tmp_path: Path) -> None:
    """bench tom (parse cache, results, report), bench sotopia (episodes, turns, judgements, export), an error."""
    runner = CliRunner()
    db = tmp_path / "run.db"
    tom = runner.invoke(main, ["bench", "tom", "--benchmark", "sim", "--n", "1", "--modes", "s3ap", "--no-progress",
                               "--model", keyed(server, "password"), "--db", str(db), "--thread-id", "t",
                               "--out", str(tmp_path / "tom")])
    sotopia = runner.invoke(main, ["bench", "sotopia", "--data", "shipped", "--policies", "foresee", "--n", "1",
                                   "--max-turns", "2", "--no-progress", "--model", keyed(server, "query"),
                                   "--db", str(db), "--thread-id", "s", "--out", str(tmp_path / "sotopia")])
    assert tom.exit_code == 0 and sotopia.exit_code == 0, tom.output + sotopia.output
    server.configure(faults=["500"] * 2)
    story = tmp_path / "story.txt"
    story.write_text("Ann put the key in the box. Ann left.")
    failed = runner.invoke(main, ["ask", "--story", str(story), "--question", "Where?", "--mode", "cot",
                                  "--model", keyed(server, "user"), "--max-retries", "1", "--db", str(db)])
    assert failed.exit_code == 3 and "HTTP 500" in failed.output
    assert server.stats()["by_auth"] == {f"Bearer {KEY}": server.stats()["attempts"]}
    assert all(KEY not in r.output for r in (tom, sotopia, failed))
    assert _leaks(tmp_path) == []
    from swm.checkpoints import open_store

    models = [r["model"] for r in open_store(db).rows("select distinct parser as model from parses")]
    assert models and all("swm:***@127.0.0.1" in m for m in models)


def test_a_key_a_server_quotes_back_is_hidden_everywhere_swm_writes(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway's refusal quoting the bearer key (echo_key): not on stderr, not in the store, exports or report."""
    from bench.extra_graphs import SCRIPTS
    from swm.checkpoints import open_store
    from swm.lifelong import store as ls

    monkeypatch.setenv("SWM_API_KEY_127_0_0_1", KEY)  # the key from the environment, not the URL
    db, out = tmp_path / "run.db", tmp_path / "out"
    with FakeOpenAIServer(scripts=SCRIPTS) as server:
        server.configure(faults=["echo_key", "echo_key"])  # one baseline episode's call, and its one retry
        result = CliRunner().invoke(main, ["learn", "--cycles", "1", "--levels", "easy", "--families", "negotiation",
                                           "--episodes-per-level", "2", "--samples-per-task", "2", "--max-turns", "2",
                                           "--heldout-per-cell", "1", "--concurrency", "1", "--max-retries", "1",
                                           "--thread-id", "L", "--model", server.model_spec, "--db", str(db),
                                           "--out", str(out)])
        assert server.stats()["injected"]["echo_key"] == 2
    assert KEY not in result.output, "stderr and stdout"
    failures = ls.failures(open_store(db), "L")
    assert failures and "Request refused for API key ***" in str(failures[0]), failures
    assert _leaks(tmp_path) == []


def test_redaction_hides_every_configured_key_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-0123456789")
    monkeypatch.setenv("SWM_API_KEY_HOST_EXAMPLE", "sk-host-0123456789")
    monkeypatch.setenv("HF_TOKEN", "hf_0123456789abcdef")
    monkeypatch.setenv("SWM_THREADS", "12345678")  # not a key: left alone
    text = "keys sk-openai-0123456789, sk-host-0123456789 and hf_0123456789abcdef; 12345678 threads"
    assert redact_text(text) == "keys ***, *** and ***; 12345678 threads"


PIECES = ["**", "*", "`", "``", "~~", "_", " ", "  ", "\n", "\t", "\\", "<b>", "</b>", "<span class='k'>", "</span>",
          "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e"]


def split_key(key: str, rng: random.Random) -> str:
    """The key cut at one to three places, each cut holding one to three pieces of markup, space or invisibles."""
    cuts = sorted(rng.sample(range(1, len(key)), rng.randint(1, 3)))
    parts = [key[a:b] for a, b in zip([0, *cuts], [*cuts, len(key)], strict=True)]
    return "".join(p + ("".join(rng.choices(PIECES, k=rng.randint(1, 3))) if i < len(parts) - 1 else "")
                   for i, p in enumerate(parts))


@pytest.mark.parametrize("seed", range(300))
def test_a_key_quoted_back_in_pieces_is_hidden_whole(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Property over derandomised splits: wherever the cuts fall and whatever sits in them, the key is gone and the
    words around it are kept (a store's JSON text too, where a newline or an invisible is an escape)."""
    monkeypatch.setenv("SWM_API_KEY_HOST_EXAMPLE", KEY)
    rng = random.Random(seed)
    quoted = split_key(KEY, rng)
    before, after = rng.choice(["Your key is ", "**Key:** `", "<p>key ", ""]), rng.choice([" — keep it.", "`", ""])
    for text in (before + quoted + after, json.dumps({"reply": before + quoted + after})):
        assert may_hold_secret(text), quoted  # the quick look a checkpoint's bytes get says yes wherever this hides
        shown = redact_text(text)
        assert KEY not in "".join(c for c in shown if c.isalnum() or c == "-"), (quoted, shown)
        assert MASK in shown and shown.startswith(json.dumps({"reply": before})[:-2] if text[0] == "{" else before)


@pytest.mark.parametrize("text", [
    "**Bold** and `code`, <b>a tag</b>, ~~struck~~ and snake_case_names.",
    "The key starts sk-SEKRET but the rest is another story: 0123 is a number.",  # a half of it is no key
    "sk-SEKRET-012345678",  # one character short
    "s k - S E K R E T - 0 1 2 3 x 4 5 6 7 8 9",  # its letters spelt out, a stranger among them: not the key
    "sk-SEKRET-0123456789".upper(),
])
def test_ordinary_text_is_not_masked_for_holding_markup_or_part_of_a_key(text: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWM_API_KEY_HOST_EXAMPLE", KEY)
    assert redact_text(text) == text and not may_hold_secret(text)


def test_a_key_a_model_quotes_in_pieces_is_never_printed_or_written(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``swm play`` with a model that quotes the key as ``sk-SEKRE**T-0123…``: not on stdout, stderr, or any table
    (swm's turns, episodes and runs, and LangGraph's checkpoints and writes: `swm.checkpoints.SERDE`)."""
    import sqlite3

    from test_episode_scripts import model

    from swm.social.models import AgentActionForModel

    monkeypatch.setenv("SWM_API_KEY_HOST_EXAMPLE", KEY)
    quoted = "sk-SEKRE**T-01234\u200b56789"
    llm = model(action=lambda i: AgentActionForModel(action_type="speak", argument=f"my key is {quoted}, ok?"))
    db = tmp_path / "p.db"
    result = CliRunner().invoke(main, ["play", "--policy", "plain", "--max-turns", "1", "--no-judge", "--db", str(db)],
                                obj={"llm": llm})
    assert result.exit_code == 0, result.output
    assert "my key is ***, ok?" in result.stderr and "my key is ***, ok?" in result.stdout
    with sqlite3.connect(db) as conn:
        tables = [t for (t,) in conn.execute("select name from sqlite_master where type = 'table'")]
        held = [(t, str(row)) for t in tables for row in conn.execute(f'select * from "{t}"')]  # blobs as repr
    assert {"checkpoints", "writes"} <= set(tables)
    conn.close()
    assert any("my key is ***" in row for _, row in held), "the turn is stored, its key hidden"
    assert not [t for t, row in held if "SEKRE" in row], "no piece of the key in any table"
