"""The results browser: every view over a store filled by real small runs, read-only, paged, in a real browser.

The runs are the CLI's own (``swm ask``, ``play``, ``learn``, ``bench games``, ``bench tom``)
against the loopback test double, so the pages show what a user's store holds. The browser test
drives Debian's chromium through chromedriver; with ``SWM_UI_SCREENSHOTS=DIR`` it also saves a
screenshot of each main view there (the docs' pictures are made that way).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import socket
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from swm.cli import main  # noqa: E402
from swm.testing import FakeOpenAIServer, scaled  # noqa: E402
from swm.ui import create_app  # noqa: E402
from swm.ui.app import IdConvertor, url  # noqa: E402
from swm.ui.runs import uuid6_floor, uuid6_time  # noqa: E402
from swm.ui.store import ReadOnlyStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SALLY_ANNE = {"agents_names": ["Sally", "Anne"], "socialized_context": [
    {"timestep": "0", "state": "Sally and Anne are in the room; the marble is in the basket.",
     "observations": ["Sally: <same_as_state />", "Anne: <same_as_state />"],
     "actions": ["Sally: leaves the room", "Anne: none"]},
    {"timestep": "1", "state": "Sally is away.", "observations": ["Sally: none", "Anne: <same_as_state />"],
     "actions": ["Sally: none", "Anne: moves the marble to the box"]},
    {"timestep": "2", "state": "Sally comes back.", "observations": ["Sally: <same_as_state />",
                                                                     "Anne: <same_as_state />"],
     "actions": ["Sally: none", "Anne: none"]}]}


def _cli(*args: str) -> None:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output


def fill(db: str, spec: str) -> dict[str, str]:
    """Fill a store with runs of each kind, every one under a thread id of its own (none starts with its
    kind, as ``--thread-id ep1`` in the docs does not); return the thread ids."""
    tag = uuid.uuid4().hex[:6]
    ids = {"ask": f"sally-question-{tag}", "play": f"bike-{tag}", "learn": f"curriculum-{tag}",
           "games": f"village-{tag}", "tom": f"first-look-{tag}", "tom2": f"second-look-{tag}",
           "sotopia": f"hard-pairs-{tag}", "blind": f"unparsed-question-{tag}", "games2": f"random-village-{tag}",
           "parse": f"sally-state-{tag}"}
    story = str(ROOT / "examples" / "sally_anne.txt")
    _cli("ask", "--story", story, "--question", "Where will Sally look?",
         "--mode", "s3ap", "--task", "tomi", "--model", spec, "--db", db, "--thread-id", ids["ask"])
    _cli("parse", str(ROOT / "examples" / "sally_anne.txt"), "--task", "tomi", "--model", spec, "--db", db,
         "--thread-id", ids["parse"])
    _cli("play", "--model", spec, "--db", db, "--max-turns", "3", "--thread-id", ids["play"])
    _cli("learn", "--model", spec, "--db", db, "--cycles", "1", "--levels", "easy", "--families", "mutual_friend",
         "--episodes-per-level", "1", "--max-turns", "2", "--heldout-per-cell", "1", "--dev-per-cell", "1",
         "--thread-id", ids["learn"], "--out", str(Path(db).parent / "learn-out"), "--no-progress")
    _cli("bench", "games", "--n", "2", "--policies", "plain,random", "--model", spec, "--db", db, "--thread-id",
         ids["games"], "--out", str(Path(db).parent / "games-out"), "--no-progress")
    _cli("bench", "games", "--n", "1", "--policies", "random", "--model", spec, "--db", db, "--thread-id",
         ids["games2"], "--out", str(Path(db).parent / "games2-out"), "--no-progress")
    for key, n in (("tom", "4"), ("tom2", "4")):
        _cli("bench", "tom", "--benchmark", "sim", "--n", n, "--modes", "vanilla,cot", "--model", spec, "--db", db,
             "--thread-id", ids[key], "--out", str(Path(db).parent / f"{key}-out"), "--no-progress")
    _cli("bench", "sotopia", "--data", "shipped", "--n", "1", "--policies", "plain", "--max-turns", "2", "--seats",
         "both", "--model", spec, "--db", db, "--thread-id", ids["sotopia"], "--out",
         str(Path(db).parent / "sotopia-out"), "--no-progress", "--concurrency", "1")
    return ids


def fill_blind_ask(db: str, thread: str) -> None:
    """An S3AP question whose story could not be parsed, answered only because it was allowed."""
    with FakeOpenAIServer(scripts={"S3APParse": {"agents_names": "none", "socialized_context": 3}}) as server:
        _cli("ask", "--story", str(ROOT / "examples" / "sally_anne.txt"), "--question", "Where will Sally look?",
             "--mode", "s3ap", "--model", server.model_spec, "--db", db, "--thread-id", thread,
             "--allow-without-state", "--max-attempts", "1")


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("ui")
    db = str(folder / "runs.db")
    with FakeOpenAIServer(scripts={"S3APParse": SALLY_ANNE}) as server:
        ids = fill(db, server.model_spec)
    fill_blind_ask(db, ids["blind"])
    yield db, ids


def client(db: str) -> TestClient:
    return TestClient(create_app(db))


def _csv_rows(c: TestClient, path: str, table: str) -> list[dict[str, str]]:
    r = c.get(f"{path}?csv={table}")
    assert r.status_code == 200, r.text
    return list(csv.DictReader(io.StringIO(r.text)))


def test_a_tom_run_shows_accuracy_by_benchmark_type_and_mode_with_intervals(
        filled: tuple[str, dict[str, str]]) -> None:
    from swm.stats import wilson_interval

    db, ids = filled
    c = client(db)
    page = c.get(f"/runs/{ids['tom']}").text
    assert "Accuracy by benchmark × question type × mode" in page and "scorer rule" in page
    assert "prompt protocol" in page and "simulator" in page  # where the questions came from
    cells = _csv_rows(c, f"/runs/{ids['tom']}", "accuracy")
    stored = ReadOnlyStore(db).rows("select mode, qtype, correct, status from tom_results where run = ?", [ids["tom"]])
    for mode in ("vanilla", "cot"):
        mine = [r for r in stored if r["mode"] == mode and r["status"] != "failed"]
        row = next(r for r in cells if r["mode"] == mode and r["qtype"] == "all")
        right = sum(int(r["correct"]) for r in mine)
        assert int(row["n"]) == len(mine) and int(row["successes"]) == right
        low, high = wilson_interval(right, len(mine))
        assert abs(float(row["low"]) - low) < 1e-9 and abs(float(row["high"]) - high) < 1e-9
        types = {r["qtype"] for r in mine}
        assert {r["qtype"] for r in cells if r["mode"] == mode} == types | {"all"}
    assert "cot − vanilla" in page  # the modes tested against each other
    assert "{&#39;" not in page and "{'" not in page  # no Python dict text


def test_two_tom_runs_compare_side_by_side_with_tests(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    c = client(db)
    url = f"/compare?runs={ids['tom']}&runs={ids['tom2']}"
    page = c.get(url).text
    assert "Compare 2 tom runs" in page and ids["tom"] in page and ids["tom2"] in page
    tests = list(csv.DictReader(io.StringIO(c.get(url + "&csv=tests").text)))
    assert tests and all(0.0 <= float(t["p"]) <= 1.0 for t in tests)
    assert {t["comparison"] for t in tests} == {f"{ids['tom2']} − {ids['tom']}"}
    # the two runs answered the same questions: tested paired (exact McNemar), never with the unpaired z-test
    assert all(t["test"].startswith("paired, exact McNemar on ") and t["z"] == "" for t in tests), tests
    assert "exact McNemar" in page and "pooled two-proportion z-test (two-sided p" not in page
    # each difference with its interval, each p beside its Holm adjustment over the page's tests, and a note
    from swm.stats import holm

    assert all(float(t["low"]) <= float(t["difference"]) <= float(t["high"]) for t in tests)
    assert [float(t["p_holm"]) for t in tests] == pytest.approx(holm([float(t["p"]) for t in tests]))
    assert "95% interval" in page and "p (Holm)" in page
    assert len(tests) < 2 or f"{len(tests)} tests in this table: p (Holm)" in page
    modes = _csv_rows(c, f"/runs/{ids['tom']}", "differences")  # the modes of one run: the same questions too
    assert modes and all(m["test"].startswith("paired, exact McNemar") for m in modes)
    assert [float(m["p_holm"]) for m in modes] == pytest.approx(holm([float(m["p"]) for m in modes]))
    assert c.get(f"/compare?runs={ids['tom']}&runs={ids['play']}").status_code == 400  # two kinds
    assert c.get(f"/compare?runs={ids['tom']}").status_code == 400


def test_games_and_sotopia_runs_compare_side_by_side_with_tests(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    c = client(db)
    url = f"/compare?runs={ids['games']}&runs={ids['games2']}"
    table = list(csv.DictReader(io.StringIO(c.get(url + "&csv=table").text)))
    assert {r["setting"] for r in table} == {"plain", "random"}
    tests = list(csv.DictReader(io.StringIO(c.get(url + "&csv=tests").text)))
    assert tests and {t["benchmark"] for t in tests} == {"random"}  # only settings both runs played are tested
    assert all(0.0 <= float(t["p"]) <= float(t["p_holm"]) <= 1.0 for t in tests)
    assert all(-1.0 <= float(t["low"]) <= float(t["difference"]) <= float(t["high"]) <= 1.0 for t in tests)
    episodes = c.get(f"/compare?runs={ids['sotopia']}&runs={ids['play']}")
    assert episodes.status_code == 200 and "Welch" in episodes.text
    # a bench run and a lone episode played different episodes: unpaired, and the page says so
    assert "unpaired Welch: different episodes" in episodes.text


def test_a_sotopia_run_s_policies_are_tested_against_plain_paired_by_scenario_and_agent() -> None:
    from swm.ui.summaries import policy_tests

    def ep(policy: str, scenario: str, agent: str, goal: float) -> dict[str, Any]:
        return {"episode_id": f"r-{policy}-{scenario}-{agent}", "policy": policy, "agent": agent,
                "scenario_id": scenario, "goal": goal, "overall": goal / 10}

    plain = [ep("plain", s, a, g) for s, a, g in (("s1", "A", 2.0), ("s1", "B", 4.0), ("s2", "A", 6.0))]
    foresee = [ep("foresee", s, a, g + d) for (s, a, g), d in zip((("s1", "A", 2.0), ("s1", "B", 4.0),
                                                                   ("s2", "A", 6.0)), (1.0, 1.0, 1.0), strict=True)]
    goal = next(t for t in policy_tests(plain + foresee) if t["dimension"] == "goal")
    assert goal["comparison"] == "foresee − plain" and goal["test"] == "paired t on 3 shared episodes"
    assert goal["difference"] == 1.0 and goal["low"] == goal["high"] == 1.0 and goal["significant"]
    # Welch on the same numbers would not find it: the paired test is the one a reviewer asks for here
    unpaired = next(t for t in policy_tests(plain + foresee[:2]) if t["dimension"] == "goal")
    assert unpaired["test"].startswith("unpaired Welch: different episodes (2 shared of 3 and 2)")
    assert unpaired["significant"] is False


def test_a_sotopia_run_shows_dimension_means_per_policy_and_sortable_episodes(
        filled: tuple[str, dict[str, str]]) -> None:
    import json as js

    from swm.stats import mean_ci

    db, ids = filled
    c = client(db)
    r = c.get(f"/runs/{ids['sotopia']}")
    assert r.status_code == 200 and "Scores per policy" in r.text and 'class="sortable"' in r.text
    policies = _csv_rows(c, f"/runs/{ids['sotopia']}", "policies")
    eps = ReadOnlyStore(db).rows("select tested_agent, judgements from episodes where bench_run = ?", [ids["sotopia"]])
    assert len(eps) == 2  # one scenario, both seats
    overall = [js.loads(e["judgements"])[e["tested_agent"]].get("overall") for e in eps]
    mean, _, n = mean_ci(overall)
    row = next(p for p in policies if p["policy"] == "plain")
    assert mean is not None and int(row["overall n"]) == n and abs(float(row["overall"]) - mean) < 1e-9
    assert len(_csv_rows(c, f"/runs/{ids['sotopia']}", "episodes")) == 2


def test_a_games_run_shows_win_rates_per_side_and_role_and_legal_moves(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    c = client(db)
    page = c.get(f"/runs/{ids['games']}").text
    assert "Win rate per role" in page and "legal moves" in page
    settings = {r["setting"]: r for r in _csv_rows(c, f"/runs/{ids['games']}", "settings")}
    assert set(settings) == {"plain", "random"}
    games = ReadOnlyStore(db).rows("select game_id, winner from games where game_id like ?", [f"{ids['games']}-%"])
    for setting, row in settings.items():
        mine = [g for g in games if g["game_id"].startswith(f"{ids['games']}-{setting}-")]
        assert int(row["games"]) == len(mine) == 2
        assert int(row["village wins n"]) == 2
        assert abs(float(row["village wins"]) - sum(g["winner"] == "village" for g in mine) / 2) < 1e-9
    assert float(settings["random"]["legal moves n"] or 0) == 0  # the random baseline decides no move by model
    roles = _csv_rows(c, f"/runs/{ids['games']}", "roles")
    assert {"werewolf", "villager"} <= {r["role"] for r in roles}


def test_an_ask_shows_question_answer_and_the_state_it_stood_on(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    c = client(db)
    used = c.get(f"/runs/{ids['ask']}").text
    assert "Where will Sally look?" in used and "used: parsed by this run" in used
    assert re.search(r'href="/state/parse/[^"]+"', used)
    blind = c.get(f"/runs/{ids['blind']}").text
    assert "none: no usable parse; the answer stands on the story alone" in blind
    assert 'href="/state/parse/' not in blind


def test_the_learning_page_draws_the_matrix_as_a_heat_map_with_intervals(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    page = client(db).get(f"/learn/{ids['learn']}").text
    assert "type:'heatmap'" in page and "error_y" in page
    assert "Pairs kept of those sampled, per cycle" in page
    assert "swm learn" in page and "--no-progress" in page  # the command and options it was started with


def test_cells_never_show_python_dict_text() -> None:
    from swm.ui.app import cell, when

    assert cell({"village": {"mean": 0.5, "ci95": 0.25, "n": 4}}) == "village: 0.500 ± 0.250 (n=4)"
    assert cell([1.23456, "a"], 2) == "1.23, a"
    assert when(1_790_000_000.0) == "2026-09-21 14:13:20"
    assert cell('{"a": 1}') == "a: 1"


def test_uuid6_times_round_trip() -> None:
    from datetime import UTC, datetime

    when = datetime(2026, 11, 24, 3, 0, tzinfo=UTC)
    floor = uuid6_floor(when)
    assert uuid6_time(floor) == when
    assert uuid6_floor(datetime(2026, 11, 23, tzinfo=UTC)) < floor < uuid6_floor(datetime(2026, 11, 25, tzinfo=UTC))


def test_the_runs_page_lists_every_run_with_kind_status_and_cost(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    c = client(db)
    page = c.get("/runs").text
    for kind, thread in ids.items():
        assert f'href="/runs/{thread}"' in page, kind  # the benchmark runs of games and episodes too
    # a benchmark run is one row (its own table), not one thread row per game or episode it played
    assert f'href="/runs/{ids["games"]}-plain-' not in page and f'href="/runs/{ids["sotopia"]}-plain-' not in page
    rows = list(csv.DictReader(io.StringIO(c.get("/runs?csv=runs").text)))
    by_id = {r["thread_id"]: r for r in rows}
    for key in ("ask", "blind", "parse", "play", "learn", "tom", "tom2"):
        assert by_id[ids[key]]["kind"] == {"blind": "ask"}.get(key, key.rstrip("2")), key  # from the store
    assert by_id[ids["play"]]["graph"] == "episode" and by_id[ids["tom"]]["graph"] == "ask"
    assert by_id[ids["play"]]["kind"] == "play" and by_id[ids["play"]]["status"] == "finished"
    assert float(by_id[ids["play"]]["cost"].split('"calls": ')[1].split(",")[0]) > 0
    tom = by_id[ids["tom"]]
    answered = ReadOnlyStore(db).rows("select count(*) as n from tom_results where run = ?", [ids["tom"]])[0]["n"]
    assert tom["kind"] == "tom" and int(tom["threads"]) == answered > 1 and tom["protocol"]
    only_learn = c.get("/runs?kind=learn").text
    assert ids["learn"] in only_learn and ids["play"] not in only_learn
    only_tom = c.get("/runs?kind=tom").text
    assert ids["tom"] in only_tom and ids["tom2"] in only_tom and ids["ask"] not in only_tom
    assert ids["play"] not in c.get("/runs?until=2001-01-01").text
    assert ids["play"] in c.get("/runs?since=2001-01-01").text
    assert c.get("/runs?since=yesterday").status_code == 400
    # an ask's row says what it did; a benchmark run's row its status, score and cost (it names no thread itself)
    ask = by_id[ids["ask"]]
    assert ask["status"] == "answered" and ask["models"] and float(ask["cost"].split('"calls": ')[1].split(",")[0]) > 0
    benches = {r["thread_id"]: r for r in csv.DictReader(io.StringIO(c.get("/runs?csv=benchmarks").text))}
    sotopia = benches[ids["sotopia"]]
    assert sotopia["status"] == "finished" and sotopia["score"].startswith("plain: goal ")
    assert "(n=2)" in sotopia["score"]
    assert float(sotopia["cost"].split('"calls": ')[1].split(",")[0]) > 0
    games = benches[ids["games"]]
    assert games["status"] == "4 of 4 finished" and "plain: " in games["score"] and " wins " in games["score"]
    # the run's own page counts its episodes, found by the run they belong to
    assert "status: finished · episodes: 2" in c.get(f"/runs/{ids['sotopia']}").text


def test_an_episode_shows_goals_turns_predictions_and_the_judge(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    r = client(db).get(f"/runs/{ids['play']}")
    assert r.status_code == 200 and r.url.path == f"/episodes/{ids['play']}"
    page = r.text
    assert "Private goals" in page and "Sell the bike for at least $450" in page
    assert page.count('class="turn"') == 3
    assert page.count('class="state-cells"') == 3  # each turn beside the social state recorded after it
    assert "world model predicted" in page and ("hit" in page or "miss" in page)
    assert all(d in page for d in ("believability", "financial and material benefits", "goal"))
    assert "financial_and_material_benefits" not in page and "social_rules" not in page  # spelt one way, as elsewhere
    assert "extra_info" not in page and 'class="hint"' in page  # SOTOPIA's goal tags are not shown as text
    turns = list(csv.DictReader(io.StringIO(client(db).get(f"/episodes/{ids['play']}?csv=turns").text)))
    assert [int(t["turn"]) for t in turns] == [0, 1, 2]


def test_a_social_state_greys_what_the_agent_could_not_observe(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    c = client(db)
    key = re.search(r'href="/state/parse/([^"]+)"', c.get(f"/runs/{ids['ask']}").text)
    assert key is not None
    everyone = c.get(f"/state/parse/{key.group(1)}").text
    sally = c.get(f"/state/parse/{key.group(1)}?agent=Sally").text
    anne = c.get(f"/state/parse/{key.group(1)}?agent=Anne").text
    assert 'class="unseen"' not in everyone
    assert sally.count('<tr class="unseen">') == 1  # Sally was away when the marble moved
    assert anne.count('<tr class="unseen">') == 0
    assert c.get(f"/state/parse/{key.group(1)}?agent=Nobody").status_code == 404


def test_a_game_shows_phases_votes_and_each_players_private_view(filled: tuple[str, dict[str, str]]) -> None:
    db, _ = filled
    store = ReadOnlyStore(db)
    game = store.rows("select game_id, roles from games limit 1")[0]
    roles = __import__("json").loads(game["roles"])
    wolf = next(p for p, r in roles.items() if r == "werewolf")
    villager = next(p for p, r in roles.items() if r == "villager")
    c = client(db)
    everything = c.get(f"/games/{game['game_id']}").text
    assert "night_wolves" in everything and "Votes" in everything and f"{wolf} (werewolf)" in everything
    as_villager = c.get(f"/games/{game['game_id']}?seat={villager}").text
    assert f"{wolf} (werewolf)" not in as_villager and f"{villager} (villager)" in as_villager
    assert "(hidden)" in as_villager  # the wolves' night pick is not the villager's to see


def test_the_learning_page_shows_policies_deploys_matrix_and_pairs(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    c = client(db)
    page = c.get(f"/runs/{ids['learn']}", follow_redirects=True).text
    for section in ("R[cycle, level]", "Policies", "Deploy decisions", "Gate", "Pairs", "Episodes"):
        assert section in page
    assert "Plotly.newPlot" in page and "n = %{customdata}" in page
    matrix = list(csv.DictReader(io.StringIO(c.get(f"/learn/{ids['learn']}?csv=matrix").text)))
    assert matrix and {r["curve"] for r in matrix} >= {"deployed"} and all(int(r["n"]) >= 1 for r in matrix)
    assert c.get(f"/learn/{ids['learn']}?csv=nothing").status_code == 404
    assert c.get("/vendor/plotly.min.js").status_code == 200


def test_the_browser_never_writes_the_store(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    before = hashlib.sha256(Path(db).read_bytes()).hexdigest()
    c = client(db)
    for path in ("/runs", f"/runs/{ids['play']}", f"/learn/{ids['learn']}", f"/runs/{ids['tom']}"):
        assert c.get(path, follow_redirects=True).status_code == 200
        assert c.post(path).status_code == 405
    store = ReadOnlyStore(db)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        store.rows("insert into episodes (episode_id) values ('x')")
    assert hashlib.sha256(Path(db).read_bytes()).hexdigest() == before


def test_ten_thousand_runs_are_paged(tmp_path: Path) -> None:
    db = tmp_path / "big.db"
    conn = sqlite3.connect(db)
    conn.execute("create table checkpoints (thread_id text, checkpoint_ns text, checkpoint_id text, "
                 "parent_checkpoint_id text, type text, checkpoint blob, metadata blob)")
    base = 138_000_000_000_000_000
    conn.executemany("insert into checkpoints values (?, '', ?, null, null, null, null)",
                     [(f"play-x-{i:05d}", str(uuid.UUID(f"{(base + i * 10_000_000) >> 28:08x}-"
                                                        f"{((base + i * 10_000_000) >> 12) & 0xFFFF:04x}-"
                                                        f"6{(base + i * 10_000_000) & 0xFFF:03x}-8000-000000000000")))
                      for i in range(10_000)])
    conn.commit()
    conn.close()
    c = client(str(db))
    first = c.get("/runs").text
    assert first.count('href="/runs/play-x-') == 50 and "play-x-09999" in first and "older →" in first
    last = c.get("/runs?page=199").text
    assert "play-x-00000" in last and "older →" not in last


@pytest.mark.parametrize("query", ["/runs?page=abc", "/learn/L?page=2.5", "/learn/L?cycle=abc"])
def test_a_page_or_cycle_that_is_not_a_whole_number_is_a_bad_request(tmp_path: Path, query: str) -> None:
    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()
    reply = client(str(db)).get(query)
    assert reply.status_code == 400, reply.text
    assert "must be a whole number" in reply.text


def test_postgres_store_is_browsed_read_only(pg_url: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    url = pg_url
    thread = f"pg-bike-{uuid.uuid4().hex[:8]}"  # a thread id of its own: the kind comes from swm_runs
    with FakeOpenAIServer() as server:
        _cli("play", "--model", server.model_spec, "--db", url, "--max-turns", "2", "--thread-id", thread)
    c = client(url)
    assert thread in c.get("/runs?kind=play").text
    page = c.get(f"/runs/{thread}", follow_redirects=True).text
    assert page.count('class="turn"') == 2 and "Private goals" in page
    store = ReadOnlyStore(url)
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        store.rows("create table swm_ui_write_probe (x int)")


# ---- a real browser -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(filled: tuple[str, dict[str, str]]) -> Iterator[tuple[str, dict[str, str]]]:
    """The app under uvicorn on a socket the fixture listens on: no free port closed and bound again (another
    process could take it in between), and the browser's first request waits in its backlog until uvicorn serves."""
    uvicorn = pytest.importorskip("uvicorn")
    db, ids = filled
    listening = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(db), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listening.getsockname()[1]}", ids
    server.should_exit = True
    thread.join(10)
    listening.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver")
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("Debian's chromium and chromium-driver are not installed (.ci/run installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    from selenium.webdriver.chrome.service import Service

    b = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    yield b
    b.quit()


def _shot(browser: Any, name: str, tmp: Path) -> None:
    folder = Path(os.environ.get("SWM_UI_SCREENSHOTS", "") or tmp)
    folder.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(folder / f"{name}.png"))


