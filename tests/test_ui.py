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
import os
import re
import shutil
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from swm.cli import main  # noqa: E402
from swm.testing import FakeOpenAIServer  # noqa: E402
from swm.ui import create_app  # noqa: E402
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
    """Fill a store with one run of each kind; return the thread ids."""
    ids = {"ask": f"ask-{uuid.uuid4().hex[:8]}", "play": f"play-swm-bike-sale-{uuid.uuid4().hex[:8]}",
           "learn": f"learn-{uuid.uuid4().hex[:8]}", "games": f"games-{uuid.uuid4().hex[:8]}",
           "tom": f"tom-sim-{uuid.uuid4().hex[:8]}"}
    _cli("ask", "--story", str(ROOT / "examples" / "sally_anne.txt"), "--question", "Where will Sally look?",
         "--mode", "s3ap", "--task", "tomi", "--model", spec, "--db", db, "--thread-id", ids["ask"])
    _cli("play", "--model", spec, "--db", db, "--max-turns", "3", "--thread-id", ids["play"])
    _cli("learn", "--model", spec, "--db", db, "--cycles", "1", "--levels", "easy", "--families", "mutual_friend",
         "--episodes-per-level", "1", "--max-turns", "2", "--heldout-per-cell", "1", "--dev-per-cell", "1",
         "--thread-id", ids["learn"], "--out", str(Path(db).parent / "learn-out"))
    _cli("bench", "games", "--n", "1", "--policies", "plain", "--model", spec, "--db", db, "--thread-id",
         ids["games"], "--out", str(Path(db).parent / "games-out"), "--no-progress")
    _cli("bench", "tom", "--benchmark", "sim", "--n", "2", "--modes", "cot", "--model", spec, "--db", db,
         "--thread-id", ids["tom"], "--out", str(Path(db).parent / "tom-out"), "--no-progress")
    return ids


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("ui")
    db = str(folder / "runs.db")
    with FakeOpenAIServer(scripts={"S3APParse": SALLY_ANNE}) as server:
        ids = fill(db, server.model_spec)
    yield db, ids


def client(db: str) -> TestClient:
    return TestClient(create_app(db))


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
        if kind != "games":
            assert f'href="/runs/{thread}"' in page, kind
    assert page.count(f'href="/runs/{ids["games"]}-plain-') == 1  # each game of the bench is a thread of its own
    rows = list(csv.DictReader(io.StringIO(c.get("/runs?csv=runs").text)))
    by_id = {r["thread_id"]: r for r in rows}
    assert by_id[ids["play"]]["kind"] == "play" and by_id[ids["play"]]["status"] == "finished"
    assert float(by_id[ids["play"]]["cost"].split('"calls": ')[1].split(",")[0]) > 0
    tom = by_id[ids["tom"]]
    answered = ReadOnlyStore(db).rows("select count(*) as n from tom_results where run = ?", [ids["tom"]])[0]["n"]
    assert tom["kind"] == "tom" and int(tom["threads"]) == answered > 1 and tom["protocol"]
    only_learn = c.get("/runs?kind=learn").text
    assert ids["learn"] in only_learn and ids["play"] not in only_learn
    assert ids["play"] not in c.get("/runs?until=2001-01-01").text
    assert ids["play"] in c.get("/runs?since=2001-01-01").text
    assert c.get("/runs?since=yesterday").status_code == 400


def test_an_episode_shows_goals_turns_predictions_and_the_judge(filled: tuple[str, dict[str, str]]) -> None:
    db, ids = filled
    r = client(db).get(f"/runs/{ids['play']}")
    assert r.status_code == 200 and r.url.path == f"/episodes/{ids['play']}"
    page = r.text
    assert "Private goals" in page and "Sell the bike for at least $450" in page
    assert page.count('class="turn"') == 3
    assert "world model predicted" in page and ("hit" in page or "miss" in page)
    assert all(d in page for d in ("believability", "financial_and_material_benefits", "goal"))
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
    assert first.count('href="/runs/play-x-') == 50 and "play-x-09999" in first and "older" in first
    last = c.get("/runs?page=199").text
    assert "play-x-00000" in last and "older" not in last


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
    thread = f"play-swm-bike-sale-{uuid.uuid4().hex[:8]}"
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
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def served(filled: tuple[str, dict[str, str]]) -> Iterator[tuple[str, dict[str, str]]]:
    uvicorn = pytest.importorskip("uvicorn")
    db, ids = filled
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(db), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", ids
    server.should_exit = True
    thread.join(10)


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
    time.sleep(0.5)
    assert browser.find_elements(By.CSS_SELECTOR, "#curves .main-svg")  # Plotly drew the curves
    _shot(browser, "learning", tmp_path)
    pair_links = browser.find_elements(By.CSS_SELECTOR, "#t-pairs a")
    if pair_links:
        pair_links[0].click()
        verdict = browser.find_element(By.ID, "verdict").text
        assert verdict.startswith(("kept", "rejected"))
        assert browser.find_element(By.ID, "chosen").text and browser.find_element(By.ID, "rejected").text
        _shot(browser, "pair", tmp_path)
    browser.get(f"{base}/runs?kind=games")
    browser.find_element(By.CSS_SELECTOR, 'a[href^="/runs/games-"]').click()
    assert "night_wolves" in browser.find_element(By.TAG_NAME, "main").text
    _shot(browser, "game", tmp_path)
