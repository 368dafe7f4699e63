"""Extension tables: the rows of one extension point, by name (two-seat shapes, estimators, ToM benchmarks).

A new family, estimator or benchmark is a row (`Table.register`), and everything that offers a choice
reads the table: the CLI's options (`swm.commands._common.TableChoice`), config validation, the loops.
A row registered twice must be the same row; a lookup of a name the table lacks fails naming its rows.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


class Table(dict[str, T]):
    """The rows of one extension point, by name (a dict: ``in``, ``get`` and iteration read it as usual)."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def register(self, name: str, row: T) -> T:
        """Add a row (registering the same row again is a no-op; another row of that name is an error)."""
        if self.get(name, row) != row:
            raise ValueError(f"a {self.what} {name!r} is already registered")
        self[name] = row
        return row

    def names(self) -> tuple[str, ...]:
        """Return the rows' names, in registration order."""
        return tuple(self)

    def row(self, name: str) -> T:
        """Return the row of that name, or fail naming the rows there are."""
        if name not in self:
            raise ValueError(f"unknown {self.what} {name!r}; the {self.what}s are {', '.join(self)}")
        return self[name]
