"""``python -m bench.mutation``: mutation testing of the reward modules, with a results page.

Each mutant changes one operator or constant of one reward module (`MODULES`): a comparison (``==`` ↔
``!=``, ``<`` ↔ ``<=``, ``in`` ↔ ``not in`` …), ``and`` ↔ ``or``, a dropped ``not``, ``True`` ↔ ``False``,
a number plus one, ``+`` ↔ ``-``, ``&`` ↔ ``|``, ``min`` ↔ ``max``, ``any`` ↔ ``all``, ``break`` →
``continue`` — plus the mutants a review once found surviving (`NAMED`). A mutant is *killed* when the
module's own test files (`MODULES`, not the suite) fail on it, *survives* when they pass. A line that
carries ``# mutation: equivalent <why>`` is not mutated (no test can tell its mutants apart: the page
lists each with its reason).

Why a small AST mutator and not mutmut or cosmic-ray (neither is in the lock): both start a fresh
test process per mutant (seconds of imports each, minutes for a few hundred mutants on two busy
cores) and mutate files in place or in a copied tree. Here one process imports the test stack once
and forks per mutant; the child imports swm again with the mutated module served from memory
(nothing on disk changes, so runs may share a checkout) and runs pytest on the module's test files,
stopping at the first failure. A few seconds a mutant on a busy core; ``--jobs`` runs several at once.
A mutant whose tests time out runs once more alone with twice the time before it counts (`run_settled`);
one that times out again is reported apart from the killed ones.

    python -m bench.mutation                      # every reward module; writes docs/results/mutation-<date>.md
    python -m bench.mutation --only rewards --no-page --jobs 1
"""

from __future__ import annotations

import argparse
import ast
import importlib.abc
import importlib.util
import os
import select
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import hypothesis  # noqa: F401 - the test stack, imported once before the children fork
import pytest

import swm.selfplay.rewards  # noqa: F401 - swm's imports too: each child imports only swm's own modules again
import swm.tasks.verify  # noqa: F401
from bench.results import ROOT, results_page

# module -> the test files that hold its rules (run per mutant, in this order: the fastest to fail first)
MODULES: dict[str, tuple[str, ...]] = {
    "swm.tasks.checkers": ("tests/test_checker_rules.py", "tests/test_reward_invariants.py",
                           "tests/test_checker_mutations.py", "tests/test_lifelong_tasks.py",
                           "tests/test_lifelong_decisions.py"),
    "swm.tasks.two_seat": ("tests/test_two_seat_shapes.py", "tests/test_reward_invariants.py",
                           "tests/test_two_seat.py", "tests/test_two_seat_scheduling.py"),
    "swm.tasks.two_turn": ("tests/test_two_turn_rules.py", "tests/test_reward_invariants.py", "tests/test_two_turn.py"),
    "swm.selfplay.rewards": ("tests/test_reward_mix.py", "tests/test_reward_invariants.py",
                             "tests/test_selfplay_rewards.py", "tests/test_selfplay_rollout.py"),
    "swm.tasks.multi_turn": ("tests/test_multi_turn.py", "tests/test_reward_invariants.py"),
}
# mutants a review found surviving, kept so that a later run shows them killed: (module, old, new, what)
NAMED: tuple[tuple[str, str, str, str], ...] = (
    ("swm.tasks.checkers", "outcome.winner == VILLAGE", "outcome.winner in (VILLAGE, \"draw\")",
     "a draw counted as the village's win"),
    ("swm.tasks.two_seat", "len(spoken & set(own))", "len(spoken)", "speaker_listed counts any slot said"),
    ("swm.tasks.checkers", "completion=inside and not leaked", "completion=inside", "a leaked deal completes"),
)
EQUIVALENT = "# mutation: equivalent"
SWAP_COMPARE = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE,
                ast.GtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
SWAP_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
              ast.Mult: ast.Div, ast.Div: ast.Mult}
SWAP_CALL = {"min": "max", "max": "min", "any": "all", "all": "any"}


@dataclass(frozen=True)
class Mutant:
    module: str
    line: int
    what: str
    source: str


