"""A package's public names imported on first use (PEP 562), so importing the package loads none of their modules.

``swm``, ``swm.games`` and ``swm.lifelong`` re-export names whose modules pull in model clients, LangGraph or the
store; `swm --help` and every command's ``--help`` must not pay for them. A package keeps its names' homes in one
table and takes its module ``__getattr__`` and ``__dir__`` from `lazy_exports`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, homes: Mapping[str, str],
                 names: Sequence[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return the module ``__getattr__`` and ``__dir__`` of ``package``: a name of ``homes`` (name → the module that
    defines it) is imported from its home when first asked for and kept in the package; ``names`` (``__all__``)
    are listed by ``dir`` before they are loaded."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name in homes:
            value = getattr(importlib.import_module(homes[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
