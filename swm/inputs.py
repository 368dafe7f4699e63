"""Read the user's text and JSONL files strictly: a binary or mis-encoded file is refused in one line.

A story read with ``errors="replace"`` reaches the model as a stream of replacement characters;
here a file with NUL bytes is called binary, a decoding error names the byte and suggests
``--encoding``, and a JSONL row that lacks a field names ``file:line`` and the field.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from swm.errors import InputError

NUL = "\x00"


def without_nul(value: object) -> tuple[Any, int]:
    """Return ``value`` with every NUL character removed from its strings (nested too), and how many went.

    PostgreSQL stores no NUL in text and JSONB, so text that reaches a backend (a model's reply, a
    field of an input file) loses it here, at the boundary, and the caller records the count.
    """
    if isinstance(value, str):
        count = value.count(NUL)
        return (value.replace(NUL, ""), count) if count else (value, 0)
    if isinstance(value, dict):
        out, total = {}, 0
        for key, item in value.items():
            out[key], n = without_nul(item)
            total += n
        return (out, total) if total else (value, 0)
    if isinstance(value, list | tuple):
        pairs = [without_nul(item) for item in value]
        total = sum(n for _, n in pairs)
        return (type(value)(item for item, _ in pairs), total) if total else (value, 0)
    return value, 0


def decode_text(data: bytes, source: str, encoding: str = "utf-8") -> str:
    """Decode ``data`` read from ``source`` (a path or 'stdin'); refuse binary or mis-encoded bytes."""
    if b"\x00" in data:
        raise InputError(f"{source} looks binary (it holds NUL bytes), not text", "pass a text file")
    try:
        return data.decode("utf-8-sig" if encoding.replace("_", "-").lower() in ("utf-8", "utf8") else encoding)
    except LookupError as exc:
        raise InputError(f"unknown text encoding {encoding!r}", "use e.g. utf-8, latin-1, cp1252, utf-16") from exc
    except UnicodeDecodeError as exc:
        bad = data[exc.start:exc.start + 1]
        raise InputError(f"{source} is not valid {encoding} text (byte {exc.start}: {bad!r})",
                         "convert it to UTF-8, or pass its encoding with --encoding (e.g. latin-1)") from exc


def read_text_file(path: str | Path, encoding: str = "utf-8") -> str:
    """Read a text file ('-' for stdin) strictly, with one-line errors for missing, binary or mis-encoded files."""
    if str(path) == "-":
        return decode_text(sys.stdin.buffer.read(), "stdin", encoding)
    file = Path(path)
    if not file.is_file():
        raise InputError(f"no such file: {path}", "pass the path of a text file, or - for stdin")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}", "check the file's permissions") from exc
    return decode_text(data, str(path), encoding)


def jsonl_rows(path: str | Path, required: Sequence[str] = (), encoding: str = "utf-8"
               ) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line; refuse non-objects and rows missing a field."""
    for number, line in enumerate(read_text_file(path, encoding).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number} is not a JSON object: {exc}", "one JSON object per line") from exc
        if not isinstance(row, dict):
            raise InputError(f"{path}:{number} is a JSON {type(row).__name__}, not an object",
                             "one JSON object per line")
        row, removed = without_nul(row)
        if removed:  # a "\u0000" escape in the JSON: PostgreSQL would refuse the row's text
            sys.stderr.write(f"note: {path}:{number}: removed {removed} NUL character(s) from the row's text\n")
        missing = [name for name in required if name not in row]
        if missing:
            raise InputError(f"{path}:{number}: the row has no {', '.join(repr(m) for m in missing)} field",
                             f"every row needs {', '.join(required)}")
        yield number, row


def refuse_duplicate_ids(entries: Iterable[tuple[str, str]], what: str) -> None:
    """Refuse a collection in which two entries share an id, naming where both are.

    ``entries`` are ``(id, where)`` pairs, ``where`` a ``file:line`` (or ``file item N``). A
    duplicate id would make a run play the first entry twice and the second never (results are
    keyed by id), so it is an input error, never a silently wrong table.
    """
    seen: dict[str, str] = {}
    for key, where in entries:
        if key in seen:
            raise InputError(f"duplicate {what} id {key!r} at {seen[key]} and {where}",
                             f"give every {what} its own id")
        seen[key] = where
