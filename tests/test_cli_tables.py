"""Every CLI choice of an extension point is read from its table, and no command types a table's names out.

The tables: two-seat shapes (`swm.tasks.families.TWO_SEAT_SHAPES`), the levels one model plays in every seat
(`swm.tasks.levels.LEVEL_ROWS`), advantage estimators (`swm.training.advantages.ESTIMATORS`), ToM benchmarks
(`swm.tom.items.BENCHMARKS`) and games.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import click
import pytest

from swm.cli import main
from swm.commands._common import TableChoice
from swm.games import game_names
from swm.lifelong.plan import LifelongPlan
from swm.tasks.families import FAMILIES, LEVELS, two_seat_families
from swm.tasks.levels import seat_levels
from swm.tom.items import benchmark_names
from swm.training.advantages import estimator_names, learn_estimator_names

TABLES: dict[str, Callable[[], tuple[str, ...]]] = {
    "estimators": estimator_names, "learn estimators": learn_estimator_names, "two-seat families": two_seat_families,
    "ToM benchmarks": benchmark_names, "games": game_names, "seat levels": seat_levels}
# (command path, option) -> what its choices are: a table's names, plus any named extras
OPTIONS: dict[tuple[str, str], tuple[Callable[[], tuple[str, ...]], tuple[str, ...]]] = {
    ("selfplay", "estimator"): (estimator_names, ()),
    ("learn", "estimator"): (learn_estimator_names, ()),
    ("selfplay", "family"): (two_seat_families, FAMILIES),
    ("bench tom", "benchmark"): (benchmark_names, ("sim",)),
    ("selfplay", "game"): (game_names, ()),
    ("selfplay", "level"): (seat_levels, LEVELS),
}

# options whose choices are another table that shares names with one of these: the parser's tasks
# (`swm.context.ParseTask`), which a benchmark's row names (`Benchmark.task`), are not benchmarks
OTHER_TABLES = {("parse", "task"), ("ask", "task")}


def commands(group: click.Group = main, path: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        where = f"{path} {name}".strip()
        if isinstance(command, click.Group):
            yield from commands(command, where)
        else:
            yield where, command


def choice_params() -> Iterator[tuple[str, click.Parameter]]:
    for where, command in commands():
        for param in command.params:
            if isinstance(param.type, click.Choice):
                yield where, param


@pytest.mark.parametrize(("where", "option"), sorted(OPTIONS))
def test_each_extension_option_offers_its_tables_names(where: str, option: str) -> None:
    table, extra = OPTIONS[(where, option)]
    param = next(p for w, p in choice_params() if w == where and p.name == option)
    assert isinstance(param.type, TableChoice), f"swm {where} --{option} types its choices out"
    assert set(param.type.choices) == {*table(), *extra}


def test_no_other_option_types_out_a_tables_names() -> None:
    tied = {(w, p.name) for w, p in choice_params() if isinstance(p.type, TableChoice)}
    assert tied == set(OPTIONS), "a TableChoice option is missing from OPTIONS (or the reverse)"
    for where, param in choice_params():
        if isinstance(param.type, TableChoice) or (where, param.name) in OTHER_TABLES:
            continue
        assert isinstance(param.type, click.Choice)
        for name, table in TABLES.items():
            overlap = set(param.type.choices) & set(table())
            assert len(overlap) < 2, f"swm {where} --{param.name} types out {name}: {sorted(overlap)}"


def test_the_plans_estimator_field_is_checked_against_the_table() -> None:
    assert LifelongPlan(estimator="group").estimator == "group"
    with pytest.raises(ValueError, match="not offered by swm learn"):
        LifelongPlan(estimator="rs")
    with pytest.raises(ValueError, match="unknown estimator"):
        LifelongPlan(estimator="nope")
