"""Live progress on stderr for long commands: a line per step, turns as played, self-play iterations as they land.

It reads the same events Studio and the SDK get from a graph's ``custom`` stream, plus LangGraph's
``tasks`` stream for which node started; ``--no-progress`` turns it off (as it hides the bar of the
commands that draw one; ``--quiet`` and ``-q``, its old name here, still work, hidden: `PROGRESS_ALIASES`).
Lines go to stderr, so stdout keeps only the result (a transcript, a table, ``--json``). Each parse
attempt, once checked, gets a line with its sampling, tokens and seconds and what the check found
(`attempt_line`); a repeated parse says why it was repeated: the first issue the check found in the
attempt before.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import click

F = Callable[..., Any]
Listener = Callable[[str, Any], None]

# what a node is doing while it runs (shown when it starts); nodes not named here print nothing
STEPS = {"parse": "parsing the story into S3AP", "answer": "answering the question",
         "judge": "judging the episode", "rollout": "playing rollouts", "update": "PPO update",
         "evaluate": "playing the held-out tasks", "advantages": "computing advantages", "score": "scoring turns"}


# a number the step did not make (no KL without a KL penalty, no loss without an update): a dash, not a minus sign
MISSING = "—"

# the names the progress switch had before (parse, ask, play, selfplay): aliases for `swm.commands._common.aliased`
PROGRESS_ALIASES = {"quiet": "--no-progress", "q": "--no-progress"}


def quiet_option(f: F) -> F:
    """Add ``--no-progress`` (the ``quiet`` parameter): no progress lines on stderr while the command runs."""
    return click.option("--no-progress", "quiet", is_flag=True, default=False,
                        help="Print no progress lines while it runs.")(f)


def retry_reason(update: object) -> str | None:
    """Return why the parse check sent a story back to the parser (its first issue), or None when it did not."""
    if not isinstance(update, dict) or update.get("parse_done") is not False:
        return None
    issues = str(update.get("feedback") or "").partition("Issues:\n")[2].splitlines()
    first = issues[0].removeprefix("- ").strip() if issues else ""
    return (first[:117] + "…" if len(first) > 118 else first) or "the check found the parse unusable"


def attempt_line(update: object) -> str | None:
    """Return the line of the parse attempt the check just read (its sampling, tokens, seconds and verdict), or
    None when the update holds none."""
    if not isinstance(update, dict) or not update.get("parse_attempts"):
        return None
    a = update["parse_attempts"][-1]
    sampled = ", ".join(f"{k} {a[k]:g}" for k in ("temperature", "seed") if isinstance(a.get(k), int | float))
    verdict = (f"the same parse as attempt {a['repeats']}: repairs stopped" if a.get("repeats") is not None else
               f"failed the check: {a.get('errors')} error(s)" if a.get("errors") else "passed the check")
    return (f"parse attempt {a.get('attempt')}" + (f" ({sampled})" if sampled else "") +
            f": tokens {a.get('prompt_tokens', 0)}+{a.get('completion_tokens', 0)}, {a.get('seconds', 0.0):.1f} s; "
            + verdict)


def stats_cell(stats: dict[str, Any] | None) -> str:
    """Format per-role reward statistics as ``role mean±ci (n=…)``.

    A role with one value has no spread to estimate (`swm.stats.mean_ci` gives no half-width): its mean
    is shown without an interval, never as ``±0.00``.
    """
    if not stats:
        return MISSING
    return ", ".join(f"{role} {v['mean']:.2f}" + (f"±{v['ci95']:.2f}" if v.get("ci95") is not None else "")
                     + f" (n={v['n']})" for role, v in stats.items())


def iteration_line(i: object, s: dict[str, Any]) -> str:
    """Return the one-line summary of a self-play iteration (a number it lacks as `MISSING`, never ``None``)."""
    kl, loss = s.get("kl"), s.get("loss")
    legal = ((s.get("signals") or {}).get("legal") or {}).get("all") or {}
    game = (f"legal moves {legal['rate']:.2f} [{legal['ci95'][0]:.2f}, {legal['ci95'][1]:.2f}] (n={legal['n']}); "
            if legal.get("rate") is not None else "")
    rows, skipped = s.get("rows"), s.get("skipped_rows")
    trained = (f"rows {int(rows - (skipped or 0))} trained, {int(skipped or 0)} without signal skipped; "
               if isinstance(rows, int | float) else "")
    restarted = (f"{s['reseeded']} turns drawn after a server restart (not the seeded draw); "
                 if s.get("reseeded") else "")
    return (f"iteration {i} [{s['estimator']}, {s.get('sampler', 'torch')}]: reward {stats_cell(s.get('reward'))}; "
            f"held-out {stats_cell(s.get('eval_reward'))}; {game}{trained}KL {_number(kl, lambda v: round(v, 4))}; "
            f"loss {_number(loss, lambda v: f'{v:.4g}')}; filtered {_number(s.get('filtered_rate'))}; "
            f"failed {_number(s.get('failed'))}; {restarted}{s.get('tokens_per_s') or 0:.1f} tokens/s; "
            f"{s.get('seconds', 0):.0f} s")


def _number(value: object, shown: Callable[[float], object] = lambda v: v) -> str:
    """Render a number of the iteration line as ``shown`` says, or `MISSING` for one the iteration did not make."""
    return str(shown(value)) if isinstance(value, int | float) and not isinstance(value, bool) else MISSING


def fan_out_line(event: dict[str, Any]) -> str:
    """Return the line of a fan-out: its node's step with how many tasks it sends (``iteration 0: playing rollouts
    (4) …``), the step's one line for those tasks (`printer` says no other when they start)."""
    where = f"iteration {event['iteration']}" if "iteration" in event else f"cycle {event.get('cycle')}"
    count = event.get("episodes", event.get("rollouts", event.get("jobs", "")))
    step = STEPS.get(str(event.get("node")))
    if step is None:
        return f"{where}: {event['node']} {count}".rstrip()
    if count == 0:  # a resumed iteration whose tasks are all stored
        return f"{where}: {step}: none left to run"
    return f"{where}: {step}" + (f" ({count})" if count != "" else "") + " …"


