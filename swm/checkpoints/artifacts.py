"""Content-addressed artifacts in the experience store: a trained adapter's files, kept where the run's state is.

A run's state (checkpoints and experience store) lives in one SQLite file or one PostgreSQL
database; files a run made (a trained LoRA adapter) must live there too, or a deleted output
folder, or a resume on another machine, leaves the thread unable to go on. Each artifact is a
small set of files stored under a content key (the caller's hash of what identifies it, e.g.
`swm.serving.verify.adapter_sha256`), in the table ``swm_artifacts`` (key, file name, part,
the file's SHA-256, its size, the bytes): a SQLite BLOB or a PostgreSQL ``bytea``, split in
parts of `PART` bytes. Storing a key twice is a no-op; fetching checks every file's SHA-256 and
writes the folder whole (a temporary sibling renamed into place) or not at all. The graph state
holds only keys, never the bytes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

from swm.checkpoints.store import StoreRecords
from swm.errors import InputError

TABLE = "swm_artifacts"
PART = 32 * 1024 * 1024  # bytes per row: well under SQLite's and PostgreSQL's value limits


class ArtifactCorrupt(InputError):
    """A stored artifact (or a local copy of one) is not the content its key names: it was changed or damaged."""


def _ensure_table(store: StoreRecords) -> None:
    if not store.has_table(TABLE):
        store.create_table(TABLE, {"key": str, "name": str, "part": int, "sha256": str, "size": int, "data": bytes},
                           pk=("key", "name", "part"))


def has_artifact(store: StoreRecords, key: str) -> bool:
    """Tell whether the store holds the artifact ``key``."""
    return store.has_table(TABLE) and store.count(TABLE, "key = ?", [key]) > 0


def put_artifact(store: StoreRecords, key: str, folder: Path, names: Iterable[str]) -> None:
    """Store the files ``names`` of ``folder`` under ``key`` (nothing is written when the key is already there)."""
    _ensure_table(store)
    if has_artifact(store, key):
        return
    for name in names:
        data = (Path(folder) / name).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        for part, start in enumerate(range(0, max(len(data), 1), PART)):
            store.insert(TABLE, {"key": key, "name": name, "part": part, "sha256": digest, "size": len(data),
                                 "data": bytes(data[start:start + PART])}, pk=("key", "name", "part"), ignore=True)


def fetch_artifact(store: StoreRecords, key: str, into: Path) -> Path:
    """Write the artifact ``key`` into the folder ``into`` (which must not exist yet) and return it.

    Raises `ArtifactCorrupt` when a stored file's bytes do not hash to the SHA-256 stored with
    them, and `InputError` when the store has no such artifact.
    """
    if not has_artifact(store, key):
        raise InputError(f"artifact {key[:12]} is not in the run's store",
                         "rerun the cycle that trained it, or start a new run")
    files: dict[str, list[tuple[int, str, int, bytes]]] = {}
    for row in store.rows(f"select name, part, sha256, size, data from {TABLE} where key = ? order by name, part",
                          [key]):
        files.setdefault(row["name"], []).append((int(row["part"]), row["sha256"], int(row["size"]),
                                                  bytes(row["data"])))
    partial = into.with_name(f"{into.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    partial.mkdir(parents=True)
    try:
        for name, parts in files.items():
            data = b"".join(p[3] for p in sorted(parts))
            if hashlib.sha256(data).hexdigest() != parts[0][1] or len(data) != parts[0][2]:
                raise ArtifactCorrupt(f"the stored artifact {key[:12]} is damaged: {name} does not match its "
                                      f"SHA-256 {parts[0][1][:12]}",
                                      "the database was changed outside swm; restore it from a backup, or "
                                      "start a new run")
            (partial / name).write_bytes(data)
        os.replace(partial, into)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return into
