"""``python -m bench.house``: how the code reads — long functions and ``Any`` per 1,000 lines of ``swm/``.

Two numbers the contributing rules set a goal for, counted from the syntax tree (no import):

* functions (``def`` and ``async def``, methods and nested ones included) longer than `MAX_FUNCTION_LINES`
  lines, from the ``def`` line (decorators excluded) to the last line of the body, docstring included;
* ``Any`` per 1,000 lines: every ``Any`` name in the code (annotations, casts, aliases; the ``import`` line
  itself not counted), per 1,000 physical lines of the ``.py`` files.

    python -m bench.house                 # prints both, and the files with the most ``Any``; no page
    python -m bench.house --page          # also writes docs/results/house-<date>.md
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.results import ROOT, results_page

MAX_FUNCTION_LINES = 60


@dataclass(frozen=True)
class LongFunction:
    path: str
    name: str
    line: int
    lines: int


@dataclass(frozen=True)
class House:
    lines: int
    any_names: Counter[str]
    long_functions: tuple[LongFunction, ...]

    @property
    def any_per_kloc(self) -> float:
        return 1000 * sum(self.any_names.values()) / max(self.lines, 1)


def long_functions(tree: ast.AST, path: str, limit: int = MAX_FUNCTION_LINES) -> list[LongFunction]:
    """Every function of ``tree`` longer than ``limit`` lines."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append(LongFunction(path, node.name, node.lineno, length))
    return found


def measure(root: Path = ROOT / "swm") -> House:
    """Count the lines, the ``Any`` names per file and the long functions under ``root``."""
    lines, anys, long = 0, Counter[str](), []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        name = str(path.relative_to(root.parent))
        lines += len(source.splitlines())
        anys[name] = sum(1 for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == "Any")
        long += long_functions(tree, name)
    return House(lines, +anys, tuple(sorted(long, key=lambda f: -f.lines)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.house", description=__doc__.splitlines()[0])
    parser.add_argument("--page", action="store_true", help="write the run's dated page under docs/results/")
    parser.add_argument("--top", type=int, default=15, help="list this many files with the most Any")
    args = parser.parse_args(argv)
    with results_page("house", "The house: long functions and Any", "bench.house", argv, enabled=args.page):
        house = measure()
        print(f"lines of swm/: {house.lines}")
        print(f"functions over {MAX_FUNCTION_LINES} lines: {len(house.long_functions)}")
        for f in house.long_functions:
            print(f"  {f.lines:4d}  {f.path}:{f.line} {f.name}")
        total = sum(house.any_names.values())
        print(f"Any: {total} names, {house.any_per_kloc:.1f} per 1,000 lines")
        for path, count in house.any_names.most_common(args.top):
            print(f"  {count:4d}  {path}")


if __name__ == "__main__":
    main()
