"""Base rates of the sampled levels: a model's pass rate on decision and two-turn test tasks, per family.

Each task of the test split is played once (sample 0: its seeded draw, the one every policy of a
`swm learn` run gets) through the loop's own players (`swm.lifelong.decision_play.play_decision`,
`swm.lifelong.two_turn_play.play_two_turn`) and checked by the family's checker. Pass rates with
95% Wilson intervals; for two-turn also how often the first move was the one asked for. Not a
timed test::

    SWM_EMBEDDED_THREADS=1 python -m bench.levels_base --n 50 --temperature 0.7

``--names shared`` plays the test tasks of the one shared name pool (the splits before 2026-11-26, on which
the tables of docs/learning.md were measured); ``--shift`` a shifted cell (``unseen-names``, ``long-lists``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from swm.context import SWMContext
from swm.lifelong.decision_play import play_decision
from swm.lifelong.two_turn_play import play_two_turn
from swm.stats import wilson_interval
from swm.tasks.families import DECISION, NAME_POLICIES, SHIFTS, TWO_TURN, decision_families
from swm.tasks.splits import split_tasks

PLAYERS = {DECISION: play_decision, TWO_TURN: play_two_turn}


def measure(ctx: SWMContext, level: str, family: str, n: int, skip: int = 0, names: str = "disjoint",
            shift: str | None = None) -> dict[str, Any]:
    """Play test tasks ``skip`` to ``skip + n`` of one level and family once each; return the counts and seconds."""
    passed = first = 0
    moves: list[dict[str, Any]] = []
    start = time.perf_counter()
    for task in split_tasks("test", [level], [family], skip + n, names=names, shift=shift)[skip:]:
        record, _ = PLAYERS[level](task, ctx, episode_id=f"base/{task.task_id}", sample=0)
        passed += record.verdict.passed
        first += bool(record.verdict.detail.get("first_move"))
        moves.append({"task_id": task.task_id, "turns": [t.text for t in record.turns],
                      "passed": record.verdict.passed})
    return {"level": level, "family": family, "skip": skip, "n": n, "passed": passed, "first_move": first,
            "seconds": round(time.perf_counter() - start, 1), "moves": moves}


def _cell(k: int, n: int) -> str:
    low, high = wilson_interval(k, n)
    return f"{k}/{n} = {100 * k / n:.0f}% [{100 * low:.1f}, {100 * high:.1f}]"


def table(rows: list[dict[str, Any]]) -> str:
    """Render the rows as a markdown table: one line per family, decision beside two-turn."""
    by = {(r["level"], r["family"]): r for r in rows}
    lines = ["| family | decision | two-turn | two-turn first move made |", "|---|---|---|---|"]
    for family in sorted({r["family"] for r in rows}, key=decision_families().index):
        cells = [_cell(by[(lvl, family)]["passed"], by[(lvl, family)]["n"]) if (lvl, family) in by else "–"
                 for lvl in (DECISION, TWO_TURN)]
        turn = by.get((TWO_TURN, family))
        cells.append(_cell(turn["first_move"], turn["n"]) if turn else "–")
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.levels_base", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="test tasks per family and level")
    parser.add_argument("--skip", type=int, default=0, help="start after this many tasks (to extend a run)")
    parser.add_argument("--levels", default=f"{DECISION},{TWO_TURN}")
    parser.add_argument("--families", default=",".join(decision_families()))
    parser.add_argument("--model", default="embedded", help="the model spec (default: the shipped SmolLM2)")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--names", choices=NAME_POLICIES, default="disjoint",
                        help="the test split's name pool: disjoint from training's, or the one shared pool")
    parser.add_argument("--shift", choices=SHIFTS, default=None, help="play a shifted cell instead")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows, with every move, as JSON here")
    args = parser.parse_args()
    ctx = SWMContext(model=args.model, temperature=args.temperature)
    rows = []
    for family in args.families.split(","):
        for level in args.levels.split(","):
            rows.append(measure(ctx, level, family, args.n, args.skip, args.names, args.shift))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "moves"}), flush=True)
            if args.out:  # each cell as it finishes: a cut run keeps what it measured
                args.out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(table(rows))


if __name__ == "__main__":
    main()
