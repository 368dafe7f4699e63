"""The house rules that `python -m bench.house` measures, held for ``swm/``: no function over 60 lines."""

from __future__ import annotations

import ast

from bench.house import MAX_FUNCTION_LINES, long_functions, measure
from bench.results import ROOT


def test_no_function_in_swm_is_longer_than_the_limit() -> None:
    long = measure(ROOT / "swm").long_functions
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them along a seam you can name): " + ", ".join(
        f"{f.path}:{f.line} {f.name} ({f.lines})" for f in long)


def test_the_measure_counts_a_function_from_its_def_to_its_last_line() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    at_limit = f"@decorator\ndef fits():\n{body}\n"
    over = f"def too_long():\n{body}\n    return x0\n"
    nested = f"class C:\n    def method(self):\n        def inner():\n{body.replace('    ', '            ')}\n" \
             "            return 1\n        return inner\n"
    assert long_functions(ast.parse(at_limit), "m.py") == []
    assert [(f.name, f.lines) for f in long_functions(ast.parse(over), "m.py")] == [("too_long", 61)]
    assert {f.name for f in long_functions(ast.parse(nested), "m.py")} == {"method", "inner"}
