"""Options and helpers shared by the CLI commands: models, database, thread, output.

Deferred imports, here and in every command module: what a command needs to declare its options
(click types, defaults, choices from light tables such as `swm.defaults`) is imported at the top;
what it needs only to run (LangGraph, the model clients, the store, the graphs) is imported in the
function that runs it, marked ``# deferred: --help``, so each ``swm X --help`` loads none of them
(tests/test_cli.py checks which modules it loads).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from swm.commands.invocation import Spelled, command_words, config_of, given, rerun_line, takes_config
from swm.defaults import ACT_ORDERS, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT, EMBEDDED_TIMEOUT, ROLES
from swm.errors import InputError, ItemsFailed

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import StateGraph
    from langgraph.types import StateSnapshot
    from langgraph.typing import ContextT, InputT, OutputT, StateT

    from swm.checkpoints.environment import BatchRun
    from swm.checkpoints.store import StoreRecords
    from swm.context import SWMContext

F = Callable[..., Any]


def model_options(*roles: str) -> Callable[[F], F]:
    """Add ``--model``, ``--<role>-model`` for the given roles (all when none are named), ``--timeout``
    and ``--max-retries``.

    A spec is ``embedded``, a model name (OpenAI, or ``OPENAI_BASE_URL``), ``name@base_url`` or
    ``provider:name`` (LangChain's ``init_chat_model``, e.g. ``anthropic:claude-sonnet-4-5``).
    """

    def decorate(f: F) -> F:
        f = endpoint_options(f)
        for role in reversed(roles or ROLES):
            flag = "--world-model" if role == "world_model" else f"--{role}-model"
            f = click.option(flag, f"{role}_model", default=None, metavar="SPEC",
                             help=f"Model for the {role.replace('_', ' ')} role.")(f)
        return click.option("--model", default=None, metavar="SPEC",
                            help="Model for every role: 'embedded', a name (OpenAI / OPENAI_BASE_URL), "
                                 "name@base_url or provider:name (anthropic:…, ollama:…).")(f)

    return decorate


class AliasedCommand(click.Command):
    """A command that still takes old option names (``aliases``: old → new), hidden from help and the reference.

    Options are named the same across commands (``--train-lr``, ``--train-rank``, ``--concurrency``);
    the names a command had before keep working, and say once on stderr which name to use.
    """

    aliases: dict[str, str] = {}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        renamed: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                renamed.extend(args[i:])
                break
            name, eq, value = arg.partition("=")
            if name in self.aliases:
                click.echo(f"note: {name} is now {self.aliases[name]}", err=True)
                arg = self.aliases[name] + eq + value
            renamed.append(arg)
        return super().parse_args(ctx, renamed)


def aliased(**aliases: str) -> type[AliasedCommand]:
    """Return an `AliasedCommand` class taking ``old_name="--new-name"`` aliases (``old_name`` with _ for -; a
    one-letter ``old_name`` is a short option, ``q="--no-progress"`` for ``-q``)."""
    table = {("-" if len(old) == 1 else "--") + old.replace("_", "-"): new for old, new in aliases.items()}
    return type("Aliased", (AliasedCommand,), {"aliases": table})


def prompts_option(f: F) -> F:
    """Add ``--prompts``: the S3AP repository's prompts task by task (default) or swm's own wording."""
    return click.option("--prompts", "prompt_protocol", type=click.Choice(["paper", "repo", "swm"]), default="paper",
                        show_default=True,
                        help="Prompt protocol: 'paper' sends the wording the paper's appendix prints (parser prompt, "
                             "task instructions) with the S3AP repository's QA prompts task by task; 'repo' the "
                             "repository's older wording (parser prompt and context manual at 0332906d, MMToM-QA's "
                             "short rules); 'swm' swm's own task-generic wording (docs/protocols.md).")(f)


def act_order_option(f: F) -> F:
    """Add ``--act-order``: the acting prompt in SOTOPIA's order (default) or with the conversation last."""
    return click.option("--act-order", type=click.Choice(ACT_ORDERS), default="sotopia",
                        show_default=True,
                        help="Order of the acting prompt: 'sotopia' puts the conversation before the turn, action "
                             "types and format, as SOTOPIA's prompt does; 'prefix' sends the same text with the "
                             "conversation last, so a seat's next prompt extends its last one and the server's "
                             "prefix cache serves all but the new turns (Foresee-and-Act's predict and refine "
                             "prompts too; faster on long episodes; scores are not comparable across orders).")(f)


def endpoint_options(f: F) -> F:
    """Add ``--timeout`` and ``--max-retries``: how long to wait for a model request, how often to retry it."""
    f = click.option("--max-retries", type=click.IntRange(0, 20), default=DEFAULT_MAX_RETRIES,
                     show_default=True, help="Retries of a model request after a timeout, a dropped "
                     "connection, HTTP 429 or 5xx (exponential backoff, honouring Retry-After).")(f)
    return click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
                        help="Total seconds for each model request, the whole reply included "
                             f"[default: {DEFAULT_TIMEOUT:g}; {EMBEDDED_TIMEOUT:g} for the embedded model].")(f)


