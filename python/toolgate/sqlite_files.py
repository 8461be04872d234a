"""Opening a SQLite file that several processes share, in WAL mode, when it may be new.

The embedding cache and the learned memory's store are such files: a gateway's workers all
open them at start, so on a first deploy several processes open one *new* file at once.
Switching a new file to WAL takes a write lock after a read, and SQLite answers a process that
would deadlock there with "database is locked" at once, without waiting on its busy timeout;
so the switch is retried, with a growing pause, until the timeout. Once the file is in WAL
mode the switch is skipped. The schema is created in one ``BEGIN IMMEDIATE`` transaction,
which waits on the busy timeout for the other processes' set-up.

A file that holds what users asked (the learned memory's) is created ``private``: readable
by its owner only, whatever the umask, as are its ``-wal`` and ``-shm`` files, which SQLite
creates with the database file's mode. Any other is created 0664 less the umask (a group
that shares a folder, umask 002, may all write it), never writable by others. A file this
process may not write is refused before SQLite opens it: a reader of a WAL file leaves its
``-wal`` and ``-shm`` files, of its own user, and the file's owner could open it no more.

Such a file is opened before a pre-forking server forks its workers, and each process must
use a connection of its own (:class:`SharedConnection`). A child that only left the parent's
connection unused was not enough: SQLite keeps one record per file of the locks its process
holds, and the child's own connection took it over, so the child held, in fact, none; the
parent's last close then found no other process on the file and deleted the ``-wal`` file the
child went on writing to. The child closes the inherited connection first (for itself only:
the parent's locks are the parent's), unless another thread was using it at the fork.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from time import monotonic, sleep
from typing import Any, TypeVar

from toolgate.forks import keep_for_ever

__all__ = ["SharedConnection", "make_folder", "open_shared_sqlite"]

_T = TypeVar("_T")

# SQLite's primary result codes for a lock held by another connection.
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
# The retries' first and longest pause: short enough that a start-up race costs milliseconds.
_FIRST_PAUSE_S = 0.002
_LONGEST_PAUSE_S = 0.1


# The longest busy timeout SQLite takes (a C int of milliseconds).
_LONGEST_WAIT_MS = 2**31 - 1


def open_shared_sqlite(
    path: str | Path, *, timeout_s: float, schema: Sequence[str], private: bool = False
) -> sqlite3.Connection:
    """A connection to ``path`` (created if missing, with its folder) in WAL mode, holding the
    tables of ``schema`` (``CREATE ... IF NOT EXISTS`` statements).

    The connection is in autocommit mode and may be used from any thread (the caller locks);
    ``timeout_s`` bounds each wait on another process's lock, and the whole set-up (its
    retries and every step's own wait) too.
    ``":memory:"`` opens a database of this process only. ``private``: a file created here is
    readable and writable by its owner only (0600); one that exists keeps its mode, and a
    symbolic link to no file is refused (SQLite would create its target, umask's mode); else
    a new file is 0664 less the umask. A file this process may not write is a
    :class:`PermissionError`. Raises :class:`sqlite3.Error` or :class:`OSError`, after closing
    the connection.
    """
    in_memory = str(path) == ":memory:"
    if not in_memory:
        make_folder(Path(path).parent)
        if private:
            _create_private(path)
        else:
            _create_shared(path)
        _refuse_unwritable(path)
    db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
    deadline = monotonic() + timeout_s
    try:
        if not in_memory:
            _retry_while_busy(db, lambda: _switch_to_wal(db), deadline)
        _retry_while_busy(db, lambda: _create(db, schema), deadline)
        _wait_at_most(db, timeout_s)
    except BaseException:
        db.close()
        raise
    return db


def make_folder(folder: Path) -> None:
    """``folder``, made if missing; a file in its place is a :class:`NotADirectoryError`,
    a symbolic link to a folder that does not exist a :class:`FileNotFoundError`, each
    naming it (mkdir says only "File exists" of both)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        named = exc.filename or str(folder)
        if os.path.islink(named) and not os.path.exists(named):
            raise FileNotFoundError(
                errno.ENOENT, "a symbolic link to a folder that does not exist", named
            ) from None
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory", named) from None


def _create_private(path: str | Path) -> None:
    """An empty ``path`` of mode 0600 (SQLite makes a database of an empty file), unless a
    file is there already: another process's, or one its user made, whose mode is theirs."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        # O_EXCL refuses a symbolic link even to no file, which SQLite would then create.
        if os.path.islink(path) and not os.path.exists(path):
            raise FileNotFoundError(
                errno.ENOENT, "a symbolic link to a file that does not exist", str(path)
            ) from None


def _create_shared(path: str | Path) -> None:
    """An empty ``path`` that the umask may leave writable by its group (0664 under umask
    002: a folder a group shares), unless a file is there already. SQLite's own mode is
    0644 whatever the umask, so the group's other users could never write it; and never
    writable by others, whose vectors would steer every reader's routing."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o664))


def _refuse_unwritable(path: str | Path) -> None:
    """A :class:`PermissionError` for a file this process may not write (another user's,
    a read-only file system), before SQLite opens it read-only: a WAL file's reader makes
    its ``-wal`` and ``-shm`` files, of its own user, which stay when it closes, and the
    file's owner can then open the file no more."""
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, "not writable by this process", str(path))


