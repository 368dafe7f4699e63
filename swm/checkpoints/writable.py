"""Stop a run whose database files were made read-only under it, in one line, before SQLite touches them.

A file made read-only mid-run is not seen by the descriptors SQLite already holds. When only its
permission bits refuse (``chmod 444`` by a user other than root), those descriptors still write it,
while a new connection cannot: the steps in flight finish and are written, then the run stops
(`ensure_writable`).
An immutable file (``chattr +i``, which refuses root too) or a read-only mount refuses even those
descriptors, and SQLite's shared memory, mapped from ``-shm``, then ends the process with SIGBUS on
its next write: `GuardedConnection` runs no statement on such files, and the connections that close
afterwards skip SQLite's checkpoint on close, which writes there too.
"""

from __future__ import annotations

import _sqlite3
import ctypes
import fcntl
import functools
import os
import sqlite3
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from swm import drain
from swm.checkpoints.environment import RESUME
from swm.checkpoints.health import open_connections, register_connection, sqlite_descriptor
from swm.errors import EnvironmentFault

if TYPE_CHECKING:
    from _typeshed import SupportsLenAndGetItem

    Parameters = SupportsLenAndGetItem[object] | Mapping[str, object]  # a statement's values, by position or name

SUFFIXES = ("", "-wal", "-shm")  # the database, its write-ahead log and its shared memory
FS_IOC_GETFLAGS, FS_IMMUTABLE_FL = 0x80086601, 0x10  # Linux's file attribute flags (lsattr)
NO_CHECKPOINT_ON_CLOSE = 1006  # SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE


class DatabaseNotWritable(EnvironmentFault):
    """The run's database files were made read-only while it ran (permissions, an immutable flag, a read-only mount)."""


@dataclass(frozen=True)
class Refusal:
    """The database's files this process can no longer write, and whether only their permission bits refuse."""

    files: tuple[Path, ...]
    by_permissions: bool  # SQLite's descriptors, opened before, still write them

    def fault(self) -> DatabaseNotWritable:
        names = [f.name for f in self.files]
        if self.by_permissions:
            why, fix = f"have no write permission for this user (uid {os.geteuid()})", f"chmod u+w {' '.join(names)}"
        elif all(os.statvfs(f).f_flag & os.ST_RDONLY for f in self.files):
            why, fix = "are on a file system mounted read-only", "remount it writable"
        else:
            why, fix = "are immutable (chattr +i)", f"chattr -i {' '.join(names)}"
        fault = DatabaseNotWritable(f"the database's files in {self.files[0].parent} cannot be written: "
                                    f"{', '.join(names)} {why}", f"make them writable again ({fix}); {RESUME}")
        fault.exit_code = 2
        return fault


def refusal(path: str | Path) -> Refusal | None:
    """Return which of the database's files exist and cannot be written by this process, or None if all can.

    Three ``access`` calls (a few microseconds); ``:memory:`` is never refused.
    """
    if str(path) == ":memory:":
        return None
    refused = [f for f in database_files(os.path.abspath(os.path.expanduser(path)))
               if not os.access(f, os.W_OK) and os.path.exists(f)]
    if not refused:
        return None
    files = tuple(Path(f) for f in refused)
    return Refusal(files, all(_by_permissions(f) for f in files))


@functools.lru_cache(maxsize=64)
def database_files(database: str) -> tuple[str, ...]:
    """Return the paths of an absolute database path's files: itself, its ``-wal`` and its ``-shm``."""
    return tuple(f"{database}{suffix}" for suffix in SUFFIXES)


def _by_permissions(file: Path) -> bool:
    """Tell whether only ``file``'s permission bits refuse this process (root ignores them: something else does)."""
    uid = os.geteuid()
    if uid == 0:
        return False
    try:
        st = os.stat(file)
    except OSError:
        return False
    bit = stat.S_IWUSR if st.st_uid == uid else stat.S_IWGRP if st.st_gid in {os.getegid(), *os.getgroups()} \
        else stat.S_IWOTH
    return not st.st_mode & bit and not _immutable(file)


def _immutable(file: Path) -> bool:
    """Read the immutable flag through a descriptor SQLite holds (opening one would drop its locks); False if none."""
    fd = sqlite_descriptor(os.path.realpath(file))
    if fd is None:
        return False
    try:
        flags = int.from_bytes(fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(8))[:4], "little")
    except OSError:
        return False
    return bool(flags & FS_IMMUTABLE_FL)


