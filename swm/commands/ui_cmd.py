"""``swm ui``: the read-only results browser over a store, on loopback."""

from __future__ import annotations

import click

from swm.errors import InputError


@click.command("ui")
@click.option("--db", "db", default="swm.db", show_default=True, metavar="FILE|URL",
              help="The store to browse: a SQLite file or a postgresql:// URL (opened read-only).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on (loopback by default).")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0: any free port).")
def ui_command(db: str, host: str, port: int) -> None:
    """Browse runs, episodes, social states, games and learning curves in a web page (read-only)."""
    try:
        import uvicorn  # optional: the [ui] extra

        from swm.ui import create_app
    except ImportError as exc:
        raise InputError(f"the results browser needs the [ui] extra ({exc.name} is missing)",
                         "pip install 'social-world-models[ui]'") from exc
    app = create_app(db)
    click.echo(f"swm ui: {app.state.store.label} on http://{host}:{port}/runs (read-only; Ctrl-C stops)", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
