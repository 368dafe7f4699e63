"""Refuse a database file that cannot hold a run, with one line saying why, before anything uses it.

`check_database` runs once per file and process: a folder, a file that is not SQLite, a read-only
file or folder, or a file that SQLite's ``PRAGMA quick_check`` finds damaged is refused with
`DatabaseRefused` (exit code 2) instead of a traceback halfway through a run. A second backend
offers the same function for its own URL (PostgreSQL: connect and check the schema).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import threading
import time
import weakref
from pathlib import Path

from swm.errors import EnvironmentFault, InputError

SQLITE_HEADER = b"SQLite format 3\x00"
_checked: set[str] = set()
_lock = threading.Lock()
_connections: dict[str, weakref.WeakSet[sqlite3.Connection]] = {}  # a database's path -> this process's connections


class DatabaseRefused(InputError):
    """The ``--db`` file cannot be used: not SQLite, read-only, damaged, or not a file path."""


def quick_check(path: Path) -> list[str]:
    """Return the problems SQLite's ``quick_check`` finds in ``path`` (empty when it is sound)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)
    try:
        rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    finally:
        conn.close()
    return [] if rows == ["ok"] else rows


def check_database(path: str | Path) -> None:
    """Refuse ``path`` as a database, in one line, if it cannot hold swm's checkpoints and store."""
    if str(path) == ":memory:":
        return
    file = Path(path).expanduser()
    key = str(file.resolve())
    with _lock:
        if key in _checked:
            return
        _check(file)
        _checked.add(key)


def _check(file: Path) -> None:
    if file.is_dir():
        raise DatabaseRefused(f"--db {file} is a folder", f"pass a file path, e.g. {file / 'swm.db'}")
    if not file.exists():
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseRefused(f"cannot create the database {file}: {exc.strerror}",
                                  "pass a --db path in a folder you can write") from exc
        if not os.access(file.parent, os.W_OK):
            raise DatabaseRefused(f"cannot create the database {file}: its folder is read-only",
                                  "pass a --db path in a folder you can write")
        return
    try:
        with file.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise DatabaseRefused(f"cannot read the database {file}: {exc.strerror}", "check its permissions") from exc
    if header and header != SQLITE_HEADER:
        raise DatabaseRefused(f"{file} is not a SQLite database", "pass another --db (a new path creates one)")
    if not os.access(file, os.W_OK) or not os.access(file.parent, os.W_OK):
        where = "file" if not os.access(file, os.W_OK) else "folder (SQLite writes its journal beside it)"
        raise DatabaseRefused(f"the database {file} is read-only: its {where} cannot be written",
                              "make it writable, or copy it and pass the copy as --db")
    if header:
        problems = quick_check(file)
        if problems:
            more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
            raise DatabaseRefused(f"the database {file} is damaged: {problems[0]}{more}",
                                  "restore it from a copy or pass a new --db; `sqlite3 FILE .recover` may save "
                                  "its rows")


class DatabaseReplaced(EnvironmentFault):
    """The ``--db`` file was deleted or replaced while a run was writing to it."""


def absolute(path: str | Path) -> str | Path:
    """Return the file's absolute path (a later chdir must not make it look deleted); ``:memory:`` as is."""
    return path if str(path) == ":memory:" else Path(path).expanduser().absolute()


def stamp_file(conn: sqlite3.Connection) -> None:
    """Give the database file a random id of its own, once, in SQLite's header on disk (``user_version``).

    Copying another file over it in place (``cp other.db run.db``) keeps its inode, so only the
    content tells that it is another file: `ensure_same_file` compares this id on disk with the one
    the file had when it was opened. A checkpoint puts the header on disk; when readers hold it
    back the id stays unknown on disk for now, and only the inode is compared.
    """
    if conn.execute("PRAGMA user_version").fetchone()[0]:
        return
    conn.execute("BEGIN IMMEDIATE")  # one id even when two connections open a new file at once
    try:
        if not conn.execute("PRAGMA user_version").fetchone()[0]:
            conn.execute(f"PRAGMA user_version = {secrets.randbelow(2**31 - 2) + 1}")
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")


_sqlite_fds: dict[str, int] = {}  # a database file's path -> a descriptor SQLite holds open on it in this process


def register_connection(path: str, conn: sqlite3.Connection) -> None:
    """Note an open connection to the database at absolute ``path`` (`open_connections`)."""
    with _lock:
        _connections.setdefault(path, weakref.WeakSet()).add(conn)


def open_connections(path: str) -> list[sqlite3.Connection]:
    """Return the connections of this process to the database at absolute ``path`` still known (some may be closed)."""
    with _lock:
        return list(_connections.get(path, ()))