def ensure_writable(path: str | Path, landed: bool = False) -> None:
    """Raise `DatabaseNotWritable` when any of the database's files cannot be written by this process.

    Before a connection opens (SQLite would open the files read-only), and after each write batch
    (``landed``). A batch that landed through descriptors opened before, refused since by the
    permission bits alone, drains the command instead (`swm.drain.stop_for`): the steps in flight
    finish and are written as they are, no new one starts, so the rerun pays no call twice; the
    command then ends with this error's line.
    """
    found = refusal(path)
    if found is None:
        return
    fault = found.fault()
    if landed and found.by_permissions and drain.stop_for(fault):
        return
    raise fault


class GuardedConnection(sqlite3.Connection):
    """A SQLite connection that runs no statement on files that would end the process with SIGBUS (see the module).

    ``sqlite3.connect(path, factory=GuardedConnection)``. Each statement costs one ``access`` call.
    """

    def __init__(self, database: str | Path, *args: Any, **kwargs: Any) -> None:
        super().__init__(database, *args, **kwargs)
        self.path = str(Path(database).expanduser().absolute()) if str(database) != ":memory:" else ":memory:"
        self.shared_memory = f"{self.path}-shm" if self.path != ":memory:" else ""
        register_connection(self.path, self)

    def guard(self) -> None:
        """Raise `DatabaseNotWritable` when SQLite's own descriptors can no longer write the files.

        One system call in the common case: the ``-shm`` file, the one whose refusal is a SIGBUS
        (the others' is an error SQLite reports, and `ensure_writable` checks them after each write).
        """
        if not self.shared_memory or os.access(self.shared_memory, os.W_OK):
            return
        found = refusal(self.path)
        if found is not None and not found.by_permissions:
            keep_shared_memory(self.path)
            raise found.fault()

    def execute(self, sql: str, parameters: Parameters = (), /) -> sqlite3.Cursor:
        self.guard()
        return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Parameters], /) -> sqlite3.Cursor:
        self.guard()
        return super().executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        self.guard()
        return super().executescript(sql_script)

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(factory or GuardedCursor)

    def commit(self) -> None:
        self.guard()
        super().commit()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None, /) -> Literal[False]:
        self.guard()
        return super().__exit__(kind, error, traceback)

    def close(self) -> None:
        found = refusal(self.path)
        if found is not None and not found.by_permissions:
            keep_shared_memory(self.path)
        super().close()


class GuardedCursor(sqlite3.Cursor):
    """A cursor of a `GuardedConnection`: each statement is guarded as the connection's are."""

    def execute(self, sql: str, parameters: Parameters = (), /) -> Self:
        self.connection.guard()  # type: ignore[attr-defined]
        return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Parameters], /) -> Self:
        self.connection.guard()  # type: ignore[attr-defined]
        return super().executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        self.connection.guard()  # type: ignore[attr-defined]
        return super().executescript(sql_script)


def keep_shared_memory(path: str) -> None:
    """Make every connection of this process to ``path`` close without SQLite's checkpoint (it writes ``-shm``).

    The write-ahead log stays beside the database, whole: the next run on writable files reads it.
    """
    for conn in open_connections(path):
        _skip_checkpoint_on_close(conn)


def _skip_checkpoint_on_close(conn: sqlite3.Connection) -> None:
    setconfig = getattr(conn, "setconfig", None)  # Python 3.12 and later
    if setconfig is not None:
        try:
            setconfig(NO_CHECKPOINT_ON_CLOSE, True)
        except sqlite3.ProgrammingError:  # closed already
            pass
        return
    handle = _handle(conn)  # None once closed
    if handle is not None:
        _library().sqlite3_db_config(ctypes.c_void_p(handle), NO_CHECKPOINT_ON_CLOSE, ctypes.c_int(1),
                                     ctypes.c_void_p(None))


@functools.cache
def _library() -> ctypes.CDLL:
    library = ctypes.CDLL(_sqlite3.__file__)  # the module and the SQLite library it links
    library.sqlite3_db_filename.restype = ctypes.c_char_p
    library.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    return library


def _handle(conn: sqlite3.Connection) -> int | None:
    """Return the ``sqlite3 *`` of an open connection on Python 3.11, or None when it cannot be told for sure.

    CPython 3.11 keeps it as the first field after the object's header and offers no way to ask for it;
    the file SQLite names for that handle must be the connection's own, or it is not used.
    """
    path = getattr(conn, "path", None)
    try:
        handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
        name = _library().sqlite3_db_filename(ctypes.c_void_p(handle), b"main") if handle else None
    except (AttributeError, OSError, ValueError):
        return None
    if not handle or path is None or name is None or os.path.realpath(name.decode()) != os.path.realpath(path):
        return None
    return handle
