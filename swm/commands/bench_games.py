"""``swm bench games``: hidden-role games (Werewolf) per policy setting, resumable, then one table."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from swm.commands._common import (
    comma_list,
    concurrency_option,
    db_path,
    finish_bench,
    make_context,
    model_options,
    record_run,
    resolve_concurrency,
    run_options,
    serving_record,
    writable_out,
)
from swm.commands.invocation import config_option
from swm.commands.play import inject_test_models
from swm.errors import InputError
from swm.filenames import file_name

if TYPE_CHECKING:
    from swm.checkpoints.environment import BatchRun
    from swm.checkpoints.store import StoreRecords
    from swm.context import SWMContext
    from swm.games.base import HiddenRoleGame
    from swm.games.records import GameRecord

GAME_ROLES = ("agent", "partner")


def game_id_for(run_id: str, policy: str, index: int, side: str = "all", opponent: str = "same") -> str:
    """Name a game's thread: the run, the setting and the seed index (a rerun finds the same ids)."""
    setting = policy if side == "all" else f"{side}-{policy}-vs-{opponent}"
    return f"{run_id}-{setting}-{index}"


def game_inputs(game: str, game_id: str, seed: int, n_players: int, policy: str, side: str, opponent: str,
                options: dict[str, Any]) -> dict[str, Any]:
    """Return the game graph's input for one game of a setting (``side`` ``all``: the policy plays every seat)."""
    from swm.games import get_game

    sides = get_game(game).sides
    if side == "all":
        policies = dict.fromkeys(sides, policy)
    else:
        other = policy if opponent == "same" else opponent
        policies = {s: (policy if s == side else other) for s in sides}
    return {"game": game, "game_id": game_id, "seed": seed, "n_players": n_players, "options": options,
            "policies": policies, "tested_side": None if side == "all" else side}


def run_games(ctx: SWMContext, db: str | Path, jobs: list[tuple[str, dict[str, Any]]],
              on_done: Callable[[], None] | None = None, workers: int = 0,
              ray_address: str | None = None, concurrency: int = 1) -> BatchRun:
    """Play (or resume) every game not yet done, each on its own checkpoint thread; one failure loses no other.

    ``workers`` > 0 plays them as Ray tasks (`swm.commands.workers`), that many at once; otherwise
    ``concurrency`` games are played at once in threads.
    """
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import ExitStack

    from swm.checkpoints import open_saver, run_thread
    from swm.checkpoints.environment import BatchRun, item_failure  # deferred: --help
    from swm.games.store import get_game_row, write_game
    from swm.graphs import game as game_graph

    store = ctx.experience_store()
    counts = {"ran": 0, "skipped": 0}
    lock = threading.Lock()
    failed: dict[str, str] = {}
    start = time.perf_counter()
    with ExitStack() as stack:
        # a cluster only when a game is left to play: a rerun of a finished run starts none
        if workers > 0 and any((get_game_row(store, gid) or {}).get("status") != "done" for gid, _ in jobs):
            from swm.commands.workers import player_on_ray, ray_cluster

            play = player_on_ray(stack.enter_context(ray_cluster(workers, ray_address, db)), "game", ctx, db)
        else:
            graph = game_graph.build().compile(checkpointer=stack.enter_context(open_saver(db)))

            def play(game_id: str, inputs: dict[str, Any]) -> None:
                run_thread(graph, inputs, {"configurable": {"thread_id": game_id}}, ctx)

        def one(game_id: str, inputs: dict[str, Any]) -> None:
            row = get_game_row(store, game_id)
            if row is not None and row.get("status") == "done":
                with lock:
                    counts["skipped"] += 1
            else:
                began = time.perf_counter()
                try:
                    play(game_id, inputs)
                    with lock:
                        counts["ran"] += 1
                except Exception as exc:  # noqa: BLE001 - one broken game must not lose the others
                    failed[game_id] = item_failure(exc)
                row = get_game_row(store, game_id) or {}
                if row:
                    spent = time.perf_counter() - began + float(row.get("wall_seconds") or 0)
                    write_game(store, {**row, "wall_seconds": round(spent, 3)})
            if on_done:
                on_done()

        with ThreadPoolExecutor(max_workers=workers if workers > 0 else max(1, concurrency)) as pool:
            for future in [pool.submit(one, game_id, inputs) for game_id, inputs in jobs]:
                future.result()
    return BatchRun(ran=counts["ran"], skipped=counts["skipped"], failed=failed, wall=time.perf_counter() - start)


@click.command("games")
@config_option
@click.option("--game", default="werewolf", show_default=True, help="A registered hidden-role game.")
@click.option("--n", "n", type=int, default=10, show_default=True,
              help="Games per policy setting; game i uses seed i, so every setting plays the same deals.")
@click.option("--players", "n_players", type=int, default=6, show_default=True, help="Seats (werewolf: 5 to 8).")
@click.option("--policies", default="plain,random", show_default=True,
              help="Comma list of policies to compare: plain (the model, one call a move), random (code baseline).")
@click.option("--side", default="all", show_default=True,
              help="The side that plays each listed policy: all (self-play: every seat), or a side "
                   "(werewolf: village, werewolves) against --opponent.")
@click.option("--opponent", default="same", show_default=True,
              help="The other side's policy when --side names one: same, plain or random (a fixed opponent).")