def describe(event: dict[str, Any]) -> str | None:
    """Return the progress line for one ``custom`` event, or None for events not worth a line."""
    kind = event.get("event")
    if kind == "turn":
        line = f"turn {event['turn'] + 1}/{event['max_turns']} {event['agent']}: {event['action']}"
        return line + (f"  [episode ends: {event['end_reason']}]" if event.get("end_reason") else "")
    if kind == "move":
        return f"move {event.get('turn')} ({event.get('phase')}): {event.get('agent')}"
    if kind == "fan_out":
        return fan_out_line(event)
    if kind == "episode":
        failed = " failed" if event.get("failed") else ""
        return f"cycle {event.get('cycle')} {event.get('phase', '')}: episode {event.get('episode_id')}{failed}"
    if kind == "deploy":
        return f"cycle {event.get('cycle')}: deploy — serving {event.get('serving')}"
    return None


def finished(node: str, update: object) -> list[str]:
    """Return the lines for a node that finished: self-play rollouts and iteration summaries.

    These come from node results, not the custom stream, as self-play runs under
    ``max_concurrency: 1`` (see `checkpoints.run_thread`).
    """
    if not isinstance(update, dict):
        return []
    if node == "rollout" and update.get("rolled"):
        return ["rollout played"]
    if node == "evaluate":
        return [iteration_line(i, s) for i, s in sorted((update.get("summaries") or {}).items(),
                                                          key=lambda kv: int(kv[0]))]
    return []


def printer(quiet: bool, echo: Callable[[str], None] | None = None) -> Listener | None:
    """Return an ``on_event`` listener that prints progress lines with the elapsed time (None when quiet)."""
    if quiet:
        return None
    start = time.perf_counter()
    seen: Counter[str] = Counter()
    why: dict[str, str] = {}
    last: list[str] = [""]  # the node whose step line was said last: a fan-out's tasks (rollouts) say it once
    say = echo or (lambda line: click.echo(line, err=True))

    def listen(kind: str, payload: Any) -> None:
        stamp = f"[{time.perf_counter() - start:6.1f} s]"
        if kind == "node":
            seen[str(payload)] += 1
            step = STEPS.get(str(payload))
            repeated, last[0] = last[0] == str(payload) and payload != "parse", str(payload)
            if step and not repeated:
                again = ""
                if seen[payload] > 1 and payload == "parse":
                    reason = why.pop("parse", None)
                    again = f" (attempt {seen[payload]}" + (f", after: {reason})" if reason else ")")
                say(f"{stamp} {step}{again} …")
        elif kind == "custom" and isinstance(payload, dict):
            if payload.get("event") == "fan_out":  # its line says the step: the tasks it sends say it no more
                last[0] = str(payload.get("node"))
            line = describe(payload)
            if line:
                say(f"{stamp} {line}")
        elif kind == "done":
            if isinstance(payload, tuple) and payload[0] == "check":
                if line := attempt_line(payload[1]):
                    say(f"{stamp} {line}")
                if reason := retry_reason(payload[1]):
                    why["parse"] = reason
            for line in finished(*payload):
                say(f"{stamp} {line}")

    return listen
