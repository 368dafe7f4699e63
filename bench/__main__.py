"""``python -m bench``: the swm performance suite (see bench/README.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.results import results_page
from bench.runner import SECTIONS, Settings, run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Measure every swm graph's cost and "
                                     "speed against its floor, as ratios measured side by side in one run.")
    parser.add_argument("--quick", action="store_true", help="a small, fast smoke run (CI)")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})")
    parser.add_argument("--latency", type=float, default=None, help="fake model latency in seconds (default 0.2)")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per graph and checkpointer")
    parser.add_argument("--json", type=Path, default=None, help="also write every measurement to this JSON file")
    parser.add_argument("--no-page", action="store_true",
                        help="do not write the run's dated page under docs/results/ (a --quick run writes none)")
    args = parser.parse_args(argv)
    sections = tuple(s.strip() for s in args.only.split(",") if s.strip())
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s) {', '.join(sorted(unknown))}; choose from {', '.join(SECTIONS)}")
    settings = Settings.quick() if args.quick else Settings()
    if args.latency is not None:
        settings.latency = args.latency
    if args.runs is not None:
        settings.runs = args.runs
    name = "suite" if set(sections) == set(SECTIONS) else "suite-" + "-".join(sections)
    with results_page(name, f"Performance suite: {', '.join(sections)}", "bench", argv,
                      enabled=not (args.quick or args.no_page)):
        run(sections, settings, json_path=args.json)


if __name__ == "__main__":
    main()