@click.option("--max-rounds", type=int, default=None, help="Rounds before a draw (werewolf default 6).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for games.md, games.json and games.jsonl [default: swm-results/<run id>].")
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
@concurrency_option("Games")
@click.option("--workers", type=int, default=0, show_default=True,
              help="Play the games as Ray tasks on this many worker processes (0: here, in threads).")
@click.option("--ray-address", default=None, metavar="ADDRESS",
              help="Join a running Ray cluster ('auto', ray://head:10001); needs --db postgresql://….")
@model_options(*GAME_ROLES)
@run_options
def games_command(game: str, n: int, n_players: int, policies: str, side: str, opponent: str,
                  max_rounds: int | None, out_dir: Path | None, no_progress: bool, concurrency: int | None,
                  workers: int,
                  ray_address: str | None, db: str | None, thread_id: str | None, as_json: bool, **models: Any) -> None:
    """Play hidden-role games per policy setting and write win rates per side (95% CI) and game metrics.

    Also reports vote accuracy against chance, the seer's usefulness, the illegal-action rate,
    turns, rounds, calls and tokens per game. The tested side's seats use the agent model role,
    the others the partner role (--partner-model: a fixed opponent model). Rerun with the same
    --db and --thread-id to resume: finished games are skipped, a game killed mid-move resumes at
    that move.
    """
    from tqdm import tqdm

    from swm.games import POLICIES, default_players, get_game
    from swm.games.metrics import markdown

    spec = get_game(game)
    chosen = comma_list(policies, POLICIES, "policy")
    _check_sides(spec, game, side, opponent, n)
    options = {"max_rounds": max_rounds} if max_rounds is not None else {}
    ctx = make_context(db, **models)
    inject_test_models(ctx)
    run_id = thread_id or f"games-{uuid.uuid4().hex[:10]}"
    folder = writable_out(out_dir or Path("swm-results") / file_name(run_id))
    jobs = [(gid, game_inputs(game, gid, i, n_players, p, side, opponent, options))
            for p in chosen for i in range(n) if (gid := game_id_for(run_id, p, i, side, opponent))]
    try:
        spec.deal(default_players(n_players), 0, options)  # bad --players or --max-rounds fail here, not per game
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    record_run(ctx.experience_store(), run_id, "games", "game")
    click.echo(f"run {run_id}: {n} {game} games × {len(chosen)} policies, {n_players} players "
               f"(rerun with --thread-id {run_id} --db {db_path(db)} to resume if interrupted)", err=True)
    in_flight = workers if workers > 0 else resolve_concurrency(ctx, concurrency)
    with tqdm(total=len(jobs), desc="games", disable=no_progress) as bar:
        result = run_games(ctx, db_path(db), jobs, on_done=lambda: bar.update(1), workers=workers,
                           ray_address=ray_address, concurrency=in_flight)
    table, records_out = _game_table(ctx.experience_store(), spec, chosen, run_id, n, side, opponent)
    folder.mkdir(parents=True, exist_ok=True)
    text = markdown(table, list(spec.sides))
    meta = {"run_id": run_id, "game": game, "n": n, "players": n_players, "policies": chosen, "side": side,
            "opponent": opponent, "options": options, "models": {r: ctx.spec_for(r) for r in GAME_ROLES},
            "embedded": ctx.uses_embedded(), "ran": result["ran"], "skipped": result["skipped"],
            "failed": result["failed"], "wall_seconds": round(result["wall"], 1),
            "serving": serving_record(ctx, in_flight)}
    with (folder / "games.jsonl").open("w", encoding="utf-8") as fh:
        for record in records_out:
            fh.write(record.model_dump_json() + "\n")
    finish_bench(folder, "games", f"{game} run {run_id}", text, meta, table, result, as_json, "game")


def _check_sides(spec: HiddenRoleGame, game: str, side: str, opponent: str, n: int) -> None:
    """Refuse a side the game lacks, an unknown opponent policy and fewer than one game."""
    from swm.games import POLICIES

    if side != "all" and side not in spec.sides:
        raise InputError(f"unknown side {side!r} for {game}", f"use all or one of {', '.join(spec.sides)}")
    if opponent not in ("same", *POLICIES):
        raise InputError(f"unknown opponent policy {opponent!r}", f"use same or one of {', '.join(POLICIES)}")
    if n < 1:
        raise InputError(f"--n must be at least 1, got {n}")


def _game_table(store: StoreRecords, spec: HiddenRoleGame, chosen: list[str], run_id: str, n: int, side: str,
                opponent: str) -> tuple[list[dict[str, Any]], list[GameRecord]]:
    """One row of metrics per policy setting over its finished games; and those games' records."""
    from swm.games.metrics import summarise_games
    from swm.games.store import get_game_row, load_record

    table, records_out = [], []
    for policy in chosen:
        ids = [game_id_for(run_id, policy, i, side, opponent) for i in range(n)]
        done = [gid for gid in ids if (get_game_row(store, gid) or {}).get("status") == "done"]
        records = [load_record(store, gid) for gid in done]
        records_out += records
        setting = policy if side == "all" else f"{side}={policy}, others={policy if opponent == 'same' else opponent}"
        table.append({"setting": setting, "policy": policy, "metrics": summarise_games(records, spec.sides)})
    return table, records_out
