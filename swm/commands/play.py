"""``swm play``: one social episode, printed as a transcript with predictions and the judge's scores."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from swm.commands._common import (
    act_order_option,
    aliased,
    echo_json,
    make_context,
    model_options,
    run_graph,
    run_options,
)
from swm.commands.progress import PROGRESS_ALIASES, printer, quiet_option
from swm.defaults import EPISODE_POLICIES as POLICIES

if TYPE_CHECKING:
    from swm.context import SWMContext

EPISODE_ROLES = ("agent", "partner", "world_model", "judge")


def inject_test_models(ctx: SWMContext) -> None:
    """Use chat models handed in through click's ``obj`` (tests: ``CliRunner.invoke(..., obj=...)``)."""
    obj = click.get_current_context().find_root().obj
    if isinstance(obj, dict):
        if obj.get("llm") is not None:
            ctx.llm = obj["llm"]
        ctx.chat_models.update(obj.get("chat_models") or {})


@click.command("play", cls=aliased(**PROGRESS_ALIASES))
@click.option("--scenario", "scenario_ref", default="swm-bike-sale", show_default=True, metavar="ID|FILE",
              help="A shipped scenario id (swm-bike-sale, swm-late-project, swm-noisy-neighbour, "
                   "swm-mutual-friend, swm-flat-chores), a SOTOPIA id / env id / codename of the "
                   "SOTOPIA sample shipped in the package, or a .jsonl/.json scenario file (first row).")
@click.option("--policy", type=click.Choice(POLICIES), default="foresee", show_default=True,
              help="Policy of the tested agent (role 'agent'): plain (1 call/turn), foresee (3), lookahead "
                   "(N + N·k + N·[N>1] + 1).")
@click.option("--partner-policy", type=click.Choice(POLICIES), default="plain", show_default=True,
              help="Policy of every other seat (role 'partner').")
@click.option("--agent", "tested", default=None, metavar="NAME", help="The tested seat [default: the first].")
@click.option("--max-turns", type=int, default=20, show_default=True, help="Turn limit (SOTOPIA: 20).")
@click.option("--width", type=int, default=1, show_default=True, help="Look-ahead candidates N (policy lookahead).")
@click.option("--depth", type=int, default=1, show_default=True, help="Look-ahead steps k (policy lookahead).")
@click.option("--no-judge", is_flag=True, help="Skip the SOTOPIA-EVAL judge.")
@click.option("--judge-protocol", type=click.Choice(["sotopia", "swm"]), default="sotopia", show_default=True,
              help="sotopia: sotopia's own evaluator (one call for all agents, its full rubric); swm: one call "
                   "per agent with swm's short rubric (docs/protocols.md).")
@click.option("--export", "export_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the episode as one JSONL row (datasets.load_dataset('json') loads it).")
@act_order_option
@model_options(*EPISODE_ROLES)
@run_options
@quiet_option
def play_command(scenario_ref: str, policy: str, partner_policy: str, tested: str | None, max_turns: int,
                 width: int, depth: int, no_judge: bool, judge_protocol: str, export_path: Path | None,
                 act_order: str, db: str | None, thread_id: str | None, as_json: bool, quiet: bool,
                 **models: Any) -> None:
    """Play one social episode and print its transcript, predicted mental states and judge scores.

    Each turn is shown on stderr as it is played (--no-progress: none).

    Killed part-way, it resumes at the turn where it stopped when rerun with the same --db and
    --thread-id (finished turns are not replayed).
    """
    from swm.graphs import episode
    from swm.scenarios import resolve
    from swm.social.export import episode_row, transcript, write_jsonl
    from swm.social.scenario_store import put_scenario

    scenario = resolve(scenario_ref)
    seat = tested or scenario.names[0]
    ctx = make_context(db, lookahead_width=width, lookahead_depth=depth, act_order=act_order, **models)
    inject_test_models(ctx)
    if not no_judge and ctx.judge_is_agent():
        click.echo(f"warning: the judge is the tested agent's own model ({ctx.spec_for('judge')}); pass "
                   "--judge-model for a separate judge", err=True)
    thread = thread_id or f"play-{scenario.id}-{uuid.uuid4().hex[:10]}"
    policies = {name: (policy if name == seat else partner_policy) for name in scenario.names}
    # by reference: the scenario is written to the store once, never into every checkpoint
    inputs = {"scenario": put_scenario(ctx.experience_store(), scenario), "episode_id": thread, "policies": policies,
              "tested_agent": seat, "max_turns": max_turns, "judge": not no_judge,
              "judge_protocol": judge_protocol}
    start = time.perf_counter()
    out, _ = run_graph(episode.build(), inputs, ctx, db, thread, "play", printer(quiet))
    wall = time.perf_counter() - start
    store = ctx.experience_store()
    if export_path is not None:
        write_jsonl(store, [out["episode_id"]], export_path)
    if as_json:
        echo_json(episode_row(store, out["episode_id"]))
        return
    click.echo(transcript(store, out["episode_id"]))
    click.echo(f"wall time {wall:.1f} s", err=True)
