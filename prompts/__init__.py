"""Prompt templates as files, versioned by name: ``prompts/<name>.v<N>.md``.

`load("parse")` returns the newest version, `load("parse", "v1")` a fixed one. Placeholders are
``{identifier}``; braces around anything else (JSON examples) are left alone. Every run records
the ``name@version`` ids it rendered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PROMPT_DIR = Path(__file__).parent
_FILE_RE = re.compile(r"^(?P<name>[a-z0-9_]+)\.(?P<version>v\d+)\.md$")
_PLACEHOLDER_RE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@dataclass(frozen=True)
class Prompt:
    """One versioned template."""

    name: str
    version: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def placeholders(self) -> frozenset[str]:
        return frozenset(_PLACEHOLDER_RE.findall(self.text))

    def render(self, **values: object) -> str:
        """Fill every placeholder; a missing or unexpected value is an error, not a blank."""
        missing = self.placeholders - values.keys()
        extra = values.keys() - self.placeholders
        if missing or extra:
            raise KeyError(f"prompt {self.id}: missing {sorted(missing)}, unexpected {sorted(extra)}")
        return _PLACEHOLDER_RE.sub(lambda m: str(values[m.group(1)]), self.text)


@cache
def available() -> dict[str, list[str]]:
    """Return every prompt name with its versions, oldest first."""
    found: dict[str, list[str]] = {}
    for path in PROMPT_DIR.glob("*.md"):
        match = _FILE_RE.match(path.name)
        if match:
            found.setdefault(match["name"], []).append(match["version"])
    return {name: sorted(versions, key=lambda v: int(v[1:])) for name, versions in sorted(found.items())}


@cache
def load(name: str, version: str | None = None) -> Prompt:
    """Load a prompt by name, the newest version unless one is given."""
    versions = available().get(name)
    if not versions:
        raise KeyError(f"no prompt named {name!r}; available: {', '.join(available())}")
    chosen = version or versions[-1]
    if chosen not in versions:
        raise KeyError(f"prompt {name!r} has no version {chosen!r}; versions: {', '.join(versions)}")
    return Prompt(name=name, version=chosen, text=(PROMPT_DIR / f"{name}.{chosen}.md").read_text())


__all__ = ["Prompt", "available", "load"]