def _switch_to_wal(db: sqlite3.Connection) -> None:
    """WAL mode for the file, unless it is in it already (a read: it waits on the timeout)."""
    (mode,) = db.execute("PRAGMA journal_mode").fetchone()
    if str(mode).lower() != "wal":
        db.execute("PRAGMA journal_mode=WAL")


def _create(db: sqlite3.Connection, schema: Sequence[str]) -> None:
    """Every statement of ``schema`` in one write transaction."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in schema:
            db.execute(statement)
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise


def _wait_at_most(db: sqlite3.Connection, seconds: float) -> None:
    """``db`` waits at most ``seconds`` on another connection's lock (SQLite's busy timeout)."""
    # SQLite takes an int of milliseconds: past 2**31 - 1 (25 days; an infinite wait) it
    # would read no wait at all.
    milliseconds = min(_LONGEST_WAIT_MS, max(0.0, seconds * 1000))
    db.execute(f"PRAGMA busy_timeout = {round(milliseconds)}")


def _retry_while_busy(db: sqlite3.Connection, step: Callable[[], _T], deadline: float) -> _T:
    """``step()``, again after a growing pause while another connection's lock refuses it,
    until ``deadline`` (``time.monotonic()``) passes; a step waits on a lock only until then
    too (each waiting its whole busy timeout, a set-up took up to twice the timeout)."""
    pause = _FIRST_PAUSE_S
    while True:
        _wait_at_most(db, deadline - monotonic())
        try:
            return step()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or monotonic() + pause > deadline:
                raise
        sleep(pause)
        pause = min(2 * pause, _LONGEST_PAUSE_S)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` says another connection holds a lock (not a damaged file, say)."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


class SharedConnection:
    """This process's connection to a SQLite file other processes share, made by ``opener``;
    its owner holds ``lock`` (a :func:`~toolgate.forks.fork_safe_lock`) across every use.

    In a forked child it is never the parent's: the inherited one is closed (or, if another
    thread was using it at the fork, kept unused for ever) and :meth:`get` opens the child's
    own. ``":memory:"`` is the child's own copy, and kept.
    """

    def __init__(
        self, path: str | Path, opener: Callable[[], sqlite3.Connection], lock: threading.Lock
    ) -> None:
        """See the class docstring. Raises what ``opener`` raises."""
        self._in_memory = str(path) == ":memory:"
        self._open = opener
        self._lock = lock
        self._db: sqlite3.Connection | None = None
        self._closer: weakref.finalize[Any, Any] | None = None
        self.get()
        _connections.add(self)

    def get(self) -> sqlite3.Connection:
        """The connection, opened anew in a forked child (the caller holds the lock); after
        :meth:`close`, the closed one, whose use raises :class:`sqlite3.ProgrammingError`."""
        if self._db is None:
            db = self._open()
            self._closer = weakref.finalize(self, db.close)  # a dropped owner closes its file
            # Not at exit, where another thread may be mid-statement on it: see _at_exit.
            self._closer.atexit = False
            self._db = db
        return self._db

    def close(self) -> None:
        """Close the connection (the caller holds the lock)."""
        if self._closer is not None:
            self._closer()  # closes it once, and is forgotten

    def _leave(self, idle: bool) -> None:
        """In a forked child: leave the parent's connection, closed if ``idle`` (no thread
        was using it), else kept; the next :meth:`get` opens the child's own."""
        if self._in_memory or self._closer is None or not self._closer.detach():
            return  # the child's own copy, or closed before the fork
        db, self._db = self._db, None
        if not idle:  # a thread of the parent may hold it, mid-statement: closing would hang
            keep_for_ever(db)
        elif db is not None:
            # SQLite forgets the locks it recorded of the parent's; the parent keeps them.
            with contextlib.suppress(sqlite3.Error):
                db.close()


# Every shared connection of this process, and those the forking thread holds the lock of
# (idle ones) across a fork.
_connections: weakref.WeakSet[SharedConnection] = weakref.WeakSet()
_idle_at_fork: list[SharedConnection] = []


def _before_fork() -> None:
    # Never waits: a connection another thread is using (a write waiting on another
    # process's lock) stays the parent's, and busy, in the child.
    _idle_at_fork.extend(c for c in list(_connections) if c._lock.acquire(blocking=False))


def _after_fork_in_parent() -> None:
    while _idle_at_fork:
        _idle_at_fork.pop()._lock.release()


def _after_fork_in_child() -> None:
    idle = {id(connection) for connection in _idle_at_fork}
    for connection in list(_connections):
        connection._leave(id(connection) in idle)
    while _idle_at_fork:
        lock = _idle_at_fork.pop()._lock
        if lock.locked():  # a fork_safe_lock is released already
            lock.release()


def _at_exit() -> None:
    """Close the connections no thread is using. One in use is left to the process's end:
    closing it waits for the statement under way, and a write waiting on another process's
    lock held the exit up for the whole busy timeout (30 s), after a learning queue's close
    had given up on it within its grace. Its transaction, never committed, is rolled back
    by the next connection to open the file."""
    for connection in list(_connections):
        if connection._lock.acquire(blocking=False):
            try:
                connection.close()
            finally:
                connection._lock.release()


atexit.register(_at_exit)

if hasattr(os, "register_at_fork"):  # not on Windows, where a child process starts afresh
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