class OrOff(Spelled):
    """A number of ``kind``, or ``off`` (None), spelled back as typed (a rerun line and a config write ``off``)."""

    def __init__(self, kind: type[int] | type[float]) -> None:
        self.kind = kind
        self.name = f"{kind.__name__}|off"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, int | float) and not isinstance(value, bool):
            return value
        if str(value).strip().lower() == "off":
            return None
        try:
            number = self.kind(str(value))
        except ValueError:
            self.fail(f"{value!r} is neither a number ({self.kind.__name__}) nor 'off'", param, ctx)
        if number < 0:
            self.fail(f"{value!r} is negative", param, ctx)
        return number

    def spell(self, value: Any) -> str:
        return "off" if value is None else repr(value)

    def config_value(self, value: Any) -> Any:
        return "off" if value is None else value


def repair_options(f: F) -> F:
    """Add ``--repair-temperature`` and ``--repair-seed``: how a parse repair is sampled apart from the attempt it
    repairs (`swm.context.ParseContext.repair_sampling`)."""
    f = click.option("--repair-seed", type=OrOff(int), default=0, show_default=True,
                     help="Repair k is sent seed N + k (OpenAI-compatible servers); 'off': no seed.")(f)
    return click.option("--repair-temperature", type=OrOff(float), default=0.7, show_default=True,
                        help="Temperature of each parse repair, so it is not the failed attempt again; "
                             "'off': the model's own.")(f)


def run_options(f: F) -> F:
    """Add ``--db``, ``--thread-id`` and ``--json``."""
    f = click.option("--json", "as_json", is_flag=True, help="Print the whole result as JSON.")(f)
    f = click.option("--thread-id", default=None, help="Checkpoint thread; reuse it to resume a killed run.")(f)
    f = click.option("--db", default=None, envvar="SWM_DB", metavar="FILE|URL",
                     help="SQLite file, or postgresql:// URL, for checkpoints and the experience store "
                          "[env SWM_DB; default ~/.local/share/swm/swm.db].")(f)
    return f


def given_options(*names: str) -> set[str]:
    """Return which of the current command's options ``names`` were given (command line, environment or
    ``--config`` file)."""
    ctx = click.get_current_context()
    return {name for name in names if given(ctx, name)}


class TableChoice(click.Choice):  # type: ignore[type-arg]
    """A choice of the names an extension table holds (estimators, two-seat families, ToM benchmarks).

    The names are read from the table each time the choice is used, so a row registered after the
    command was built (a plugin's, a test's) is offered too; `tests/test_cli_tables.py` ties each such
    option to its table.
    """

    def __init__(self, names: Callable[[], Sequence[str]]) -> None:
        self.names = names
        super().__init__(list(names()))

    @property  # type: ignore[override]
    def choices(self) -> Sequence[str]:
        return tuple(self.names())

    @choices.setter
    def choices(self, _value: Sequence[str]) -> None:
        """Ignore click's own assignment: the table is the only source."""


class CommaList(Spelled):
    """A comma list of names from ``allowed`` (``--levels easy,hard``), read as a list (none when empty); a config
    file may give it as a list. ``allowed`` may be a table's names, read each time they are checked (`TableChoice`)."""

    name = "list"

    def __init__(self, allowed: Sequence[str] | Callable[[], Sequence[str]], what: str) -> None:
        self.names, self.what = allowed if callable(allowed) else tuple(allowed), what

    @property
    def allowed(self) -> tuple[str, ...]:
        return tuple(self.names() if callable(self.names) else self.names)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> list[str] | None:
        text = ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)
        return comma_list(text, self.allowed, self.what) if text.strip(", ") else None

    def spell(self, value: Any) -> str:
        return ",".join(value or ())  # none (given empty) reads back as none

    def config_value(self, value: Any) -> Any:
        return list(value or ())


class OnOff(Spelled, click.Choice):  # type: ignore[type-arg]
    """A switch written ``on`` or ``off`` (``--gating off``), read as a bool."""

    def __init__(self) -> None:
        super().__init__(["on", "off"])

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> bool:
        if isinstance(value, bool):
            return value
        return bool(click.Choice.convert(self, value, param, ctx) == "on")

    def spell(self, value: Any) -> str:
        return "on" if value else "off"


