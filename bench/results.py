"""Results pages: each benchmark run writes a dated page under ``docs/results/``.

A page says what was run (the command), on which code (the commit, ``+`` when the checkout had
uncommitted changes), where (the machine: cores, CPU, memory, GPU, OS, Python, the load average at
the start) and when (UTC), then the run's own tables. `write_page` writes it as
``docs/results/<benchmark>-<YYYY-MM-DD>.md`` (a second run the same day adds the time) and keeps
the list in ``docs/results/index.md`` current: the newest page of each benchmark under *Latest*,
the pages it superseded under *History*.
"""

from __future__ import annotations

import io
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from swm.credentials import redact_text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
INDEX_START, INDEX_END = "<!-- benchmark runs: written by bench.results -->", "<!-- end of benchmark runs -->"
PAGE_NAME = re.compile(r"^(?P<bench>[a-z0-9-]+?)-(?P<date>\d{4}-\d{2}-\d{2})(?:-(?P<time>\d{4}))?\.md$")


@dataclass(frozen=True)
class RunInfo:
    """Where a result comes from: the command, the commit, the machine and the time."""

    command: str
    commit: str
    machine: str
    when: datetime


def machine() -> str:
    """Describe this host: cores, CPU model, memory, GPU, OS and Python."""
    cpu = platform.processor() or platform.machine()
    memory = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f", {int(line.split()[1]) / 2**20:.0f} GiB RAM"
                break
    except OSError:
        pass
    system = f"{platform.system()} {platform.release()}"
    return f"{os.cpu_count()} cores ({cpu}){memory}, GPU: {gpu()}, Python {platform.python_version()}, {system}"


def gpu() -> str:
    """Name the GPUs ``nvidia-smi`` reports, or ``none``."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    names = [n.strip() for n in done.stdout.splitlines() if n.strip()] if done.returncode == 0 else []
    return ", ".join(names) or "none"


def commit(root: Path = ROOT) -> str:
    """Return the checkout's short commit, with ``+`` when it has uncommitted changes (``unknown`` outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+" if dirty else "")


def command_line(argv: Sequence[str] | None = None, module: str | None = None) -> str:
    """Return the command as a reader would type it: ``python -m <module> <args>``, paths relative to the checkout."""
    args = list(sys.argv[1:] if argv is None else argv)
    head = ["python", "-m", module] if module else ["python", *sys.argv[:1]]
    return shlex.join([*head, *(_portable(a) for a in args)])


def _portable(arg: str) -> str:
    """Show a path inside the checkout relative to it, and any other absolute path by its name only."""
    if not arg.startswith("/"):
        return arg
    path = Path(arg)
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return path.name


def run_info(command: str) -> RunInfo:
    """Capture the command, commit, machine (with its load average now) and time of a run starting now."""
    load = f"; load average {os.getloadavg()[0]:.1f} at the start" if hasattr(os, "getloadavg") else ""
    return RunInfo(command=command, commit=commit(), machine=machine() + load, when=datetime.now(UTC))


def page_path(benchmark: str, when: datetime, folder: Path = RESULTS) -> Path:
    """Return the page a run of ``benchmark`` at ``when`` writes (the time is added when the date is taken)."""
    day = folder / f"{benchmark}-{when:%Y-%m-%d}.md"
    return day if not day.exists() else folder / f"{benchmark}-{when:%Y-%m-%d-%H%M}.md"


# `bench/` is the source checkout's, not installed with swm: its commands run from the checkout's root
WHERE = "the root folder of a source checkout (`bench/` is not installed with swm; `cd` there first)"


def render(title: str, info: RunInfo, body: str) -> str:
    """Return a results page: the title, where the numbers come from and where the command runs, then the run's
    own text."""
    where = f"| Run from | {WHERE} |\n" if info.command.startswith("python -m bench") else ""
    return (f"# {title}\n\n"
            "| | |\n|---|---|\n"
            f"| Command | `{info.command}` |\n{where}"
            f"| Commit | `{info.commit}` |\n"
            f"| Machine | {info.machine} |\n"
            f"| Date | {info.when:%Y-%m-%d %H:%M} UTC |\n\n"
            f"{body.rstrip()}\n")