class _Mutator(ast.NodeTransformer):
    """Apply the ``target``-th possible mutation of a tree (counting them all when ``target`` is -1)."""

    def __init__(self, target: int, skip: set[int]) -> None:
        self.target, self.skip, self.seen = target, skip, 0
        self.done: tuple[int, str] | None = None

    def _hit(self, node: ast.AST, what: str) -> bool:
        line = getattr(node, "lineno", 0)
        if line in self.skip:
            return False
        self.seen += 1
        if self.seen - 1 == self.target:
            self.done = (line, what)
            return True
        return False

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node  # a docstring
        return self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return node  # an f-string's text: messages, not rules

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is not None:  # the annotation is never evaluated (``from __future__ import annotations``)
            node.value = self.visit(node.value)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.body = [self.visit(stmt) for stmt in node.body]  # not the signature's annotations
        node.args.defaults = [self.visit(d) for d in node.args.defaults]
        node.args.kw_defaults = [self.visit(d) if d is not None else None for d in node.args.kw_defaults]
        return node

    def visit_keyword(self, node: ast.keyword) -> ast.AST:
        if node.arg == "strict":  # zip(strict=...) only raises on a length mismatch the code never builds
            return node
        return self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            swapped = SWAP_COMPARE.get(type(op))
            if swapped is not None and self._hit(node, f"{type(op).__name__} → {swapped.__name__}"):
                node.ops[i] = swapped()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        if self._hit(node, f"{type(node.op).__name__} → {type(other).__name__}"):
            node.op = other
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not) and self._hit(node, "not dropped"):
            return node.operand
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        swapped = SWAP_BINOP.get(type(node.op))
        if swapped is not None and not _is_string(node) and self._hit(node, f"{type(node.op).__name__} → "
                                                                              f"{swapped.__name__}"):
            node.op = swapped()
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, bool):
            if self._hit(node, f"{value} → {not value}"):
                return ast.copy_location(ast.Constant(not value), node)
        elif isinstance(value, int | float) and self._hit(node, f"{value} → {value + 1}"):
            return ast.copy_location(ast.Constant(value + 1), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in SWAP_CALL:
            other = SWAP_CALL[node.func.id]
            if self._hit(node, f"{node.func.id}() → {other}()"):
                node.func = ast.copy_location(ast.Name(other, ast.Load()), node.func)
        return node

    def visit_Break(self, node: ast.Break) -> ast.AST:
        if self._hit(node, "break → continue"):
            return ast.copy_location(ast.Continue(), node)
        return node


def _is_string(node: ast.BinOp) -> bool:
    return any(isinstance(side, ast.Constant | ast.JoinedStr) and isinstance(getattr(side, "value", ""), str)
               for side in (node.left, node.right))


def module_path(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


def equivalent_lines(text: str) -> dict[int, str]:
    """Return the lines marked equivalent, with their reasons."""
    return {n: line.split(EQUIVALENT, 1)[1].strip() for n, line in enumerate(text.splitlines(), 1)
            if EQUIVALENT in line}


def mutants(module: str) -> Iterator[Mutant]:
    """Yield every mutant of a module: one AST mutation each, then its named ones."""
    text = module_path(module).read_text()
    skip = set(equivalent_lines(text))
    counter = _Mutator(-1, skip)
    counter.visit(ast.parse(text))
    for target in range(counter.seen):
        mutator = _Mutator(target, skip)
        tree = ast.fix_missing_locations(mutator.visit(ast.parse(text)))
        assert mutator.done is not None
        yield Mutant(module, mutator.done[0], mutator.done[1], ast.unparse(tree))
    for name, old, new, what in NAMED:
        if name == module:
            if old not in text:
                raise SystemExit(f"named mutant {what!r}: {old!r} is no longer in {module}")
            line = text[:text.index(old)].count("\n") + 1
            yield Mutant(module, line, f"named: {what}", text.replace(old, new, 1))


class _Source(importlib.abc.SourceLoader):
    """Load one module from source held in memory (no bytecode cache: `path_stats` is not defined)."""

    def __init__(self, path: Path, source: str) -> None:
        self.path, self.source = path, source

    def get_filename(self, fullname: str) -> str:
        return str(self.path)

    def get_data(self, path: str) -> bytes:
        return self.source.encode()


class _Served(importlib.abc.MetaPathFinder):
    """Find one module name in memory: the mutant's source in place of its file."""

    def __init__(self, name: str, path: Path, source: str) -> None:
        self.name, self.path, self.loader = name, path, _Source(path, source)

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self.loader)


def _run_child(mutant: Mutant | None, tests: Sequence[str]) -> None:
    """In a forked child: forget swm and the test modules, serve the mutant, run pytest, exit with its status."""
    for name in [n for n in sys.modules if n == "swm" or n.startswith(("swm.", "test_", "conftest"))
                 or n in ("toy_task", "toy_two_seat", "helpers", "lifelong_helpers", "load", "fake_vllm",
                          "games_scripted", "tom_scripted")]:
        del sys.modules[name]
    if mutant is not None:
        sys.meta_path.insert(0, _Served(mutant.module, module_path(mutant.module), mutant.source))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    code = pytest.main([*tests, "-x", "-q", "-n", "0", "-p", "no:randomly", "-p", "no:cacheprovider",
                        "--timeout", "120"])
    os._exit(int(code))


def spawn(mutant: Mutant | None, tests: Sequence[str]) -> int:
    """Fork a child that runs one mutant's tests; return its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            _run_child(mutant, tests)
        finally:
            os._exit(70)
    return pid


def run_all(work: Sequence[tuple[Mutant | None, Sequence[str]]], jobs: int, timeout: float,
            on_verdict: Callable[[int, str], None] = lambda i, verdict: None) -> list[str]:
    """Run each (mutant, tests) in a forked child, ``jobs`` at a time; return ``killed``, ``survived`` or
    ``timeout`` (a killed mutant too: a loop that never ends) for each, in order."""
    verdicts = [""] * len(work)
    running: dict[int, tuple[int, float]] = {}
    queue = list(range(len(work)))
    while queue or running:
        while queue and len(running) < jobs:
            i = queue.pop(0)
            running[spawn(*work[i])] = (i, time.monotonic() + timeout)
        for pid, (i, deadline) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                verdicts[i] = "survived" if os.waitstatus_to_exitcode(status) == 0 else "killed"
            elif time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                verdicts[i] = "timeout"
            else:
                continue
            del running[pid]
            on_verdict(i, verdicts[i])
        select.select([], [], [], 0.02)
    return verdicts


def run_settled(work: Sequence[tuple[Mutant | None, Sequence[str]]], jobs: int, timeout: float,
                on_verdict: Callable[[int, str], None] = lambda i, verdict: None,
                run: Callable[..., list[str]] = run_all) -> list[str]:
    """`run_all`, then each mutant that timed out once more alone with twice the time: on a busy machine a
    surviving mutant's tests can outlast the budget, and counting that as killed would hide a survivor. A
    mutant that times out again stays ``timeout`` (the page lists it apart from the killed ones)."""
    def first(i: int, verdict: str) -> None:
        if verdict != "timeout":
            on_verdict(i, verdict)

    verdicts = run(work, jobs, timeout, first)
    late = [i for i, verdict in enumerate(verdicts) if verdict == "timeout"]
    if late:
        again = run([work[i] for i in late], 1, 2 * timeout, lambda j, verdict: on_verdict(late[j], verdict))
        for i, verdict in zip(late, again, strict=True):
            verdicts[i] = verdict
    return verdicts


def mutant_budget(timeout: float, unmutated_s: float) -> float:
    """Seconds a mutant's tests may take: ``timeout``, or five times the unmutated run's time where that is more
    (a loaded machine slows every run alike)."""
    return max(timeout, 5 * unmutated_s)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma list of module name parts to mutate (default: all)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a mutant's tests may take")
    ap.add_argument("--jobs", type=int, default=2, help="mutants tested at once (one process each)")
    ap.add_argument("--lines", default="", help="comma list of module:line (e.g. swm.tasks.checkers:42): mutate only "
                    "those lines (to check that earlier survivors are killed now)")
    ap.add_argument("--no-page", action="store_true", help="print the result; write no results page")
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT / "tests"))
    picked = {x.rsplit(":", 1)[0] for x in args.lines.split(",") if x}
    chosen = [m for m in MODULES if (not args.only or any(part in m for part in args.only.split(",")))
              and (not picked or m in picked)]
    with results_page("mutation", "Mutation testing of the reward modules", "bench.mutation", argv,
                      enabled=not args.no_page, markdown=True):
        report(chosen, args.jobs, args.timeout, {tuple(x.rsplit(":", 1)) for x in args.lines.split(",") if x})


def report(modules: Sequence[str], jobs: int, timeout: float, lines: set[tuple[str, ...]] | None = None) -> None:
    """Run every mutant of the modules and print the result as Markdown: counts, then each survivor."""
    started = time.perf_counter()
    rows: list[str] = []
    survivors: list[str] = []
    timeouts: list[str] = []
    equivalents: list[str] = []
    for module in modules:
        tests = MODULES[module]
        clock = time.perf_counter()
        if run_all([(None, tests)], 1, 4 * timeout) != ["survived"]:
            raise SystemExit(f"the unmutated {module} fails its own tests {tests} (or outlasts {4 * timeout:.0f} s): "
                             "fix that first")
        budget = mutant_budget(timeout, time.perf_counter() - clock)
        counts = {"killed": 0, "survived": 0, "timeout": 0}
        found = [m for m in mutants(module) if not lines or (m.module, str(m.line)) in lines]
        def said(i: int, verdict: str, found: list[Mutant] = found) -> None:
            if verdict == "survived":  # as it is found: a long run can be read while it goes on
                print(f"survived: {found[i].module}:{found[i].line} {found[i].what}", file=sys.stderr, flush=True)

        for mutant, verdict in zip(found, run_settled([(m, tests) for m in found], jobs, budget, said), strict=True):
            counts[verdict] += 1
            if verdict == "survived":
                survivors.append(f"| `{module}` | {mutant.line} | {mutant.what} |")
            elif verdict == "timeout":
                timeouts.append(f"| `{module}` | {mutant.line} | {mutant.what} |")
        marked = equivalent_lines(module_path(module).read_text())
        equivalents += [f"| `{module}` | {line} | {why} |" for line, why in marked.items()]
        total = sum(counts.values())
        rows.append(f"| `{module}` | {total} | {counts['killed']} | {counts['timeout']} | {counts['survived']} | "
                    f"{budget:.0f} | {', '.join(f'`{t}`' for t in tests)} |")
        print(f"{module}: {total} mutants, {counts['survived']} survived", file=sys.stderr, flush=True)
    print("Each mutant changes one operator or constant of a reward module (or is a named mutant a review found "
          "surviving); it is killed when the module's own test files fail on it.\n")
    print("A mutant whose tests outlast the budget (the given `--timeout`, or five times the unmutated tests' "
          "time where that is more) runs once more alone with twice the time; one that times out again is "
          "counted under *timed out*, not killed (a loop that never ends, or a machine too busy to tell).\n")
    print("| module | mutants | killed | timed out | survived | budget (s) | test files |\n"
          "|---|---:|---:|---:|---:|---:|---|")
    print("\n".join(rows))
    print(f"\n{time.perf_counter() - started:.0f} s in all.\n")
    print("## Surviving mutants\n")
    print("\n".join(["| module | line | mutation |", "|---|---:|---|", *survivors]) if survivors else "None.")
    print("\n## Mutants that timed out twice\n")
    print("\n".join(["| module | line | mutation |", "|---|---:|---|", *timeouts]) if timeouts else "None.")
    print("\n## Lines not mutated (equivalent mutants)\n")
    print("\n".join(["| module | line | why no test can tell |", "|---|---:|---|", *equivalents])
          if equivalents else "None.")


if __name__ == "__main__":
    main()