def comma_list(value: str, allowed: Sequence[str], what: str, *, allow_empty: bool = False) -> list[str]:
    """Split a ``--x a,b`` option and check every item, with a one-line error naming the choices."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not (items or allow_empty):
        raise InputError(f"unknown {what}: {', '.join(bad) or '(none given)'}",
                         f"use a comma list of {', '.join(allowed)}")
    return items


def db_path(db: str | Path | None) -> str | Path:
    """Return the database a run uses: a PostgreSQL URL as given, else a SQLite file path."""
    from swm.checkpoints import default_db_path, is_postgres

    if db and is_postgres(db):
        return str(db)
    return Path(db).expanduser() if db else default_db_path()


def make_context(db: str | Path | None, model: str | None = None, **opts: Any) -> SWMContext:
    """Build the runtime context from CLI options and open the experience store on ``db``."""
    from swm.checkpoints import open_store
    from swm.context import SWMContext  # deferred: --help

    models = {role: opts.pop(f"{role}_model") for role in ROLES if opts.get(f"{role}_model")}
    for role in ROLES:
        opts.pop(f"{role}_model", None)
    ctx = SWMContext(model=model, models=models, **opts)
    ctx.check_models()
    ctx.store = open_store(db_path(db))
    announce_models(ctx)
    return ctx


def announce_models(ctx: SWMContext) -> None:
    """Say plainly on stderr when the embedded model is in use."""
    if ctx.uses_embedded():
        from swm.serving.embedded import describe

        click.echo(f"note: using the embedded model ({describe()}) on this machine's CPU. Its answers are a "
                   "smoke test of the machinery, not a measurement; set OPENAI_API_KEY or --model for real "
                   "numbers.", err=True)


def concurrency_option(what: str) -> Callable[[F], F]:
    """Add ``--concurrency`` (also ``--max-concurrency``): ``what`` in flight at once, default the server's slots."""
    return click.option("--concurrency", "--max-concurrency", "concurrency", type=click.IntRange(1), default=None,
                        help=f"{what} in flight at once [default: the embedded server's slots (`swm engine "
                             "status`) when a role runs on it, else 4].")


def resolve_concurrency(ctx: SWMContext, given: int | None, fallback: int = 4) -> int:
    """Return the run's concurrency: as given, else the embedded server's slots when a role uses it, else ``fallback``.

    The Python server answers one request at a time, so more than one in flight only queues there:
    it is run with 1, and the note says so.
    """
    if not ctx.uses_embedded():
        return given or fallback
    from swm.serving.embedded import slots

    served = slots()
    if served == 1 and (given or 1) > 1:
        click.echo("note: the embedded model's Python server serves one request at a time; running with "
                   "--concurrency 1", err=True)
    return served if served == 1 or given is None else given


def serving_record(ctx: SWMContext, concurrency: int) -> dict[str, Any] | None:
    """Describe the embedded engine a run used (engine, slots, concurrency) for its report; None off it."""
    if not ctx.uses_embedded():
        return None
    from swm.serving.embedded import engine_info

    return {**engine_info(), "concurrency": concurrency}


def read_text(path: str, encoding: str = "utf-8") -> str:
    """Read a story file ('-' for stdin) strictly: missing, binary or mis-encoded files are one-line errors."""
    from swm.inputs import read_text_file

    return read_text_file(path, encoding)


def encoding_option(f: F) -> F:
    """Add ``--encoding`` for commands that read a story file."""
    return click.option("--encoding", default="utf-8", show_default=True,
                        help="Text encoding of the story file (a file that does not decode is refused).")(f)


def run_graph(builder: StateGraph[StateT, ContextT, InputT, OutputT], inputs: Mapping[str, object], ctx: SWMContext,
              db: str | Path | None, thread_id: str | None, prefix: str,
              on_event: Callable[[str, Any], None] | None = None,
              redo: Callable[[Mapping[str, object]], str | None] | None = None) -> tuple[dict[str, Any], str]:
    """Run a graph on the SQLite checkpointer, resuming the thread if it stopped part-way.

    ``on_event`` gets the run's progress as it goes, ``redo`` says where a finished thread with an
    unusable result goes on again (see `checkpoints.run_thread`).
    A thread that finished on the same input returns its stored result (no model calls); one
    that stopped part-way continues from its last finished node (see `checkpoints.run_thread`).
    """
    from swm.checkpoints import differences, hold_lease, open_saver, pending_nodes, run_thread
    from swm.graph_state import story_hash  # deferred: --help

    thread = thread_id or f"{prefix}-{uuid.uuid4().hex[:12]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    story: dict[str, str] = {"story_hash": story_hash(str(inputs["narrative"]))} if inputs.get("narrative") else {}
    record_run(ctx.experience_store(), thread, prefix, prefix if prefix != "play" else "episode", None, **story)

    def announce(status: str, snapshot: StateSnapshot) -> None:
        changed = differences(snapshot.values, inputs) if status != "started" else []
        if changed:
            kind = "finished" if status == "finished" else "stopped"
            raise InputError(f"thread {thread} already holds a {kind} run on other input ({'; '.join(changed)})",
                             "rerun with the same input to resume or show it, or use a new --thread-id (or none)")
        if status == "resumed":
            click.echo(f"resuming thread {thread} at {', '.join(pending_nodes(snapshot))}", err=True)
        elif status == "finished":
            click.echo(f"thread {thread} already finished; showing its stored result (no new model calls)",
                       err=True)
        else:
            click.echo(f"thread: {thread} (rerun with --thread-id {thread} to resume if interrupted)", err=True)

    with hold_lease(db_path(db), thread), open_saver(db_path(db)) as saver:
        out, _ = run_thread(builder.compile(checkpointer=saver), inputs, config, ctx, announce, on_event, redo)
    return out, thread


