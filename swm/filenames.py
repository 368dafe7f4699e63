"""Ids become file and folder names only through `file_name`.

Scenario, episode, run and thread ids are user-given text: a ``/`` in one would make its export
a path into a folder that does not exist (on every rerun, as the id is stored), and ``..`` or a
leading ``-`` would point elsewhere. `file_name` keeps letters, digits, ``.``, ``_`` and ``-``,
replaces the rest, and adds a short hash of the original whenever it changed something, so two
ids that differ only in such characters still get two files.
"""

from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_CHARS = 120  # well inside every file system's 255-byte name limit, hash included


def file_name(key: str) -> str:
    """Return a file name for an id: the id itself when it is already safe, else a readable safe form + hash."""
    safe = _UNSAFE.sub("_", key).lstrip(".-")[:MAX_CHARS]
    if safe == key and safe:
        return safe
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:8]
    return f"{safe or 'id'}-{digest}"
