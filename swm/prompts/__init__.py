"""Prompt templates as files, versioned by name: ``prompts/<name>.v<N>.md``.

`load("parse")` returns the newest version, `load("parse", "v1")` a fixed one. Placeholders are
``{identifier}``; braces around anything else (JSON examples) are left alone. Every run records
the ``name@version`` ids it rendered.

Text a user or another agent supplied (narratives, questions, scenarios, transcripts) stands in
a template inside a fence, ``<data name="story">\n{story}\n</data>``, and the template tells the
model that instructions inside a fence are content. `Prompt.render` neutralises fence tags inside
such values, so an injected ``</data>`` cannot close the fence early.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PROMPT_DIR = Path(__file__).parent
_FILE_RE = re.compile(r"^(?P<name>[a-z0-9_]+)\.(?P<version>v\d+)\.md$")
_PLACEHOLDER_RE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
FENCE_RE = re.compile(r'<data name="[a-z_ ]+">\n(.*?)\n</data>', re.S)
_FENCED_SLOT_RE = re.compile(r'<data name="[a-z_ ]+">\n\{([a-z_][a-z0-9_]*)\}\n</data>')
_FENCE_TAG_RE = re.compile(r"<(\s*/?\s*data)\b", re.I)


def neutralise(text: str) -> str:
    """Return ``text`` with every ``<data``/``</data`` tag made inert (``&lt;data``)."""
    return _FENCE_TAG_RE.sub(r"&lt;\1", text)


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

    @property
    def fenced(self) -> frozenset[str]:
        """The placeholders that stand alone inside a ``<data>`` fence (user-supplied text)."""
        return frozenset(_FENCED_SLOT_RE.findall(self.text))

    def render(self, **values: object) -> str:
        """Fill every placeholder; a missing or unexpected value is an error, not a blank.

        Values of fenced placeholders have their fence tags neutralised.
        """
        missing = self.placeholders - values.keys()
        extra = values.keys() - self.placeholders
        if missing or extra:
            raise KeyError(f"prompt {self.id}: missing {sorted(missing)}, unexpected {sorted(extra)}")
        fenced = self.fenced

        def fill(match: re.Match[str]) -> str:
            value = str(values[match.group(1)])
            return neutralise(value) if match.group(1) in fenced else value

        return _PLACEHOLDER_RE.sub(fill, self.text)


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


__all__ = ["FENCE_RE", "Prompt", "available", "load", "neutralise"]