RUNS_TABLE = "swm_runs"


def record_run(store: StoreRecords, thread_id: str, kind: str, graph: str,
               options: Mapping[str, object] | None = None, **columns: Any) -> None:
    """Record a run's kind, graph, command and options in the store (kept from its first invocation).

    The results browser reads a run's kind from here, so a run given its own ``--thread-id`` shows
    as what it is. ``options`` defaults to the invoking command's parameters; key-like text in them
    (an endpoint URL's key) is redacted. ``rerun``: the command line that runs it again, ``config``: its
    given options as ``--config`` reads them (for a command that takes one), both by the options' own names
    (`swm.commands.invocation`). ``columns``: more of the run's keys (a story's hash).
    """
    import datetime as dt

    from swm.credentials import redact_text

    click_ctx = click.get_current_context(silent=True)
    params = dict(options if options is not None else (click_ctx.params if click_ctx else {}))
    row = {"thread_id": thread_id, "kind": kind, "graph": graph,
           "command": " ".join(command_words(click_ctx)) if click_ctx else "",
           "options": redact_text(json.dumps(to_jsonable(params), default=str, sort_keys=True)),
           "rerun": rerun_line(click_ctx) if click_ctx else None,
           "config": json.dumps(config_of(click_ctx)) if click_ctx and takes_config(click_ctx.command) else None,
           "started": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), **columns}
    store.insert(RUNS_TABLE, row, pk="thread_id", ignore=True)


def writable_out(folder: str | Path) -> Path:
    """Create the ``--out`` folder now and prove it takes a file, before any model call is paid for.

    A folder that cannot be written would otherwise fail the run only at its end, after every
    call was made (and a rerun would pay again for what was not checkpointed).
    """
    import tempfile

    path = Path(folder).expanduser()
    made = [p for p in (path, *path.parents) if not p.exists()]  # left as found: a refused run writes nothing
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".swm-write-check-"):
            pass
    except OSError as exc:
        raise InputError(f"cannot write to --out {folder}: {exc.strerror or type(exc).__name__}",
                         "pass an --out folder you can write (nothing was run)") from exc
    finally:
        for created in made:
            try:
                created.rmdir()
            except OSError:
                break
    return path


def to_jsonable(value: object) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def echo_json(value: object) -> None:
    click.echo(json.dumps(to_jsonable(value), indent=2, ensure_ascii=False))


def finish_bench(folder: Path, stem: str, title: str, text: str, meta: Mapping[str, object], table: object,
                 result: BatchRun, as_json: bool, unit: str) -> None:
    """Write a benchmark run's ``<stem>.md`` (table and settings) and ``<stem>.json``, then report it.

    Prints the table (or both as JSON), one ``problem:`` line per failed ``unit`` of
    ``result["failed"]``, and the ran/skipped/failed/wall summary on stderr.
    """
    (folder / f"{stem}.md").write_text(f"# {title}\n\n{text}\n\n```json\n{json.dumps(meta, indent=2)}\n```\n",
                                       encoding="utf-8")
    (folder / f"{stem}.json").write_text(json.dumps({"meta": meta, "table": table}, indent=2), encoding="utf-8")
    if as_json:
        echo_json({"meta": meta, "table": table})
    else:
        click.echo(text)
    for key, error in result["failed"].items():
        click.echo(f"problem: {unit} {key} failed ({error}); rerun with the same --thread-id to retry it", err=True)
    click.echo(f"ran {result['ran']}, skipped {result['skipped']} finished, failed {len(result['failed'])}; "
               f"wall {result['wall']:.1f} s; written to {folder}", err=True)
    if result["failed"]:
        raise ItemsFailed(f"{len(result['failed'])} {unit}(s) failed after their retries (the others are in {folder})",
                          f"rerun with --thread-id {meta.get('run_id', '…')} to retry only them")
