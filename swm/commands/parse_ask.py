"""``swm parse`` and ``swm ask``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import click

from swm.commands._common import (
    aliased,
    echo_json,
    encoding_option,
    make_context,
    model_options,
    prompts_option,
    read_text,
    repair_options,
    run_graph,
    run_options,
)
from swm.commands.progress import PROGRESS_ALIASES, printer, quiet_option
from swm.defaults import MODES, NEEDS_PARSE
from swm.defaults import PARSE_TASKS as TASKS
from swm.errors import InputError, ModelOutputError, NoSocialState
from swm.usage import total_usage

if TYPE_CHECKING:
    from swm.context import SWMContext
    from swm.graph_state import SocialWorldState


def parse_again(values: Mapping[str, object]) -> str | None:
    """Where a finished thread with no usable parse goes on again on a rerun: from its start (None: it has one).

    Its failed replies are not replayed: ``prepare`` runs again and, the story not being in the parse
    cache, starts a fresh parse (the cache may also hold it by now, from another thread).
    """
    from langgraph.constants import START  # deferred: --help

    return START if values.get("world") is None else None


def ask_again(values: Mapping[str, object]) -> str | None:
    """Where a finished ask thread with no usable answer goes on again on a rerun (None: it has one).

    With no usable parse in an S3AP mode, from its start (the parse is made again, `parse_again`);
    otherwise after ``prepare``, whose route skips a parse already made, so only the answer call is
    made again.
    """
    if values.get("answer"):
        return None
    from langgraph.constants import START  # deferred: --help

    return START if values.get("mode") in NEEDS_PARSE and values.get("world") is None else "prepare"


def _usage_line(out: dict[str, Any]) -> str:
    total = total_usage(out.get("usage"))
    return (f"calls {total['calls']}, tokens {total['prompt_tokens']}+{total['completion_tokens']}, "
            f"model time {total['seconds']:.1f} s")


@click.command("parse", cls=aliased(**PROGRESS_ALIASES))
@click.argument("story", metavar="STORY_FILE")
@click.option("--task", type=click.Choice(TASKS), default="generic", show_default=True,
              help="Task-specific parser instructions (appendix A.4).")
@click.option("--max-attempts", default=3, show_default=True, help="Parse → check → repair attempts.")
@click.option("--max-chars", default=60_000, show_default=True, help="Refuse narratives longer than this.")
@click.option("--perspective", "agent", default=None, metavar="AGENT",
              help="Print only what AGENT observed, step by step (its memory), instead of the S3AP.")
@repair_options
@encoding_option
@prompts_option
@model_options("parser")
@run_options
@quiet_option
def parse_command(story: str, task: str, max_attempts: int, max_chars: int, agent: str | None,
                  repair_temperature: float | None, repair_seed: int | None, encoding: str, db: str | None,
                  thread_id: str | None, as_json: bool, quiet: bool, **models: Any) -> None:
    """Parse STORY_FILE ('-' for stdin) into its social state and print it as the paper's S3AP JSON.

    Each step (parse, repair attempts) is shown on stderr as it starts (--no-progress: none).
    """
    from swm.graphs import parse

    ctx = make_context(db, task=task, max_parse_attempts=max_attempts, max_narrative_chars=max_chars,
                       repair_temperature=repair_temperature, repair_seed=repair_seed, **models)
    out, _ = run_graph(parse.build(), {"narrative": read_text(story, encoding)}, ctx, db, thread_id, "parse",
                       printer(quiet), redo=parse_again)
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
                                           "parse_attempts", "story_hash", "prompts", "models", "usage")})
    elif world is not None:
        click.echo(json.dumps(world.to_s3ap(), indent=2, ensure_ascii=False))
        for problem in out.get("parse_problems") or []:
            click.echo(f"problem: {problem}", err=True)
        click.echo(("parse from cache; " if out.get("parse_cached") else "") + _usage_line(out), err=True)
    if world is None:
        raise ModelOutputError(unusable_parse(out), "its raw replies are in the store's failed_replies table; "
                                                    "try another --parser-model or more --max-attempts")


def failed_check_warning(out: Mapping[str, Any]) -> str:
    """Say in one line that an answer stands on a parse that failed its check, and what failed."""
    errors = [p.removeprefix("error: ") for p in out.get("parse_problems") or [] if p.startswith("error: ")]
    tried = out.get("parse_attempts") or []
    repeated = next((a for a in tried if a.get("repeats") is not None), None)
    how = ("from the cache" if out.get("parse_cached") else
           f"after {out.get('attempts') or 0} attempt(s)" + (
               f", the repairs stopped when attempt {repeated['attempt']} repeated attempt {repeated['repeats']}"
               if repeated else ""))
    first = errors[0][:200] if errors else "see parse_problems in --json"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"warning: the answer stands on a parse that failed its check ({how}): {first}{more}"


def unusable_parse(out: dict[str, Any]) -> str:
    """Say in one line why a parse run ended with no social state."""
    problems = out.get("parse_problems") or ["no reply could be read"]
    reason = problems[0].removeprefix("error: ")
    return f"no usable parse after {out.get('attempts') or 0} attempt(s): {reason[:300]}"


@click.command("ask", cls=aliased(**PROGRESS_ALIASES))
@click.option("--story", required=True, metavar="FILE", help="The narrative ('-' for stdin).")
@click.option("--question", required=True, help="The theory-of-mind question.")
@click.option("--mode", type=click.Choice(MODES), default="s3ap", show_default=True,
              help="vanilla, cot (chain of thought), s3ap (story + S3AP, the paper's setting), s3ap_only.")
@click.option("--task", type=click.Choice(TASKS), default="generic", show_default=True)
@click.option("--max-attempts", default=3, show_default=True, help="Parse → check → repair attempts.")
@click.option("--max-chars", default=60_000, show_default=True, help="Refuse narratives longer than this.")
@click.option("--allow-without-state", is_flag=True, default=False,
              help="In an S3AP mode, answer from the story alone when no social state could be parsed "
                   "(the output says so). Without it such a question gets no answer and exit code 6.")
@repair_options
@encoding_option
@prompts_option
@model_options("parser", "qa")
@run_options
@quiet_option
def ask_command(story: str, question: str, mode: str, task: str, max_attempts: int, max_chars: int,
                allow_without_state: bool, repair_temperature: float | None, repair_seed: int | None,
                encoding: str, db: str | None, thread_id: str | None, as_json: bool, quiet: bool,
                **models: Any) -> None:
    """Answer a theory-of-mind question about a story; S3AP modes parse it first (cached per story).

    Each step is shown on stderr as it starts (--no-progress: none). In s3ap and s3ap_only modes the answer
    stands on the parsed social state; when none could be parsed, nothing is answered (exit 6) unless
    --allow-without-state, and the output says which (``social_state`` in --json). An answer on a parse that
    failed its check on every attempt is given with a warning line on stderr naming what failed
    (``social_state`` "failed check").
    """
    from swm.graphs import ask

    ctx = make_context(db, task=task, max_parse_attempts=max_attempts, max_narrative_chars=max_chars,
                       allow_without_state=allow_without_state, repair_temperature=repair_temperature,
                       repair_seed=repair_seed, **models)
    inputs = {"narrative": read_text(story, encoding), "question": question, "mode": mode}
    out, thread = run_graph(ask.build(), inputs, ctx, db, thread_id, "ask", printer(quiet), redo=ask_again)
    from swm.nodes.qa import state_use  # deferred: --help

    used = out.get("social_state") or state_use(cast("SocialWorldState", out), mode)
    record_ask(ctx, thread, question, mode, out, used)
    if used == "failed check" and out.get("answer"):
        click.echo(failed_check_warning(out), err=True)
    if as_json:
        echo_json({**{k: out.get(k) for k in ("answer", "reasoning", "answer_error", "mode", "world",
                                              "parse_problems", "parse_attempts", "parse_cached", "prompts",
                                              "models", "usage")},
                   "social_state": used, "story_hash": out.get("story_hash"), "thread_id": thread})
    elif out.get("answer"):
        click.echo(out["answer"])
        note = {"parsed": "", "cached": "parse from cache; ", "not used": "",
                "failed check": "parse from cache; " if out.get("parse_cached") else "",
                "none": "answered WITHOUT a social state (no parse was usable); "}[used]
        click.echo(note + _usage_line(out), err=True)
    if used == "none" and not out.get("answer"):
        raise NoSocialState(f"no answer: {unusable_parse(out)}",
                            "rerun with --allow-without-state to answer from the story alone, or try another "
                            "--parser-model or more --max-attempts")
    if not out.get("answer"):
        reason = out.get("answer_error") or "the answer was empty"
        raise ModelOutputError(f"no usable answer: {' '.join(str(reason).split())[:300]}",
                               "its raw reply is in the store's failed_replies table; try another --qa-model")


ASKS_TABLE = "swm_asks"


def record_ask(ctx: SWMContext, thread: str, question: str, mode: str, out: dict[str, Any], used: str) -> None:
    """Keep an ask's question, answer and the social state it stood on, for the results browser."""
    ctx.experience_store().insert(ASKS_TABLE, {
        "thread_id": thread, "question": question, "mode": mode, "answer": out.get("answer") or "",
        "reasoning": out.get("reasoning") or "", "answer_error": out.get("answer_error") or "",
        "social_state": used, "story_hash": out.get("story_hash") or "", "task": out.get("task") or "",
        "parse_problems": out.get("parse_problems") or [], "models": out.get("models") or {},
        "usage": total_usage(out.get("usage"))}, pk="thread_id", replace=True)
