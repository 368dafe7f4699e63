"""``swm graphs``: every graph registered in langgraph.json, as Mermaid text and PNG files."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[2]


def registered_graphs() -> dict[str, str]:
    """Return {name: module} for the graphs in langgraph.json (or every module in graphs/)."""
    config = ROOT / "langgraph.json"
    if config.is_file():
        graphs = json.loads(config.read_text())["graphs"]
        return {name: _module_of(target) for name, target in graphs.items()}
    from swm import graphs as package

    return {p.stem: p.stem for p in Path(package.__file__).parent.glob("*.py") if not p.stem.startswith("_")}


def _module_of(target: str) -> str:
    """Return the module under ``graphs`` of a langgraph.json target (``swm.graphs.served:x``, ``graphs.x:graph``
    or ``./graphs/x.py:graph``)."""
    from swm.graphs.served import graph_module

    path = graph_module(target)
    return Path(path).stem if path.endswith(".py") else path.rsplit(".", 1)[-1]


@click.command("graphs")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("graphs-png"),
              show_default=True, help="Folder for the PNG drawings.")
@click.option("--no-png", is_flag=True, help="Print Mermaid only.")
@click.option("--json", "as_json", is_flag=True, help="Print {name: mermaid} as JSON.")
def graphs_command(out: Path, no_png: bool, as_json: bool) -> None:
    """Print each graph as Mermaid and draw it as a PNG (pygraphviz, which bundles Graphviz)."""
    drawn: dict[str, str] = {}
    for name, module in registered_graphs().items():
        graph = importlib.import_module(f"swm.graphs.{module}").build().compile().get_graph()
        drawn[name] = graph.draw_mermaid()
        if not no_png:
            try:
                out.mkdir(parents=True, exist_ok=True)
                graph.draw_png(str(out / f"{name}.png"))
            except ImportError:
                click.echo("note: PNGs need pygraphviz: pip install 'social-world-models[viz]'", err=True)
                no_png = True
    if as_json:
        click.echo(json.dumps(drawn, indent=2))
        return
    for name, mermaid in drawn.items():
        click.echo(f"%% graph: {name}\n{mermaid}")
    if not no_png:
        click.echo(f"wrote {len(drawn)} PNGs to {out}/", err=True)
