"""Spread a benchmark's items over many worker processes and machines with Ray.

Ray (the engine under verl, OpenRLHF and MARTI) schedules one task per unfinished item. Each
task opens the run's database (`checkpoints.open_saver` / `open_store`: a SQLite file on one
machine, a ``postgresql://`` URL across machines), runs the item's graph on its own checkpoint
thread and stores its row. A worker that dies mid-item (killed, OOM, a lost machine) makes Ray
run the task again (``max_retries``) on another worker, where `checkpoints.run_thread` resumes
the item at its last finished node; the row's key makes a second write replace, never add, so
no item is lost or counted twice. Nothing here is a queue of our own: Ray owns scheduling,
retries and placement; the checkpointer owns progress.

``ray.init(address=...)``: ``None`` starts a local cluster with ``workers`` CPUs; ``"auto"``,
``HOST:PORT`` or ``ray://head:10001`` joins one started with ``ray start --head`` / ``ray start
--address=...``. Token authentication (Ray 2.52+; a head started by hand turns it on by itself when
``~/.ray/auth_token`` exists): see `join_settings` and docs/ray.md.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from swm import drain
from swm.context import LifelongContext, SWMContext
from swm.errors import EnvironmentFault, InputError

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from swm.context import EpisodeContext, GameContext
    from swm.games.graph_state import GameGraphState, GameInput, GameOutput
    from swm.lifelong.state import EpisodeJob, LifelongState
    from swm.nodes.lifelong import Runner
    from swm.social.graph_state import EpisodeInput, EpisodeOutput, EpisodeState
    from swm.tom.items import TomItem

# Fields of the runtime context that travel to workers: plain settings only (no models, no store).
_PLAIN = ("model", "models", "temperature", "max_tokens", "timeout", "max_retries", "max_failures_in_a_row", "task",
          "max_parse_attempts", "max_narrative_chars", "steps_per_sentence", "repair_temperature", "repair_seed",
          "prompt_versions", "prompt_protocol", "act_order", "lookahead_width", "lookahead_depth", "out_dir")


def context_settings(ctx: SWMContext) -> dict[str, Any]:
    """Return the context's plain settings (what a worker needs to rebuild it), refusing injected models."""
    if ctx.llm is not None or ctx.chat_models:
        raise InputError("workers cannot take an injected chat model object",
                         "give every role a model spec (name, name@base_url or embedded)")
    names = {f.name for f in dataclasses.fields(ctx)}
    return {k: getattr(ctx, k) for k in _PLAIN if k in names}


@contextmanager
def _worker_context(settings: dict[str, Any], db: str, holds: str) -> Iterator[SWMContext]:
    """Rebuild the run's context in a worker, on its own connection to the shared store, for one task.

    ``SWM_WORKER_TRACE`` (tests) names a folder where each worker writes which item it ``holds``.
    """
    from swm.checkpoints import open_store

    trace = os.environ.get("SWM_WORKER_TRACE")
    if trace:
        Path(trace, f"{os.getpid()}.pid").write_text(holds, encoding="utf-8")
    ctx = SWMContext(**settings)
    ctx.store = open_store(db)
    try:
        yield ctx
    finally:
        ctx.store.close()


def _tom_item(settings: dict[str, Any], db: str, run_id: str, mode: str, item: TomItem) -> dict[str, Any]:
    """Run one ToM item in a worker: resume its thread on the shared database, store its row, return it."""
    from swm.checkpoints import open_saver
    from swm.graphs import ask
    from swm.tom.runner import ensure_tables, insert_result, run_item

    with _worker_context(settings, db, item.id) as ctx:
        ensure_tables(ctx.store)
        with open_saver(db) as saver:
            row = run_item(ask.build().compile(checkpointer=saver), ctx, run_id, mode, item)
        insert_result(ctx.store, row)
        return row


def run_tom_on_ray(items: list[TomItem], modes: list[str], ctx: SWMContext, db: str | Path, run_id: str, *,
                   workers: int, address: str | None = None, max_retries: int = 3,
                   on_done: Callable[[str, dict[str, Any]], None] | None = None) -> tuple[int, float]:
    """Run every unfinished (mode, item) as a Ray task; return how many ran and the seconds Ray took to start.

    Rows land in the store."""
    from swm.tom.runner import finished_keys, item_thread

    settings = context_settings(ctx)
    done = finished_keys(ctx.experience_store(), run_id)
    todo = [(m, i) for m in modes for i in items if item_thread(run_id, m, i) not in done]
    if not todo:
        return 0, 0.0
    start = time.perf_counter()
    with ray_cluster(workers, address, db) as ray:
        startup = time.perf_counter() - start
        task = ray.remote(num_cpus=1, max_retries=max_retries)(_tom_item)
        pending = {task.remote(settings, str(db), run_id, mode, item): mode for mode, item in todo}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            mode = pending.pop(ready[0])
            row = ray.get(ready[0])
            if on_done is not None:
                on_done(mode, row)
    return len(todo), startup


