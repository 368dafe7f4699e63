"""``swm engine``: build llama.cpp's C++ server for the embedded model, and say which server runs it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from swm.commands._common import echo_json


@click.group("engine")
def engine_group() -> None:
    """The embedded model's server: llama.cpp's llama-server (batched slots, adapters per request) or the Python one."""


@engine_group.command("build")
@click.option("--source", type=click.Path(exists=True, path_type=Path), default=None,
              help="llama-cpp-python's sdist (.tar.gz) or its vendor/llama.cpp folder [default: pip download "
                   "the installed version's sdist].")
@click.option("--jobs", type=click.IntRange(1), default=None, help="Parallel compile jobs [default: the cores].")
@click.option("--force", is_flag=True, help="Build again even if this version's server is already built.")
@click.option("--link", type=click.Choice(["auto", "shared", "static"]), default="auto", show_default=True,
              help="shared: compile only the server's own sources and link the installed llama-cpp-python's "
                   "llama.cpp libraries (copied beside the binary); static: compile all of llama.cpp into one "
                   "file; auto: shared where the wheel ships its libraries and CMAKE_ARGS asks for no other "
                   "ggml, static if that fails.")
def build_command(source: Path | None, jobs: int | None, force: bool, link: str) -> None:
    """Build llama-server from the llama.cpp source the installed llama-cpp-python ships (once per version).

    Only the llama-server target. By default its own sources alone, linked to the llama.cpp
    libraries pip already compiled for llama-cpp-python (so llama.cpp is compiled once); with
    --link static, the whole tree with portable AVX2 flags (GGML_NATIVE=OFF; CMAKE_ARGS adds
    flags). The binary goes to the per-user cache (SWM_CACHE_DIR, else ~/.cache/swm), where the
    embedded model finds it and serves with it from then on.
    """
    from swm.serving.engine import build

    record = build(source, jobs=jobs, force=force, echo=lambda text: click.echo(text, err=True), link=link)
    if record.get("skipped"):
        click.echo(f"already built: {record['binary']} (--force builds it again)", err=True)
    else:
        click.echo(f"built {record['binary']} in {record['seconds']} s with {record['jobs']} jobs", err=True)
    click.echo(json.dumps(record, indent=2))


@engine_group.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
def status_command(as_json: bool) -> None:
    """Say which server runs the embedded model, with how many slots, and where its binary is."""
    from swm.serving.embedded import engine_info
    from swm.serving.engine import HOW

    info = engine_info()
    if as_json:
        echo_json(info)
        return
    if info["engine"] == "llama-server":
        click.echo(f"llama-server {info['binary']} (llama-cpp-python {info['llama_cpp_python']}): {info['slots']} "
                   f"slots of {info['ctx_per_slot']} tokens; the base "
                   f"{'as shipped' if info['format'] == 'shipped' else 'in ' + info['format']} (SWM_EMBEDDED_FORMAT; "
                   "self-play samples a quantised base in f16)")
    else:
        click.echo(f"llama-cpp-python's server: 1 request at a time; `{HOW}` builds llama-server")