def test_a_real_browser_opens_a_run_an_episode_a_perspective_and_a_pair(
        served: tuple[str, dict[str, str]], browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, ids = served
    browser.get(f"{base}/runs")
    assert "Runs" in browser.title
    _shot(browser, "runs", tmp_path)
    browser.find_element(By.CSS_SELECTOR, f'a[href="/runs/{ids["play"]}"]').click()
    assert browser.current_url.endswith(f"/episodes/{ids['play']}")
    assert len(browser.find_elements(By.CSS_SELECTOR, ".turn")) == 3
    assert "world model predicted" in browser.find_element(By.CSS_SELECTOR, ".chat").text
    _shot(browser, "episode", tmp_path)
    browser.find_element(By.LINK_TEXT, "social state").click()
    agent = browser.find_elements(By.CSS_SELECTOR, "nav.toggle a[data-agent]")[0]
    name = agent.get_attribute("data-agent")
    agent.click()
    assert f"perspective({name})" in browser.find_element(By.TAG_NAME, "main").text
    _shot(browser, "social-state", tmp_path)
    browser.get(f"{base}/runs/{ids['ask']}")
    browser.find_element(By.CSS_SELECTOR, 'a[href^="/state/parse/"]').click()
    browser.find_element(By.CSS_SELECTOR, 'nav.toggle a[data-agent="Sally"]').click()
    grey = browser.find_elements(By.CSS_SELECTOR, "tr.unseen")
    assert len(grey) == 1 and "moves the marble" in grey[0].text
    _shot(browser, "perspective-sally", tmp_path)
    browser.get(f"{base}/runs/{ids['learn']}")
    assert "Lifelong run" in browser.find_element(By.TAG_NAME, "h1").text
    WebDriverWait(browser, scaled(30)).until(  # Plotly drew the curves: waited for, not slept on (raises if not)
        lambda b: b.find_elements(By.CSS_SELECTOR, "#curves .main-svg"), "Plotly drew no curves")
    _shot(browser, "learning", tmp_path)
    pair_links = browser.find_elements(By.CSS_SELECTOR, "#t-pairs a")
    if pair_links:
        pair_links[0].click()
        verdict = browser.find_element(By.ID, "verdict").text
        assert verdict.startswith(("kept", "rejected"))
        assert browser.find_element(By.ID, "chosen").text and browser.find_element(By.ID, "rejected").text
        _shot(browser, "pair", tmp_path)
    browser.get(f"{base}/runs?kind=games")
    assert not browser.find_elements(By.CSS_SELECTOR, f'#t-runs a[href^="/runs/{ids["games"]}-"]')  # folded
    browser.find_element(By.CSS_SELECTOR, f'#t-benchmarks a[href="/runs/{ids["games"]}"]').click()
    browser.find_element(By.CSS_SELECTOR, f'#t-games a[href^="/games/{ids["games"]}-"]').click()
    assert "night_wolves" in browser.find_element(By.TAG_NAME, "main").text
    _shot(browser, "game", tmp_path)


def test_a_real_browser_reads_summaries_sorts_filters_and_compares(
        served: tuple[str, dict[str, str]], browser: Any, tmp_path: Path) -> None:
    """Every summary page made by runs with their own thread ids, in Chromium: ToM accuracy (sorted by a
    click), the comparison picked by ticking two runs, SOTOPIA scores, game win rates and an ask."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    base, ids = served
    wait = WebDriverWait(browser, 30)
    browser.get(f"{base}/runs?kind=tom")
    for key in ("tom", "tom2"):
        browser.find_element(By.CSS_SELECTOR, f'input[name="runs"][value="{ids[key]}"]').click()
    browser.find_element(By.ID, "compare-button").click()
    wait.until(lambda b: "/compare?" in b.current_url and b.find_elements(By.CSS_SELECTOR, "#t-tests"))
    assert browser.find_element(By.TAG_NAME, "h1").text == "Compare 2 tom runs"
    assert browser.find_elements(By.CSS_SELECTOR, "#t-tests tbody tr")
    _shot(browser, "compare", tmp_path)
    browser.get(f"{base}/runs/{ids['tom']}")
    assert "Accuracy by benchmark" in browser.find_element(By.TAG_NAME, "main").text
    _shot(browser, "tom", tmp_path)
    rows = lambda: [r.find_elements(By.TAG_NAME, "td")[1].text  # noqa: E731
                    for r in browser.find_elements(By.CSS_SELECTOR, "#t-items tbody tr")]
    browser.find_elements(By.CSS_SELECTOR, "#t-items thead th")[1].click()  # sort by mode
    first = rows()
    assert first == sorted(first, reverse=True)
    browser.find_elements(By.CSS_SELECTOR, "#t-items thead th")[1].click()
    assert rows() == sorted(first)
    box = browser.find_element(By.CSS_SELECTOR, 'input.filterbox[data-table="t-items"]')
    box.send_keys("vanilla")
    shown = [r for r in browser.find_elements(By.CSS_SELECTOR, "#t-items tbody tr") if r.is_displayed()]
    assert shown and all("vanilla" in r.text for r in shown) and len(shown) < len(first)
    browser.get(f"{base}/runs")
    bench_row = browser.find_element(By.XPATH, f'//table[@id="t-benchmarks"]//tr[.//a[text()="{ids["sotopia"]}"]]')
    assert bench_row.find_element(By.CLASS_NAME, "status").text == "finished"
    assert bench_row.find_element(By.CLASS_NAME, "score").text.startswith("plain: goal ")
    browser.get(f"{base}/runs/{ids['sotopia']}")
    assert "status: finished · episodes: 2" in browser.find_element(By.TAG_NAME, "main").text  # not "0 of 0"
    assert browser.find_elements(By.CSS_SELECTOR, "#t-policies tbody tr")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#t-episodes tbody tr")) == 2
    _shot(browser, "sotopia", tmp_path)
    browser.get(f"{base}/runs/{ids['games']}")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#t-settings tbody tr")) == 2
    _shot(browser, "games", tmp_path)
    browser.get(f"{base}/runs/{ids['ask']}")
    assert browser.find_element(By.ID, "question").text == "Where will Sally look?"
    assert browser.find_element(By.ID, "answer").text and "used" in browser.find_element(By.ID, "social-state").text
    _shot(browser, "ask", tmp_path)
    browser.get(f"{base}/runs/{ids['parse']}")
    parses = browser.find_elements(By.CSS_SELECTOR, '#t-items a[href^="/state/parse/"]')
    assert len(parses) == 1  # the parse of this run's story only
    parses[0].click()
    wait.until(lambda b: "Social state" in b.find_element(By.TAG_NAME, "h1").text)
    browser.get(f"{base}/learn/{ids['learn']}")
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "#heat-1 .main-svg"))
    _shot(browser, "learning", tmp_path)


def test_datasette_opens_the_store_with_the_metadata_and_every_canned_query_runs(
        filled: tuple[str, dict[str, str]]) -> None:
    datasette_app = pytest.importorskip("datasette.app")
    import asyncio
    import json as js
    import subprocess
    import sys

    db, ids = filled
    made = subprocess.run([sys.executable, "-m", "swm.ui.datasette", db], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    metadata = js.loads(made.stdout)
    name = Path(db).stem
    queries = metadata["databases"][name]["queries"]
    ds = datasette_app.Datasette(files=[db], metadata=metadata)  # read-only (mode=ro), WAL included

    async def fetch() -> dict[str, Any]:
        tables = await ds.client.get(f"/{name}/swm_runs.json")
        assert tables.status_code == 200
        out: dict[str, Any] = {}
        for query in queries:
            response = await ds.client.get(f"/{name}/{query}.json?_shape=objects")
            assert response.status_code == 200, (query, response.text[:500])
            out[query] = response.json()["rows"]
        return out

    got = asyncio.run(fetch())
    assert {r["thread_id"] for r in got["runs_by_kind"]} >= {ids["ask"], ids["play"], ids["tom"]}
    assert {r["run"] for r in got["tom_accuracy"]} == {ids["tom"], ids["tom2"]}
    assert [r["thread_id"] for r in got["asks_without_state"]] == [ids["blind"]]
    assert {r["bench_run"] for r in got["sotopia_overall"]} == {ids["sotopia"]}
    assert len(got["game_outcomes"]) == 5


@pytest.mark.parametrize("query", ["/runs?page=" + "9" * 40, "/learn/L?page=" + "9" * 40, "/learn/L?cycle=" + "9" * 40])
def test_a_page_past_any_store_is_a_bad_request_not_a_server_error(tmp_path: Path, query: str) -> None:
    db = tmp_path / "empty.db"
    sqlite3.connect(db).close()
    reply = TestClient(create_app(str(db)), raise_server_exceptions=False).get(query)
    assert reply.status_code == 400, reply.text
    assert "must be a whole number up to" in reply.text


def test_a_learn_run_whose_id_holds_a_slash_is_found(filled: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    """Ids such as ``team/run-1`` are quoted in links and routed whole (a path converter), never a 404."""
    source, ids = filled
    db = tmp_path / "slash.db"
    shutil.copyfile(source, db)
    with sqlite3.connect(db) as conn:
        for table in [r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")]:
            columns = {r[1] for r in conn.execute(f"pragma table_info('{table}')")}
            for column in {"run_id", "thread_id"} & columns:
                conn.execute(f"update {table} set {column} = 'team/' || {column} where {column} = ?", [ids["learn"]])
    conn.close()
    c = client(str(db))
    run = f"team/{ids['learn']}"
    page = c.get(f"/runs/{run}", follow_redirects=True)  # typed with its slash: routed whole
    assert page.status_code == 200 and str(page.url).endswith(f"/learn/{url(run)}"), page.text[:300]
    assert "Pairs kept of those sampled, per cycle" in page.text
    pair = re.search(r'href="(/learn/team%252F[^"]+/pairs/\d+/\d+)"', page.text)
    reply = c.get(pair.group(1) if pair else f"/learn/{run}/pairs/0/0")  # routed to the pair view, whichever
    assert reply.status_code == 200 or "no such pair" in reply.text, reply.text[:300]
    assert c.get(f"/selfplay/{run}").status_code == 200


def test_the_self_play_page_plots_kl_apart_lists_the_plan_and_links_each_rollout_s_transcript(tmp_path: Path) -> None:
    from swm.checkpoints import ExperienceStore
    from swm.selfplay.plan import SelfPlayPlan
    from swm.selfplay.store import put_iteration, put_rollout, put_run
    from swm.training.trajectory import Rollout, SeatTrajectory, SeatTurn

    db = tmp_path / "sp.db"
    store = ExperienceStore(db)
    plan = SelfPlayPlan(run_id="sp1", iterations=1)
    put_run(store, "sp1", plan)
    put_iteration(store, "sp1", 0, {"reward": {"buyer": 0.5, "seller": 0.25}, "kl": 0.0123, "pass_rate": 0.5})

    def turn(i: int, text: str, reward: float, adv: list[float]) -> SeatTurn:
        return SeatTurn(turn=i, prompt="p", text=text, prompt_ids=[1], token_ids=[2] * len(adv),
                        logprobs=[-1.0] * len(adv), reward=reward, advantages=adv)

    rollout = Rollout(rollout_id="sp1/i0/train/t1/g0", task_id="t1", family="negotiation", iteration=0, sample=0,
                      order=["Ann", "Bo", "Ann"], seats=[
                          SeatTrajectory(seat="Ann", role="buyer", turns=[turn(0, "I offer 40.", 0.0, [0.5, 0.25]),
                                                                          turn(2, "Deal at 45.", 1.0, [1.0])],
                                         outcome=1.0),
                          SeatTrajectory(seat="Bo", role="seller", turns=[turn(1, "50, not less.", 0.5, [-0.5])],
                                         outcome=0.5)])
    put_rollout(store, "sp1", "train", rollout)
    c = client(str(db))
    page = c.get("/selfplay/sp1").text
    assert page.count("Plotly.newPlot") == 2 and "KL to the reference policy" in page  # KL on an axis of its own
    assert '"name": "KL' not in page.split("selfplay-kl")[0]  # not among the rewards
    plan_rows = {r["setting"]: r["value"] for r in _csv_rows(c, "/selfplay/sp1", "plan")}
    assert plan_rows["iterations"] == "1" and "ppo.lr" in plan_rows and "{&#34;" not in page  # a table, not JSON
    assert 'href="/rollout?id=sp1/i0/train/t1/g0"' in page
    assert c.get("/rollout", params={"id": "sp1/i0/train/t1/g0"}).status_code == 200
    shown = c.get("/rollout", params={"id": "sp1/i0/train/t1/g0", "csv": "turns"})
    turns = list(csv.DictReader(io.StringIO(shown.text)))
    assert [(t["turn"], t["seat"], t["role"], t["text"]) for t in turns] == [
        ("0", "Ann", "buyer", "I offer 40."), ("1", "Bo", "seller", "50, not less."),
        ("2", "Ann", "buyer", "Deal at 45.")]
    assert [float(t["reward"]) for t in turns] == [0.0, 0.5, 1.0]
    assert [float(t["advantage_mean"]) for t in turns] == [0.375, -0.5, 1.0]
    assert c.get("/rollout", params={"id": "nope"}).status_code == 404


def test_a_policy_of_one_episode_shows_its_mean_without_an_interval(tmp_path: Path) -> None:
    """One episode has no spread to estimate: the page and its CSV give no bounds, never the zero-width [m, m]."""
    from test_episode_scripts import model

    db = str(tmp_path / "one.db")
    args = ["bench", "sotopia", "--data", "shipped", "--policies", "plain", "--n", "1", "--max-turns", "1",
            "--seats", "first", "--db", db, "--thread-id", "one-episode", "--out", str(tmp_path / "out"),
            "--no-progress"]
    result = CliRunner().invoke(main, args, obj={"llm": model()})
    assert result.exit_code == 0, result.output
    c = client(db)
    (plain,) = _csv_rows(c, "/runs/one-episode", "policies")
    assert plain["goal n"] == "1" and plain["goal"] and plain["goal low"] == plain["goal high"] == ""
    page = c.get("/runs/one-episode").text
    assert f"<small>[{float(plain['goal']):.2f}, {float(plain['goal']):.2f}]</small>" not in page
    assert 'title="n = 1"' in page


@pytest.mark.parametrize("run_id", ["x/pairs/0/0", "../../etc", "a%2Fb/c"])
def test_a_run_whose_id_looks_like_a_route_or_a_path_opens_from_its_links(run_id: str, tmp_path: Path) -> None:
    """Ids shaped like a sub-route (the learn page's pairs) or climbing the path open from the runs page's link, and
    from the run page's own links (its config, its episodes), as themselves; ``../../etc`` leaves no page."""
    from bench.extra_graphs import SCRIPTS

    db = str(tmp_path / "ids.db")
    with FakeOpenAIServer(scripts=SCRIPTS) as server:
        _cli("learn", "--cycles", "1", "--levels", "easy", "--families", "mutual_friend", "--episodes-per-level", "1",
             "--max-turns", "2", "--heldout-per-cell", "1", "--dev-per-cell", "1", "--thread-id", run_id, "--model",
             server.model_spec, "--db", db, "--out", str(tmp_path / "out"), "--no-progress")
    c = client(db)
    (link,) = re.findall(r'href="(/runs/[^"]+)"', c.get("/runs").text)
    page = c.get(link, follow_redirects=True)
    assert page.status_code == 200 and f"<h1>Lifelong run {run_id}</h1>" in page.text, (link, page.url)
    assert page.url.path.startswith("/learn/"), page.url
    config = re.search(r'href="(/config/[^"]+)"', page.text)
    assert config and json.dumps(run_id) in c.get(config.group(1)).text
    episodes = re.findall(r'href="(/episodes/[^"]+)"', page.text)
    assert episodes and all(f"<h1>Episode {run_id}/" in c.get(e).text for e in episodes)


@pytest.mark.parametrize("thread_id", ["x/pairs/0/0", "../../etc", "..", ".", "100%", "a%2Fb/c", "ü/ß:1", ""])
def test_an_id_in_a_link_comes_back_whole_after_the_server_unquotes_the_path(thread_id: str) -> None:
    from urllib.parse import unquote

    assert IdConvertor().convert(unquote(url(thread_id))) == thread_id
    # one path segment, and none a client resolves away (WHATWG counts %2e as a dot)
    assert "/" not in url(thread_id) and url(thread_id).lower() not in (".", "..", "%2e", "%2e%2e", ".%2e", "%2e.")
