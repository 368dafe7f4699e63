"""The results browser: a Starlette app over one store, rendered on the server with Jinja2.

Every view has a stable URL (ids in the path, toggles and filters in the query string), every
table exports CSV (``?csv=<table>``), and plots are drawn in the page by Plotly.js, which the
``plotly`` package ships (served from here: the page needs no network). The app answers GET only
and reads through `ReadOnlyStore`, so browsing cannot change a run.
"""

from __future__ import annotations

import csv
import datetime as dt
import importlib.util
import io
import json
import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import tomli_w
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from swm.filenames import file_name
from swm.ui import runs as run_list
from swm.ui import summaries, views
from swm.ui.store import PAGE, ReadOnlyStore, decode

HERE = Path(__file__).parent


def url(text: object) -> str:
    """Quote an id as one path segment that comes back whole (`IdConvertor`), ``:`` kept readable.

    ``/`` and ``%`` are escaped before the quoting, so the server's own unquoting of the path leaves them escaped:
    an id shaped like a sub-route (``x/pairs/0/0``) is not routed as one, and ``../../etc`` holds no dot segment
    for a client to resolve away. An id of dots alone (``..``) has its dots escaped too, for the same reason.
    """
    escaped = str(text).replace("%", "%25").replace("/", "%2F")
    if escaped and set(escaped) == {"."}:
        escaped = escaped.replace(".", "%2E")
    return quote(escaped, safe=":")


def query(text: object) -> str:
    """Quote a value for a query string (unquoted once, by the server; ``/`` and ``:`` kept readable)."""
    return quote(str(text), safe="/:")


class IdConvertor(Convertor[str]):
    """An id in a path as `url` writes it: the rest of the path, unquoted once more (a typed ``team/run-1`` too)."""

    regex = ".*"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return url(value)


register_url_convertor("id", IdConvertor())


class DecodedOnce:
    """Route on the path as the client sent it (``raw_path``), unquoted once, as uvicorn does: every server the same
    (Starlette's test client unquotes it twice), so the escapes `url` doubled reach `IdConvertor` as escapes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw:
            scope = {**scope, "path": unquote(raw.split(b"?", 1)[0].decode("latin-1"))}
        await self.app(scope, receive, send)


def plotly_js() -> Path | None:
    """Return Plotly.js from the installed ``plotly`` package, found without importing it (slow)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


LARGEST = 10**9  # a page or cycle beyond it is no store's: SQLite's 64-bit offsets overflow far above


def whole_number(request: Request, name: str, default: int | None = 0) -> int | None:
    """Return query parameter ``name`` as a whole number, 0 to `LARGEST` (``default`` when absent or empty).

    Anything else (``?page=abc``, ``?page=`` with 40 digits) is the client's mistake: HTTP 400 saying so, never
    a server error.
    """
    text = request.query_params.get(name, "").strip()
    if not text:
        return default
    try:
        number = max(0, int(text))
    except ValueError:
        raise HTTPException(400, f"{name} must be a whole number, not {text[:40]!r}") from None
    if number > LARGEST:
        raise HTTPException(400, f"{name} must be a whole number up to {LARGEST}, not {text[:40]!r}")
    return number


def _csv(rows: list[dict[str, Any]], name: str) -> Response:
    out = io.StringIO()
    columns = list(dict.fromkeys(k for r in rows for k in r))
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in r.items()})
    return Response(out.getvalue(), media_type="text/csv",
                    headers={"Content-Disposition": f'attachment; filename="{name}.csv"'})