def write_page(benchmark: str, title: str, info: RunInfo, body: str, folder: Path = RESULTS) -> Path:
    """Write the run's dated page and list it in the folder's ``index.md``; return the page."""
    folder.mkdir(parents=True, exist_ok=True)
    path = page_path(benchmark, info.when, folder)
    path.write_text(redact_text(render(title, info, body)))  # a key an error quoted never reaches a page
    update_index(folder)
    return path


def fenced(lines: Sequence[str]) -> str:
    """Return printed table lines as a fenced block, as they appeared on the terminal."""
    return "```\n" + "\n".join(lines).strip("\n") + "\n```\n"


class _Tee(io.TextIOBase):
    """Write to the terminal and keep a copy."""

    def __init__(self, terminal: io.TextIOBase) -> None:
        self.terminal, self.kept = terminal, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.terminal.write(text)

    def flush(self) -> None:
        self.terminal.flush()


@contextmanager
def results_page(benchmark: str, title: str, module: str, argv: Sequence[str] | None = None, *,
                 enabled: bool = True, markdown: bool = False, folder: Path = RESULTS) -> Iterator[RunInfo]:
    """Print as usual inside the block; when it ends without an error, write what it printed as the run's page.

    ``markdown``: the output is Markdown already (its tables are kept as tables); otherwise it is
    kept verbatim in a fenced block. ``enabled`` False (a benchmark's ``--no-page``) writes nothing.
    """
    info = run_info(command_line(argv, module))
    tee = _Tee(sys.stdout)  # type: ignore[arg-type]
    with redirect_stdout(tee):  # type: ignore[type-var]
        yield info
    if enabled:
        text = tee.kept.getvalue()
        page = write_page(benchmark, title, info, text if markdown else fenced(text.splitlines()), folder)
        print(f"results page: {_portable(str(page))}")


def update_index(folder: Path = RESULTS) -> None:
    """Rewrite the index's list of runs: each series' newest page under *Latest*, older ones under *History*.

    A series is one benchmark under one title: a benchmark whose runs measure different things (other workloads)
    titles them apart, and a page of one is never listed as superseded by a page of the other.
    """
    index = folder / "index.md"
    text = index.read_text() if index.exists() else "# Results\n"
    pages: dict[tuple[str, str], list[tuple[str, Path]]] = {}
    for page in folder.glob("*.md"):
        match = PAGE_NAME.match(page.name)
        if match:
            key = match["date"] + (match["time"] or "")
            pages.setdefault((match["bench"], _heading(page)), []).append((key, page))
    latest, history = [], []
    for series in sorted(pages):
        ordered = sorted(pages[series], reverse=True)
        latest.append(f"* [{_title(ordered[0][1])}]({ordered[0][1].name})")
        history += [f"* [{_title(p)}]({p.name}) — superseded by {ordered[0][1].name}" for _, p in ordered[1:]]
    if (folder / "history.md").exists():
        history.append("* [Earlier results, kept by hand](history.md)")
    block = "\n".join([INDEX_START, "## Benchmark runs", "", "### Latest", "", *latest, "",
                       "### History", "", *(history or ["* none yet"]), INDEX_END])
    if INDEX_START in text and INDEX_END in text:
        before, rest = text.split(INDEX_START, 1)
        text = before + block + rest.split(INDEX_END, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    index.write_text(text)


def _heading(page: Path) -> str:
    """Return a page's first heading (its stem when it has none)."""
    first = next((line for line in page.read_text().splitlines() if line.startswith("# ")), f"# {page.stem}")
    return first[2:].strip()


def _title(page: Path) -> str:
    """Return a page's title (its first heading), with its date."""
    match = PAGE_NAME.match(page.name)
    return f"{_heading(page)} ({match['date'] if match else page.stem})"