def _points_to(fd: int, path: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == path
    except OSError:
        return False


def sqlite_descriptor(path: str) -> int | None:
    """Return a descriptor this process's SQLite holds on ``path`` (Linux ``/proc``; None elsewhere or if none)."""
    fd = _sqlite_fds.get(path)
    if fd is not None and _points_to(fd, path):
        return fd
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        if name.isdigit() and _points_to(int(name), path):
            _sqlite_fds[path] = int(name)
            return int(name)
    return None


def _file_id(path: Path) -> int:
    """Return the id `stamp_file` wrote in the header on disk (0: none yet, not a SQLite file, or unknown here).

    Read through a descriptor SQLite already holds, never by opening the file: closing a descriptor of
    the file drops every POSIX lock this process holds on it, SQLite's included, and another process
    (a Ray worker) could then write beside it and damage the file.
    """
    fd = sqlite_descriptor(os.path.realpath(path))
    if fd is None:
        return 0
    try:
        header = os.pread(fd, 64, 0)
    except OSError:
        return 0
    return int.from_bytes(header[60:64], "big") if header.startswith(SQLITE_HEADER) and len(header) == 64 else 0


def file_identity(path: str | Path) -> tuple[int, int, int] | None:
    """Return the (device, inode, id on disk) of the database file, None for ``:memory:`` or a file that is gone."""
    if str(path) == ":memory:":
        return None
    file = Path(path).expanduser()
    try:
        stat = os.stat(file)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino, _file_id(file)


def ensure_same_file(path: str | Path, identity: tuple[int, int, int] | None) -> None:
    """Refuse to write when the file at ``path`` is no longer the one opened (deleted, or another in its place).

    An open SQLite connection goes on writing to a deleted file's inode, which vanishes at close:
    a run would report success with nothing on disk, or split its checkpoints and store across
    two files. Another file renamed over it (``mv other.db run.db``) leaves this run's
    write-ahead log beside it, under the name SQLite pairs with the new file: the next connection
    would replay this run's pages over the file that arrived and lose its rows. This run's own
    database is then copied aside whole and its log and shared memory moved aside (`_set_aside`),
    so the file that arrived stays as it came and this run's rows stay too. Another file copied
    over it in place keeps the inode but not the id `stamp_file` gave it; the file that came in
    is then copied aside first, since closing this run's connections writes its last pages into
    it. One ``stat`` and one 64-byte read per write batch is the price of knowing.
    """
    if identity is None:
        return
    now = file_identity(path)
    if now is not None and now[:2] == identity[:2] and (not identity[2] or now[2] == identity[2]):
        return
    if now is None:
        what, kept = "deleted", ""
    elif now[:2] != identity[:2]:
        what, kept = "replaced by another file", _set_aside(Path(path))
    else:
        what, kept = "overwritten in place by another file", _keep_aside(Path(path))
    raise DatabaseReplaced(f"the database {path} was {what} while this run was writing to it; the run stopped",
                           kept or "nothing more was written; restore the file (its steps resume from it) or start "
                           "over with a new --thread-id")


_kept_aside: dict[str, str] = {}


def _keep_aside(path: Path) -> str:
    """Copy the file that was copied over the database aside, once; return the hint that says where it is."""
    with _lock:
        if str(path) not in _kept_aside:
            aside = path.with_name(f"{path.name}.arrived-{int(time.time())}")
            try:
                shutil.copyfile(path, aside)
                _kept_aside[str(path)] = f"the file that arrived is kept, as it came, in {aside}"
            except OSError as exc:
                _kept_aside[str(path)] = f"the file that arrived could not be copied aside ({exc.strerror})"
        return (f"{_kept_aside[str(path)]}; this run's own last steps are written into {path} as it closes, so "
                "restore its copy from there or start over with a new --thread-id")


def _set_aside(path: Path) -> str:
    """Keep this run's database, whose file was renamed over, aside whole, once; return the hint that says where.

    Copied through a connection still open on it (SQLite's backup: its pages and the log's, consistent),
    then the write-ahead log and shared memory this process holds at ``path`` moved away from the names
    that SQLite would pair with the file that arrived. A log or shared memory at those names that is not
    the one this process holds open (someone else's) is left where it is.
    """
    with _lock:
        if str(path) in _kept_aside:
            return _kept_aside[str(path)]
        _kept_aside[str(path)] = hint = _copy_and_move_aside(path, int(time.time()))
        return hint


def _copy_and_move_aside(path: Path, stamp: int) -> str:
    aside = path.with_name(f"{path.name}.replaced-{stamp}")
    copied = False
    for conn in _connections.get(str(path), ()):
        try:
            target = sqlite3.connect(aside)
            try:
                conn.backup(target)
            finally:
                target.close()
            copied = True
            break
        except sqlite3.Error:  # closed, or busy: the next connection
            aside.unlink(missing_ok=True)
    moved = [name for name in (f"{path}-wal", f"{path}-shm") if _move_ours(name, f"{name}.replaced-{stamp}")]
    left = "; the file that arrived is left as it came"
    if not copied:
        if moved:
            return (f"no open connection could copy this run's rows aside: its log is kept in "
                    f"{path.name}-wal.replaced-{stamp}{left}")
        return f"this run's rows could not be copied aside{left}"
    return f"this run's rows are kept in {aside} (rerun with --db {aside} to resume from there){left}"


def _move_ours(name: str, to: str) -> bool:
    """Rename ``name`` to ``to`` if it is the file this process's SQLite holds open under that name."""
    fd = sqlite_descriptor(name)
    try:
        if fd is None or os.fstat(fd).st_ino != os.stat(name).st_ino:
            return False
        os.replace(name, to)
    except OSError:
        return False
    return True
