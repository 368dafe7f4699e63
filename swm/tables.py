"""Extension tables: the rows of one extension point, by name (two-seat shapes, estimators, ToM benchmarks).

A new family, estimator or benchmark is a row (`Table.register`), and everything that offers a choice
reads the table: the CLI's options (`swm.commands._common.TableChoice`), config validation, the loops.
A row registered twice must be the same row; a lookup of a name the table lacks fails naming its rows.
A model field that holds a row's name says so with `Names` (its validator checks the name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

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


@dataclass(frozen=True)
class Names:
    """Field metadata: the field's values are the names a table holds now (``names()``).

    CLIs offer them (`swm.commands._common.TableChoice`, `CommaList`) and the field's JSON schema lists them as
    its ``enum`` (Studio's form), both read when asked, so a row registered after the model was built counts.
    """

    names: Callable[[], tuple[str, ...]]

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {**handler(schema), "enum": list(self.names())}
