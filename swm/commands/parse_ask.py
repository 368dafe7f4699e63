"""``swm parse`` and ``swm ask``."""

from __future__ import annotations

import json
from typing import Any

import click

from swm.commands._common import (
    echo_json,
    encoding_option,
    make_context,
    model_options,
    prompts_option,
    read_text,
    run_graph,
    run_options,
)
from swm.commands.progress import printer, quiet_option
from swm.errors import InputError, ModelOutputError
from swm.nodes.parse import MODES, TASKS
from swm.usage import total_usage


def _usage_line(out: dict[str, Any]) -> str:
    total = total_usage(out.get("usage"))
    return (f"calls {total['calls']}, tokens {total['prompt_tokens']}+{total['completion_tokens']}, "
            f"model time {total['seconds']:.1f} s")


@click.command("parse")
@click.argument("story", metavar="STORY_FILE")
@click.option("--task", type=click.Choice(TASKS), default="generic", show_default=True,
              help="Task-specific parser instructions (appendix A.4).")
@click.option("--max-attempts", default=3, show_default=True, help="Parse → check → repair attempts.")
@click.option("--max-chars", default=60_000, show_default=True, help="Refuse narratives longer than this.")
@click.option("--perspective", "agent", default=None, metavar="AGENT",
              help="Print only what AGENT observed, step by step (its memory), instead of the S3AP.")
@encoding_option
@prompts_option
@model_options("parser")
@run_options
@quiet_option
def parse_command(story: str, task: str, max_attempts: int, max_chars: int, agent: str | None, encoding: str,
                  db: str | None, thread_id: str | None, as_json: bool, quiet: bool, **models: Any) -> None:
    """Parse STORY_FILE ('-' for stdin) into its social state and print it as the paper's S3AP JSON.

    Each step (parse, repair attempts) is shown on stderr as it starts (--quiet: none).
    """
    from swm.graphs import parse

    ctx = make_context(db, task=task, max_parse_attempts=max_attempts, max_narrative_chars=max_chars, **models)
    out, _ = run_graph(parse.build(), {"narrative": read_text(story, encoding)}, ctx, db, thread_id, "parse",
                       printer(quiet))
    world = out.get("world")
    if agent is not None:
        if world is None:
            raise InputError("the story could not be parsed, so there is no perspective to show",
                             "see the problems with --json")
        try:
            memory = world.perspective(agent)
        except KeyError as exc:
            raise InputError(str(exc.args[0]), "use one of the agents the parse found") from exc
        for entry in memory:
            mental = f"  [mental state: {entry.mental_state}]" if entry.mental_state else ""
            click.echo(f"t={entry.timestep}: {entry.observation}{mental}")
        return
    if as_json:
        echo_json({k: out.get(k) for k in ("world", "report", "parse_problems", "parse_cached", "attempts",
                                           "story_hash", "prompts", "models", "usage")})
    elif world is not None:
        click.echo(json.dumps(world.to_s3ap(), indent=2, ensure_ascii=False))
        for problem in out.get("parse_problems") or []:
            click.echo(f"problem: {problem}", err=True)
        click.echo(("parse from cache; " if out.get("parse_cached") else "") + _usage_line(out), err=True)
    if world is None:
        raise ModelOutputError(unusable_parse(out), "its raw replies are in the store's failed_replies table; "
                                                    "try another --parser-model or more --max-attempts")


def unusable_parse(out: dict[str, Any]) -> str:
    """Say in one line why a parse run ended with no social state."""
    problems = out.get("parse_problems") or ["no reply could be read"]
    reason = problems[0].removeprefix("error: ")
    return f"no usable parse after {out.get('attempts') or 0} attempt(s): {reason[:300]}"


@click.command("ask")
@click.option("--story", required=True, metavar="FILE", help="The narrative ('-' for stdin).")
@click.option("--question", required=True, help="The theory-of-mind question.")
@click.option("--mode", type=click.Choice(MODES), default="s3ap", show_default=True,
              help="vanilla, cot (chain of thought), s3ap (story + S3AP, the paper's setting), s3ap_only.")
@click.option("--task", type=click.Choice(TASKS), default="generic", show_default=True)
@click.option("--max-attempts", default=3, show_default=True, help="Parse → check → repair attempts.")
@click.option("--max-chars", default=60_000, show_default=True, help="Refuse narratives longer than this.")
@encoding_option
@prompts_option
@model_options("parser", "qa")
@run_options
@quiet_option
def ask_command(story: str, question: str, mode: str, task: str, max_attempts: int, max_chars: int, encoding: str,
                db: str | None, thread_id: str | None, as_json: bool, quiet: bool, **models: Any) -> None:
    """Answer a theory-of-mind question about a story; S3AP modes parse it first (cached per story).

    Each step is shown on stderr as it starts (--quiet: none).
    """
    from swm.graphs import ask

    ctx = make_context(db, task=task, max_parse_attempts=max_attempts, max_narrative_chars=max_chars, **models)
    inputs = {"narrative": read_text(story, encoding), "question": question, "mode": mode}
    # a thread that ended with no usable answer (one bad reply) asks again on a rerun: after ``prepare``, whose
    # route skips a parse already made, so only the answer call is made again
    out, _ = run_graph(ask.build(), inputs, ctx, db, thread_id, "ask", printer(quiet),
                       redo=lambda values: None if values.get("answer") else "prepare")
    if as_json:
        echo_json({k: out.get(k) for k in ("answer", "reasoning", "answer_error", "mode", "world",
                                           "parse_problems", "parse_cached", "prompts", "models", "usage")})
    elif out.get("answer"):
        click.echo(out["answer"])
        click.echo(("parse from cache; " if out.get("parse_cached") else "") + _usage_line(out), err=True)
    if not out.get("answer"):
        reason = out.get("answer_error") or "the answer was empty"
        raise ModelOutputError(f"no usable answer: {' '.join(str(reason).split())[:300]}",
                               "its raw reply is in the store's failed_replies table; try another --qa-model")


def register(main: click.Group, bench: click.Group) -> None:
    main.add_command(parse_command)
    main.add_command(ask_command)