def _ray() -> ModuleType:
    try:
        import ray  # optional: the [workers] extra
    except ImportError as exc:
        raise InputError("--workers needs Ray", "pip install -e '.[workers]'") from exc
    return ray


def token_available() -> bool:
    """Tell whether a Ray token is at hand: ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return True
    return (Path.home() / ".ray" / "auth_token").is_file()


def join_settings(address: str) -> None:
    """Turn Ray's token mode on for joining ``address`` when a token is at hand and no mode was chosen.

    Ray 2.60 sends its token to a cluster at an explicit address only when ``RAY_AUTH_MODE=token``;
    with the mode unset it connects without one and a cluster that requires it answers
    ``InvalidAuthToken`` on every retry. A cluster without authentication accepts a token, so
    sending one whenever it is at hand is safe. ``RAY_AUTH_MODE=disabled`` is respected.
    """
    if address != "auto" and "RAY_AUTH_MODE" not in os.environ and token_available():
        os.environ["RAY_AUTH_MODE"] = "token"
        if "ray" in sys.modules:  # Ray reads its config when imported: read it again, as Ray itself does
            from ray._raylet import Config  # type: ignore[attr-defined]

            Config.initialize("")


def _join_failed(address: str, exc: BaseException) -> InputError:
    mode = os.environ.get("RAY_AUTH_MODE", "unset")
    hint = ("if the cluster uses token authentication, give this process its token: RAY_AUTH_MODE=token with "
            "RAY_AUTH_TOKEN=<the head's ~/.ray/auth_token> (or RAY_AUTH_TOKEN_PATH); see docs/ray.md")
    if token_available() and mode == "token":
        hint = "check that the token is the head's (ray get-auth-token on the head) and the address; see docs/ray.md"
    first = " ".join(str(exc).split())[:200]
    return InputError(f"cannot join the Ray cluster at {address} ({type(exc).__name__}: {first}; "
                      f"RAY_AUTH_MODE {mode})", hint)


def _start_failed(workers: int, exc: BaseException) -> EnvironmentFault:
    first = " ".join(str(exc).split())[:200]
    fault = EnvironmentFault(f"Ray could not start a local cluster of {workers} CPUs ({type(exc).__name__}: {first})",
                             "on a busy machine its processes may need longer than Ray's 30 s: run again when the "
                             "load is lower, or with fewer --workers; finished items are kept (rerun with the same "
                             "--db and --thread-id)")
    fault.exit_code = 3  # a service that did not come up: the same command may pass later
    return fault


@contextmanager
def ray_cluster(workers: int, address: str | None, db: str | Path) -> Iterator[ModuleType]:
    """Join ``address`` (or start a local cluster of ``workers`` CPUs) for the block; yield the ``ray`` module."""
    from swm.checkpoints import is_postgres

    local = address in (None, "local")
    if not local:
        join_settings(str(address))  # before Ray is imported: it reads RAY_AUTH_MODE then
    ray = _ray()
    if not is_postgres(db) and not local:
        raise InputError("workers on other machines need a shared database",
                         "pass --db postgresql://… (a SQLite file is only shared on one machine)")
    if ray.is_initialized():
        yield ray
        return
    # Workers on a joined cluster get these from the job's runtime_env. A local cluster's raylet is this process's
    # child, so its workers inherit them already; naming them again made Ray start two more workers for that env
    # beside the two it prestarts, and the first tasks waited for them (7.2 s against 2.4 s on a loaded 2-core box).
    env = {} if local else {k: os.environ[k] for k in ("PYTHONPATH", "SWM_WORKER_TRACE", "OPENAI_BASE_URL",
                                                       "LANGSMITH_TRACING") if k in os.environ}
    # ray.init replaces the SIGTERM handler with sys.exit: the run would die mid-step, with Ray's threads in
    # flight (SIGABRT and a C++ stack dump), instead of draining (`swm.drain`); the handler in place is put back
    main_thread = threading.current_thread() is threading.main_thread()
    on_sigterm = signal.getsignal(signal.SIGTERM) if main_thread else None
    if local:
        # Ray starts its workers at nice 19 (its default for a cluster that also runs other jobs): here they are
        # the run itself, and beside any other load on the machine they starved (4 random-seat games: 125 s at a
        # load of 8, 14 s with the workers at the driver's priority). A RAY_worker_niceness of the user's stays.
        os.environ.setdefault("RAY_worker_niceness", "0")
    try:
        ray.init(address=None if local else address, num_cpus=workers if local else None, include_dashboard=False,
                 log_to_driver=False, runtime_env={"env_vars": env} if env else None)
    except (ConnectionError, getattr(ray.exceptions, "AuthenticationError", ConnectionError)) as exc:
        if local:
            raise _start_failed(workers, exc) from exc
        raise _join_failed(str(address), exc) from exc
    except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception when its node is slow to start (busy machine)
        raise (_start_failed(workers, exc) if local else _join_failed(str(address), exc)) from exc
    finally:
        if on_sigterm is not None:
            signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield ray
    finally:
        ray.shutdown()


def _thread(graph_name: str, settings: dict[str, Any], db: str, thread_id: str, inputs: dict[str, Any]) -> None:
    """Run (or resume) one ``graphs.<graph_name>`` thread in a worker on the shared checkpointer and store."""
    import importlib

    from langchain_core.runnables import RunnableConfig

    from swm.checkpoints import open_saver, run_thread

    builder = importlib.import_module(f"swm.graphs.{graph_name}").build()
    with _worker_context(settings, db, thread_id) as ctx:
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        with open_saver(db) as saver:
            run_thread(builder.compile(checkpointer=saver), inputs, config, ctx)


GRAPHS = ("episode", "game")  # graphs whose threads the benches hand to workers


def player_on_ray(ray: ModuleType, graph_name: str, ctx: SWMContext, db: str | Path,
                  max_retries: int = 3) -> Callable[[str, dict[str, Any]], None]:
    """Return ``play(thread_id, inputs)`` that runs one ``graph_name`` thread as a Ray task and waits for it.

    A bench calls it from as many threads as there are workers, so that many episodes or games
    run at once; errors raised in the worker (a failed model call) reach the bench as themselves.
    """
    if graph_name not in GRAPHS:
        raise ValueError(f"no worker player for graph {graph_name!r}")
    settings = context_settings(ctx)
    task = ray.remote(num_cpus=1, max_retries=max_retries)(_thread)

    def play(thread_id: str, inputs: dict[str, Any]) -> None:
        # the drain is this process's: a thread handed to a worker would not see it, so none is handed out once
        # it is asked for (those in flight finish there and are checkpointed, as a local step in flight does)
        drain.stop_if_drained()
        ray.get(task.remote(graph_name, settings, str(db), thread_id, inputs))

    return play


@functools.cache
def _lifelong_graphs() -> tuple[CompiledStateGraph[EpisodeState, EpisodeContext, EpisodeInput, EpisodeOutput],
                             CompiledStateGraph[GameGraphState, GameContext, GameInput, GameOutput]]:
    """Compile the episode and game graphs once per worker process, with no checkpointer (as graphs/lifelong.py)."""
    from swm.graphs import episode, game

    return (episode.build(policy_checkpointer=False).compile(checkpointer=False),
            game.build().compile(checkpointer=False))


def _lifelong_job(settings: dict[str, Any], db: str, job: dict[str, Any]) -> LifelongState:
    """Play one lifelong episode job in a worker; return the Send branch's update (counts, usage, provenance)."""
    from swm.lifelong.episodes import play_job

    with _worker_context(settings, db, job["episode_id"]) as ctx:
        return play_job(job, ctx, *_lifelong_graphs())  # type: ignore[arg-type]


def lifelong_runner_on_ray(ray: ModuleType, ctx: SWMContext, db: str | Path,
                           max_retries: int = 3) -> Runner:
    """Return a `graphs.lifelong.build` runner that plays each collect/evaluate episode as a Ray task."""
    settings = context_settings(ctx)
    task = ray.remote(num_cpus=1, max_retries=max_retries)(_lifelong_job)

    def run(job: EpisodeJob, _ctx: LifelongContext) -> LifelongState:
        out: LifelongState = ray.get(task.remote(settings, str(db), dict(job)))
        return out

    return run