def _flat(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flatten each row's interval cells (``{"rate"|"mean", "low", "high", "n"}``) into columns for a CSV."""
    out = []
    for r in rows:
        flat: dict[str, Any] = {}
        for k, v in r.items():
            if isinstance(v, dict) and ("rate" in v or "mean" in v):
                value = v.get("rate", v.get("mean"))
                flat.update({k: value, f"{k} low": v.get("low"), f"{k} high": v.get("high"), f"{k} n": v.get("n")})
            else:
                flat[k] = v
        out.append(flat)
    return out


def when(value: object) -> str:
    """Format a Unix time (seconds) as ``YYYY-MM-DD HH:MM:SS`` UTC; other values as they are."""
    if isinstance(value, int | float) and 1e9 < value < 1e10:
        return dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return "" if value is None else str(value)


def cell(value: object, digits: int = 3) -> str:
    """Render a table cell: numbers rounded, a mean with its interval as ``m ± h (n=…)``, a dict as
    ``key: value`` pairs, a list joined, a Unix time as a date; never Python's dict text.
    """
    value = decode(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return when(value) if 1e9 < value < 1e10 else f"{value:.{digits}f}"
    if isinstance(value, dict):
        if "mean" in value and ("ci95" in value or "n" in value):
            half = value.get("ci95")
            m = value.get("mean")
            spread = f" ± {half:.{digits}f}" if isinstance(half, float) else ""
            text = "—" if m is None else f"{m:.{digits}f}{spread}"
            return text + (f" (n={value['n']})" if value.get("n") is not None else "")
        return "; ".join(f"{k}: {cell(v, digits)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(cell(v, digits) for v in value)
    return "" if value is None else str(value)


def exact(value: object) -> str:
    """Render a setting (an option, a plan's field) as it was set: a number at its own precision (``repr``: a
    learning rate of 2e-4 is ``0.0002``, never ``0.000``), a switch as true or false, a list joined."""
    value = decode(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return ", ".join(exact(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {exact(v)}" for k, v in value.items())
    return "" if value is None else str(value)


def config_toml(config: object) -> str:
    """Write a run's recorded config (``swm_runs.config``) as the TOML file ``--config`` reads back."""
    values = decode(config)
    if not isinstance(values, dict):
        return ""
    return tomli_w.dumps({k: v for k, v in values.items() if v is not None})


class Browser:
    """The routes of one store's browser."""

    def __init__(self, store: ReadOnlyStore) -> None:
        self.store = store
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["q"] = url  # an id in a path
        self.templates.env.filters["qs"] = query  # a value in a query string
        self.templates.env.filters["cell"] = cell
        self.templates.env.filters["when"] = when
        self.templates.env.filters["exact"] = exact
        self.templates.env.filters["sh"] = shlex.quote
        self.templates.env.filters["num"] = lambda v, d=3: "" if v is None else (f"{v:.{d}f}" if isinstance(
            v, float) else str(v))

    def page(self, request: Request, template: str, tables: dict[str, list[dict[str, Any]]] | None = None,
             **context: Any) -> Response:
        """Render a template, or one of its tables as CSV when the URL asks ``?csv=<table>``."""
        wanted = request.query_params.get("csv")
        if wanted:
            if not tables or wanted not in tables:
                raise HTTPException(404, f"no table {wanted!r} on this page")
            return _csv(tables[wanted], wanted)
        return self.templates.TemplateResponse(request, template, {"store": self.store.label, **context})

    def _info(self, thread_id: str) -> dict[str, Any] | None:
        """Return what the command that started a run recorded (kind, graph, command, options), if any."""
        return run_list.recorded(self.store, [thread_id]).get(thread_id)

    async def config(self, request: Request) -> Response:
        """Offer a run's config as the TOML file its command's ``--config`` reads (commands that take one record it)."""
        thread_id = request.path_params["thread_id"]
        info = self._info(thread_id)
        if not info or not isinstance(decode(info.get("config")), dict):
            raise HTTPException(404, f"no config recorded for {thread_id!r} (its command takes no --config, or it "
                                     "was recorded before configs were)")
        header = (f"# {info.get('command') or 'swm'} --config FILE reads this: the options given to run "
                  f"{json.dumps(thread_id)}, started {info.get('started')}\n")
        return Response(header + config_toml(info["config"]), media_type="application/toml",
                        headers={"Content-Disposition": f'attachment; filename="{file_name(thread_id)}.toml"'})

    # ---- runs ------------------------------------------------------------------------------
    async def runs(self, request: Request) -> Response:
        q = request.query_params
        page = whole_number(request, "page") or 0
        try:
            rows, more = run_list.list_runs(self.store, kind=q.get("kind", ""), since=q.get("since", ""),
                                      until=q.get("until", ""), page=page)
        except ValueError as exc:
            raise HTTPException(400, f"bad filter: {exc}") from exc
        benches = run_list.bench_runs(self.store, q.get("kind", "")) if page == 0 else []
        return self.page(request, "runs.html", {"runs": rows, "benchmarks": benches}, runs=rows, kinds=run_list.KINDS,
                         q=q, page=page, more=more, benches=benches)

    async def run(self, request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        kind = run_list.kind_of(self.store, thread_id)
        info = run_list.recorded(self.store, [thread_id]).get(thread_id)
        if kind in ("play", "sotopia") and self.store.select("episodes", "episode_id = ?", [thread_id]):
            return RedirectResponse("/episodes/" + url(thread_id), status_code=303)
        if kind == "games" and self.store.select("games", "game_id = ?", [thread_id]):
            return RedirectResponse("/games/" + url(thread_id), status_code=303)
        if kind in ("learn", "selfplay"):
            return RedirectResponse(f"/{kind}/" + url(thread_id), status_code=303)
        summary = run_list.summarise(self.store, thread_id, kind)
        common = {"thread_id": thread_id, "kind": kind, "summary": summary, "info": info}
        if kind == "tom":
            data = summaries.tom(self.store, thread_id)
            answers = self.store.select("tom_results", "run = ?", [thread_id], order="key")
            return self.page(request, "tom.html", {"accuracy": data["cells"], "differences": data["differences"],
                                                   "items": answers}, items=answers, **data, **common)
        if kind in ("play", "sotopia"):
            data = summaries.sotopia(self.store, thread_id)
            return self.page(request, "sotopia.html", {"policies": _flat(data["policies"]),
                                                       "episodes": data["episodes"], "tests": data["tests"]},
                             **data, **common)
        if kind == "games":
            data = summaries.games(self.store, thread_id)
            return self.page(request, "games.html", {"settings": _flat(data["settings"]), "roles": data["roles"]},
                             **data, **common)
        if kind == "ask":
            asked = summaries.ask(self.store, thread_id)
            if asked is not None:
                return self.page(request, "ask.html", {"parses": asked["parses"]}, **asked, **common)
        items: list[dict[str, Any]] = []
        link, key = "", ""
        if kind in ("ask", "parse"):  # the parses of the run's story (of every story for a run not recorded)
            story = (info or {}).get("story_hash")
            items = self.store.select("parses", "story_hash = ?" if story else "1 = 1", [story] if story else [],
                                      order="created desc", limit=PAGE)
            link, key = "/state/parse/", "key"
        columns = [c for c in (items[0].keys() if items else []) if c not in {"scenario", "briefing", "record",
                                                                             "prompt", "s3ap", "report", "step"}]
        return self.page(request, "run.html", {"items": items}, items=items, columns=columns[:16], key=key, link=link,
                         **common)

    async def compare(self, request: Request) -> Response:
        runs = [r for r in request.query_params.getlist("runs") if r]
        if len(runs) < 2:
            raise HTTPException(400, "pick two or more runs to compare (?runs=A&runs=B)")
        kinds = run_list.kinds_of(self.store, runs)
        normal = {"sotopia" if k in ("play", "sotopia") else k for k in kinds.values()}
        kind = normal.pop()
        if normal:
            raise HTTPException(400, "runs of different kinds: " + ", ".join(f"{r} ({k})" for r, k in kinds.items()))
        if kind == "tom":
            data = summaries.compare_tom(self.store, runs)
        elif kind == "sotopia":
            data = summaries.compare_sotopia(self.store, runs)
        elif kind == "games":
            data = summaries.compare_games(self.store, runs)
        else:
            raise HTTPException(400, f"comparing {kind} runs is not supported yet (tom, play, sotopia and games are)")
        return self.page(request, "compare.html", {"table": _flat(data["table"]), "tests": data["tests"]},
                         kind=kind, **data)

    # ---- an episode and a social state ------------------------------------------------------
    async def episode(self, request: Request) -> Response:
        data = views.episode(self.store, request.path_params["episode_id"])
        if data is None:
            raise HTTPException(404, "no such episode")
        return self.page(request, "episode.html", {"turns": data["turns"], "scores": data["scores"],
                                                   "failed": data["failed"]}, **data,
                         info=self._info(request.path_params["episode_id"]))

    async def episode_state(self, request: Request) -> Response:
        data = views.episode(self.store, request.path_params["episode_id"])
        if data is None:
            raise HTTPException(404, "no such episode")
        world = views.episode_world(data)
        return self._state(request, world, f"/episodes/{url(request.path_params['episode_id'])}", [])

    async def parse_state(self, request: Request) -> Response:
        data = views.parse_state(self.store, request.path_params["key"])
        if data is None:
            raise HTTPException(404, "no such parse")
        problems = data["report"].get("issues") or []
        return self._state(request, data["world"], "", problems)

    def _state(self, request: Request, world: Any, back: str, problems: list[Any]) -> Response:
        agent = request.query_params.get("agent", "")
        if agent and world.resolve_agent(agent) is None:
            raise HTTPException(404, f"unknown agent {agent!r}")
        data = views.social_state(world, agent)
        rows = [{"timestep": r["timestep"], "scene": r["scene"],
                 **{f"{a} {f}": c[f] for a, c in r["cells"].items() for f in ("observation", "mental", "action")}}
                for r in data["rows"]]
        return self.page(request, "state.html", {"timeline": rows}, back=back, problems=problems, **data)

    # ---- a game -----------------------------------------------------------------------------
    async def game(self, request: Request) -> Response:
        data = views.game(self.store, request.path_params["game_id"], request.query_params.get("seat", ""))
        if data is None:
            raise HTTPException(404, "no such game")
        moves = [m for ph in data["phases"] for m in ph["moves"]]
        return self.page(request, "game.html", {"moves": moves, "votes": data["votes"]}, **data,
                         info=self._info(request.path_params["game_id"]))

    # ---- learning ----------------------------------------------------------------------------
    async def learn(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        data = views.learning(self.store, run_id)
        page = whole_number(request, "page") or 0
        cycle = whole_number(request, "cycle", None)
        pairs = views.pairs(self.store, run_id, cycle, page)
        episodes = self.store.select("lifelong_episodes", "run_id = ?", [run_id], order="cycle, episode_id",
                                     limit=PAGE, offset=page * PAGE)
        tables = {"policies": data["policies"], "deploys": data["deploys"], "gate": data["gate"], "kept": data["kept"],
                  "matrix": data["matrix"], "metrics": data["metrics"], "pairs": pairs, "episodes": episodes}
        return self.page(request, "learn.html", tables, pairs=pairs, episodes=episodes, page=page,
                         info=self._info(run_id), cycle="" if cycle is None else str(cycle),
                         more=len(pairs) == PAGE or len(episodes) == PAGE, **data)

    async def pair(self, request: Request) -> Response:
        p = request.path_params
        row = views.pair(self.store, p["run_id"], int(p["cycle"]), int(p["row"])) \
            if max(int(p["cycle"]), int(p["row"])) <= LARGEST else None
        if row is None:
            raise HTTPException(404, "no such pair")
        return self.page(request, "pair.html", {"pair": [row]}, pair=row, run_id=p["run_id"])

    async def selfplay(self, request: Request) -> Response:
        data = views.selfplay(self.store, request.path_params["run_id"])
        return self.page(request, "selfplay.html", {"iterations": data["iterations"], "plan": data["plan_rows"],
                                                    "rollouts": data["rollouts"]}, **data,
                         info=self._info(request.path_params["run_id"]))

    async def rollout(self, request: Request) -> Response:
        data = views.rollout(self.store, request.query_params.get("id", ""))
        if data is None:
            raise HTTPException(404, "no such rollout")
        return self.page(request, "rollout.html", {"turns": data["turns"], "seats": data["seats"]}, **data)


def create_app(db: str | Path) -> Starlette:
    """Build the browser for one store (a SQLite file or a PostgreSQL URL), read-only."""
    store = ReadOnlyStore(db)
    b = Browser(store)
    routes = [
        Route("/", lambda r: RedirectResponse("/runs", status_code=303)),
        Route("/runs", b.runs), Route("/runs/{thread_id:id}", b.run), Route("/compare", b.compare),
        Route("/config/{thread_id:id}", b.config),
        Route("/episodes/{episode_id:id}", b.episode),
        Route("/state/episode/{episode_id:id}", b.episode_state), Route("/state/parse/{key:id}", b.parse_state),
        Route("/games/{game_id:id}", b.game),
        Route("/learn/{run_id:id}/pairs/{cycle:int}/{row:int}", b.pair), Route("/learn/{run_id:id}", b.learn),
        Route("/selfplay/{run_id:id}", b.selfplay), Route("/rollout", b.rollout),
        Route("/healthz", lambda r: PlainTextResponse("ok")),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    js = plotly_js()
    if js is not None:
        routes.insert(0, Route("/vendor/plotly.min.js", lambda r: FileResponse(js, media_type="text/javascript")))
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        store.close()

    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(DecodedOnce)])
    app.state.store = store
    return app
