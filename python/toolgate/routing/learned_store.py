"""Where a router's learned memory lives: a SQLite file by default, PostgreSQL for replicas.

A learned row is one query vector and the tool it served, under a *scope* (the model and the
catalog version it was learned for), with a weight and the time it was stored. No query text
is kept: a row holds the query's vector (int8 with one scale, as the memory scans it) and a
hash of its text, enough to merge a repeated query into one row and nothing more. The hash is
keyed with a secret salt when the store has one (``salt``, or ``$TOOLGATE_LEARN_SALT``):
without it, it is a plain blake2b of the text, which hides the text from casual reading but
lets anyone who reads the store check a guess of a query (:func:`query_key`).

:class:`SqliteStore` is one file in WAL mode, shared by the processes of one machine, as the
embedding cache is; :class:`PostgresStore` (psycopg 3) is one table that replicas on several
machines share. :func:`open_store` picks one from a path or a ``postgresql://`` address.

Every refresh of a catalog is a new version, so old scopes would pile up: each memory that
opens marks its scope used by this process (in ``learned_versions``), and the rows of the least
recently used scopes past ``LearnConfig.max_versions`` are deleted (:meth:`LearnedStore.use`),
never those of a scope in use. A scope is in use while a memory of this process holds it, or
while another process's (a replica's) mark on it is under ``LearnConfig.version_lease_s`` old;
a process renews its marks whenever it opens a memory, a scope's whenever it stores a row in
it, and those its memories hold while they route, once a quarter of the lease has passed
(:meth:`LearnedStore.keep_alive`). On PostgreSQL the marks are on the server's clock, since
replicas' clocks differ.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import sqlite3
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from toolgate.arguments import check_seconds, file_path
from toolgate.errors import InvalidInputError, ToolgateError
from toolgate.forks import BoundToProcess, fork_safe_lock
from toolgate.routing.learned_rows import (
    LEARN_SALT_ENV,
    LearnedRow,
    encode_vector,
    learned_row,
    query_key,
    salt_bytes,
)
from toolgate.routing.periodic import Periodic
from toolgate.sqlite_files import SharedConnection, open_shared_sqlite

if TYPE_CHECKING:
    from toolgate.routing.learned_postgres import PostgresStore

__all__ = [
    "LEARN_SALT_ENV",
    "LearnedRow",
    "LearnedStore",
    "PostgresStore",
    "SqliteStore",
    "StoreError",
    "StoreWarning",
    "default_store_path",
    "open_store",
    "query_key",
]

#: How long a writer waits on another process's lock before the write fails.
BUSY_TIMEOUT_S = 30.0


class StoreError(ToolgateError):
    """The learned memory's store cannot be opened, read or written."""


class StoreWarning(UserWarning):
    """The learned memory's store holds what this process cannot use: damaged rows (they
    are skipped), or query hashes keyed with another salt than its own; or it failed as a
    refreshed router's memory was read, and that router routes without it for now."""


_COLUMNS = "seq, tool, server, query_key, codes, scale, weight, at"

# The text whose hash, stored by the first process to open a store, shows its salt: another
# process hashing it to something else has another salt (the salt itself is never stored).
_SALT_PROBE = "toolgate learned-store salt probe"

# Who marks this process's uses of scopes; a forked child is another process.
_holder = secrets.token_hex(8)
# A failed renewal of leases is tried again after at most this long.
_RENEW_RETRY_S = 60.0

# The store and scope of each memory of this process, while it lives. Every scope here is
# in use, whichever store object holds it: two objects on one database (a path written two
# ways, a store opened for each router) must not prune each other's.
_in_use: weakref.WeakKeyDictionary[object, tuple[LearnedStore, str]]
_in_use = weakref.WeakKeyDictionary()
_in_use_lock = fork_safe_lock()

# Every store of this process: a forked child must not use their connections (below).
_stores: weakref.WeakSet[LearnedStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child (a pre-forking server's worker) is another holder; each store leaves
    the connection it shares with the parent and opens its own on first use (SQLite's:
    :class:`~toolgate.sqlite_files.SharedConnection`). (Its locks are
    :func:`~toolgate.forks.fork_safe_lock`'s: released in the child.)
    """
    global _holder
    _holder = secrets.token_hex(8)
    for store in list(_stores):
        try:
            store._after_fork()
        except AttributeError:
            # Half made when the fork came, by a thread the child does not have: it is never
            # finished, nor used, here; the stores after it must still leave their connections.
            continue


if hasattr(os, "register_at_fork"):  # not on Windows, where a child process starts afresh
    os.register_at_fork(after_in_child=_after_fork_in_child)


# A run of one SQL statement inside :meth:`LearnedStore._exclusive`: its rows.
_Run = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]
_T = TypeVar("_T")

_MARK_USED = (
    "INSERT INTO learned_versions (scope, holder, used_at) VALUES (?, ?, ?) "
    "ON CONFLICT (scope, holder) DO UPDATE SET used_at = excluded.used_at"
)
# Each scope's last use: its newest row, or the newest use a holder marked, whichever is later.
# It runs under the write lock at every memory's open, so it reads no row of ``learned``: the
# scopes are found by skipping from one to the next on the (scope, at) index, and each one's
# newest row is that index's last entry for it (a GROUP BY scanned every row: 25 ms at 160k).
# A row stamped past the bound (``?``: a lease from now) was stamped by a clock set wrong:
# its time says nothing, and taken as is it ranked its scope the most recent for as long.
_BY_RECENT_USE = (
    "WITH RECURSIVE scopes (scope) AS ("
    "SELECT MIN(scope) FROM learned UNION ALL "
    "SELECT (SELECT MIN(scope) FROM learned WHERE scope > scopes.scope) FROM scopes "
    "WHERE scopes.scope IS NOT NULL"
    "), uses (scope, t) AS ("
    "SELECT scope, (SELECT MAX(at) FROM learned WHERE learned.scope = scopes.scope AND at <= ?) "
    "FROM scopes WHERE scope IS NOT NULL UNION ALL "
    "SELECT scope, MAX(used_at) FROM learned_versions GROUP BY scope"
    ") SELECT scope, COALESCE(MAX(t), 0) FROM uses GROUP BY scope ORDER BY 2 DESC, 1"
)


@dataclass
class _Mark:
    """This store's last mark of one scope's use (a ``time.time()`` of this process), and
    the lease the mark was made for."""

    lease_s: float
    at: float

    def due(self, now: float) -> bool:
        """Whether a quarter of the lease has passed since the mark, or the clock was set back
        past it (the mark is ahead of the others' clocks too): time to renew it."""
        return not 0 <= now - self.at < self.lease_s / 4


def _hold(store: LearnedStore, scope: str, user: object) -> set[str]:
    """Records that ``user`` (a memory) holds ``scope`` through ``store`` while it lives;
    returns every scope a memory of this process holds, through any store object."""
    with _in_use_lock:
        _in_use[user] = (store, scope)
        return {held for _, held in _in_use.values()}


def _mark_used(run: _Run, scopes: Iterable[str], holder: str, at: float) -> None:
    """Marks each of ``scopes`` used by ``holder`` at ``at`` (the database's clock)."""
    for scope in sorted(scopes):
        run(_MARK_USED, (scope, holder, at))


def _expire_marks(run: _Run, at: float, lease_s: float) -> None:
    """Deletes the marks of leases that ran out by ``at``, and those over a lease ahead of it:
    no clock set right makes them, and one set wrong (a year ahead, then put right) would
    hold their scopes for as long."""
    run(
        "DELETE FROM learned_versions WHERE used_at < ? OR used_at > ?",
        (at - lease_s, at + lease_s),
    )


def _leased_by_others(run: _Run, holder: str) -> set[str]:
    """The scopes another holder (process) than ``holder`` has a mark of (a running lease,
    once :func:`_expire_marks` ran)."""
    marks = run("SELECT scope FROM learned_versions WHERE holder <> ?", (holder,))
    return {row[0] for row in marks}


def _prune(run: _Run, *, keep: int, spared: set[str], latest: float) -> list[str]:
    """Deletes the rows and marks of the scopes past the ``keep`` most recently used, but
    those ``spared``, ranking no row by a time past ``latest``; returns the scopes deleted."""
    by_use = [row[0] for row in run(_BY_RECENT_USE, (latest,))]
    stale = [old for old in by_use[keep:] if old not in spared]
    for old in stale:
        run("DELETE FROM learned WHERE scope = ?", (old,))
        run("DELETE FROM learned_versions WHERE scope = ?", (old,))
    return stale


class LearnedStore(BoundToProcess):
    """Rows of learned memories, by scope. Subclasses say how to reach the database.

    ``salt`` keys the hash of each query's text (:meth:`key`); ``None`` takes it from
    ``$TOOLGATE_LEARN_SALT``. Every process sharing a store must use the same salt: with
    another, its repeats of a query no longer merge with the rows stored before.
    """

    _elsewhere = "open it there by the store's path or address (router.learn(store))"

    _param = "?"

    def __init__(self, *, salt: str | bytes | None = None) -> None:
        self._salt = salt_bytes(salt)
        self._lock = fork_safe_lock()
        self._marked: dict[str, _Mark] = {}  # scope: this store's last mark of it
        # The latest time a mark was made (or all renewed) at: a route's clock reading
        # earlier was set back.
        self._marked_at = -math.inf
        # Renews the marks of the scopes held here (never due before one is held).
        self._renewal = Periodic(
            self._renew_held, "toolgate-learned-lease", math.inf, retry_s=_RENEW_RETRY_S
        )
        # Server time minus this process's time.time() (PostgreSQL: replicas' clocks differ).
        self._clock_offset = 0.0
        _stores.add(self)

    def key(self, text: str) -> bytes:
        """The digest of the query ``text`` rows of this store are merged by."""
        return query_key(text, self._salt)

    def _check_salt(self) -> None:
        """Warns when the store's first process hashed queries with another salt: this
        process's repeats of a query would not merge with theirs (a replica without
        ``$TOOLGATE_LEARN_SALT``, say), and one request would count as two."""
        probe = self.key(_SALT_PROBE)
        self._execute(
            self._sql(
                "INSERT INTO learned_meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"
            ),
            ("salt_probe", probe),
        )
        stored = self._execute(
            self._sql("SELECT value FROM learned_meta WHERE name = ?"), ("salt_probe",)
        )
        # SQLite keeps whatever a writer gave it: a record that is no blob is damaged, and
        # bytes() of it would fail (text) or allocate its value in bytes (an integer).
        value = stored[0][0] if stored else probe
        if not (isinstance(value, (bytes, bytearray, memoryview)) and bytes(value) == probe):
            warnings.warn(
                f"learned memory {self!r}: its queries were hashed with another salt than "
                f"this process's (${LEARN_SALT_ENV} or salt=), or its record of the salt is "
                f"damaged: repeats of a query will not merge with the rows stored before, "
                f"and co-use counts one request twice; give every process sharing the store "
                f"the same salt",
                StoreWarning,
                stacklevel=3,
            )

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _insert(self, sql: str, args: Sequence[Any]) -> int:
        raise NotImplementedError

    def _change(self, sql: str, args: Sequence[Any]) -> int:
        """Runs an UPDATE or DELETE; returns how many rows it changed."""
        raise NotImplementedError

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self._param)

    def _exclusive(self, work: Callable[[_Run], _T]) -> _T:
        """``work(run)``, whose runs of statements (written with ``?``) are one transaction
        no other holder's runs in at the same time."""
        with self._transaction() as run:
            return work(lambda sql, args: run(self._sql(sql), args))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[_Run]:
        """Runs statements (in the database's own placeholders) in one exclusive
        transaction. Here, for a store that only says how to run one: each on its own."""
        yield self._execute

    def use(self, scope: str, user: object, *, keep: int, lease_s: float, now: float) -> list[str]:
        """Marks ``scope`` used by ``user`` (a memory: until it is dropped) at ``now`` (a
        ``time.time()``), and deletes the rows of the scopes past the ``keep`` most recently
        used, except those in use (see the module). Returns the scopes deleted."""
        live = _hold(self, scope, user)
        self._marked[scope] = _Mark(lease_s, now)
        self._marked_at = max(self._marked_at, now)
        self._renewal.due_at = min(self._renewal.due_at, now + lease_s / 4)
        own, holder = self._held_here(), _holder
        # A mark no live memory of this store holds is never renewed or read again; kept, a
        # store serving a stream of catalog versions (a gateway's tools arrays) would keep
        # one per version it ever saw.
        for stale in [held for held in list(self._marked) if held not in own]:
            self._marked.pop(stale, None)

        def prune(run: _Run) -> list[str]:
            at = self._server_time(now)  # in the transaction: see PostgresStore._exclusive
            _mark_used(run, own, holder, at)  # renews every mark of this store's memories
            _expire_marks(run, at, lease_s)
            spared = live | _leased_by_others(run, holder)
            return _prune(run, keep=keep, spared=spared, latest=at + lease_s)

        return self._exclusive(prune)

    def _held_here(self) -> set[str]:
        """The scopes the live memories of this store object hold."""
        with _in_use_lock:
            return {scope for where, scope in _in_use.values() if where is self}

    def _server_time(self, at: float) -> float:
        """``at`` (this process's ``time.time()``) on the database server's clock."""
        return at + self._clock_offset

    def _renew(self, scope: str, at: float) -> None:
        """Marks ``scope`` used at ``at`` again once a quarter of its lease has passed. Best
        effort: the row it follows is stored, and a failure raised would read as the row's
        (a retry would store it twice); the next row's renewal tries again."""
        mark = self._marked.get(scope)
        if mark is None or not mark.due(at):
            return
        try:
            self._exclusive(lambda run: _mark_used(run, [scope], _holder, self._server_time(at)))
        except StoreError:
            return
        mark.at = at
        self._marked_at = max(self._marked_at, at)

    def keep_alive(self, now: float) -> threading.Thread | None:
        """Renews the marks of the scopes this store's memories hold, at ``now`` (a
        ``time.time()``), once a quarter of their lease has passed: a memory that only routes
        keeps its version. Called on every route, it compares two times; a renewal due runs
        in a thread of its own, returned (``None``: none due), best effort: one that fails
        is tried again a quarter lease (at most a minute) later. A clock set back past the
        latest mark renews them at once: they are ahead of the others' clocks too, and
        waiting for it to read their due time again would leave them unrenewed as long."""
        if now < self._marked_at:
            self._renewal.due_at = min(self._renewal.due_at, now)
        return self._renewal.start_if_due(now)

    def _renew_held(self, now: float) -> float:
        """Marks every scope a memory holds through this store used at ``now``; returns when
        the marks are next due (sooner after a failure)."""
        held = self._held_here()
        marks = [self._marked[scope] for scope in held if scope in self._marked]
        quarter = min((mark.lease_s for mark in marks), default=math.inf) / 4
        self._marked_at = now  # tried: a failure is tried again on the usual terms
        try:
            self._exclusive(lambda run: _mark_used(run, held, _holder, self._server_time(now)))
            for mark in marks:
                mark.at = now
        except StoreError:
            return now + min(quarter, _RENEW_RETRY_S)
        return now + quarter

    def load(self, scope: str, *, dim: int | None = None) -> list[LearnedRow]:
        """Every sound row of ``scope``, oldest first. A damaged one (codes of another size
        than ``dim``, a scale or weight that is no finite float32) is skipped with one warning:
        an error would stop every router sharing the store over one bad row."""
        rows = self._execute(
            self._sql(f"SELECT {_COLUMNS} FROM learned WHERE scope = ? ORDER BY seq"), (scope,)
        )
        loaded = [row for row in (learned_row(raw, dim) for raw in rows) if row is not None]
        if skipped := len(rows) - len(loaded):
            warnings.warn(
                f"learned memory {self!r}: skipped {skipped} damaged rows of scope {scope!r} "
                f"(codes of the wrong size, a scale or weight that is no finite float32)",
                StoreWarning,
                stacklevel=2,
            )
        return loaded

    def insert(
        self, scope: str, tool: str, server: str, key: bytes, vector: np.ndarray, at: float
    ) -> int:
        """Stores one row of weight 1; returns its ``seq``."""
        codes, scale = encode_vector(vector)
        seq = self._insert(
            self._sql(
                "INSERT INTO learned (scope, tool, server, query_key, codes, scale, weight, at) "
                "VALUES (?, ?, ?, ?, ?, ?, 1.0, ?)"
            ),
            (scope, tool, server, key, codes, scale, self._server_time(at)),
        )
        self._renew(scope, at)
        return seq

    def set_weight(self, seq: int, weight: float) -> bool:
        """Sets the weight of row ``seq``; ``False`` when there is no such row (another
        replica's ``forget`` removed it)."""
        sql = self._sql("UPDATE learned SET weight = ? WHERE seq = ?")
        return self._change(sql, (weight, seq)) > 0

    def delete(self, seqs: Iterable[int]) -> None:
        """Removes the rows ``seqs`` (evicted ones)."""
        for chunk in _chunks(list(seqs), 500):
            marks = ", ".join(self._param for _ in chunk)
            self._execute(f"DELETE FROM learned WHERE seq IN ({marks})", chunk)

    def forget(self, *, tool: str | None = None, server: str | None = None) -> None:
        """Removes every row, in every scope, of the tool ``tool`` or of the server ``server``."""
        if tool is not None:
            self._execute(self._sql("DELETE FROM learned WHERE tool = ?"), (tool,))
        if server is not None:
            self._execute(self._sql("DELETE FROM learned WHERE server = ?"), (server,))

    def close(self) -> None:
        """Closes the connection."""

    def _after_fork(self) -> None:
        """In a forked child: no marks of this holder yet (the first route makes them), and
        the parent's connection left (:meth:`_leave_inherited_connection`)."""
        self._renewal.due_at = 0.0
        self._leave_inherited_connection()

    def _leave_inherited_connection(self) -> None:
        """In a forked child: stop using the parent's connection, without closing it
        (:func:`~toolgate.forks.keep_for_ever`)."""


class SqliteStore(LearnedStore):
    """Learned rows in one SQLite file (``":memory:"``: in this process only)."""

    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS learned (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
        "scope TEXT NOT NULL, tool TEXT NOT NULL, server TEXT NOT NULL, query_key BLOB NOT NULL, "
        "codes BLOB NOT NULL, scale REAL NOT NULL, weight REAL NOT NULL, at REAL NOT NULL)",
        "CREATE INDEX IF NOT EXISTS learned_scope ON learned (scope, seq)",
        "CREATE INDEX IF NOT EXISTS learned_recent ON learned (scope, at)",
        "CREATE INDEX IF NOT EXISTS learned_tool ON learned (tool)",
        "CREATE INDEX IF NOT EXISTS learned_server ON learned (server)",
        "CREATE TABLE IF NOT EXISTS learned_versions (scope TEXT NOT NULL, holder TEXT NOT NULL, "
        "used_at REAL NOT NULL, PRIMARY KEY (scope, holder)) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS learned_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)",
    )

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        timeout_s: float = BUSY_TIMEOUT_S,
        salt: str | bytes | None = None,
    ):
        check_seconds("timeout_s", timeout_s)
        super().__init__(salt=salt)
        self.path = str(path)
        self._timeout_s = timeout_s
        try:
            self._db = SharedConnection(self.path, self._open, self._lock)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the learned memory {self.path}: {exc}") from exc
        self._check_salt()

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"

    def _open(self) -> sqlite3.Connection:
        """A new connection to the file, with the tables created if they are missing."""
        try:
            # Private: it holds vectors and hashes of what users asked.
            db = open_shared_sqlite(
                self.path, timeout_s=self._timeout_s, schema=self._SCHEMA, private=True
            )
        except OSError as exc:
            raise sqlite3.OperationalError(str(exc)) from exc
        return db

    def _connection(self) -> sqlite3.Connection:
        """The connection, opened anew in a forked child (see the caller's lock)."""
        return self._db.get()

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock, self._failing("read or write"):
            return list(self._connection().execute(sql, tuple(args)).fetchall())

    def _insert(self, sql: str, args: Sequence[Any]) -> int:
        with self._lock, self._failing("write"):
            cursor = self._connection().execute(sql, tuple(args))
            return int(cursor.lastrowid or 0)

    def _change(self, sql: str, args: Sequence[Any]) -> int:
        with self._lock, self._failing("write"):
            return int(self._connection().execute(sql, tuple(args)).rowcount)

    @contextlib.contextmanager
    def _failing(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"cannot {what} the learned memory {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[_Run]:
        with self._lock, self._failing("write"):
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")  # other processes' writers wait on the timeout
            try:
                yield lambda sql, args: list(db.execute(sql, tuple(args)).fetchall())
                db.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _chunks(items: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def default_store_path() -> Path:
    """``$TOOLGATE_HOME/learned.sqlite3``, beside the embedding cache."""
    from toolgate.embedding.model_files import toolgate_home

    return toolgate_home() / "learned.sqlite3"


def open_store(
    store: LearnedStore | str | os.PathLike[str] | None, *, salt: str | bytes | None = None
) -> LearnedStore:
    """``store`` itself, a :class:`PostgresStore` for a ``postgresql://`` address (or libpq's
    ``key=value`` words, :func:`~toolgate.routing.learned_postgres.is_postgres_address`), or a
    :class:`SqliteStore` at a path (``":memory:"`` in memory; ``None``: the default file),
    whose query hashes are keyed with ``salt`` (``None``: ``$TOOLGATE_LEARN_SALT``)."""
    if isinstance(store, LearnedStore):
        return store
    if store is None:
        return SqliteStore(default_store_path(), salt=salt)
    if not isinstance(store, (str, os.PathLike)):
        raise InvalidInputError(
            f"a learned store is a path, a postgresql:// address or a LearnedStore, "
            f"got {type(store).__name__}"
        )
    text = str(store)
    if not text:  # SQLite would open a temporary database, dropped with its connection
        raise InvalidInputError("a learned store is an empty path; ':memory:' is one in memory")
    from toolgate.routing.learned_postgres import PostgresStore, is_postgres_address

    if is_postgres_address(text):
        return PostgresStore(text, salt=salt)
    return SqliteStore(file_path("store", store), salt=salt)


def __getattr__(name: str) -> Any:
    """``PostgresStore``, from :mod:`~toolgate.routing.learned_postgres`: that module imports
    this one, so it is imported on first use, not with this one."""
    if name == "PostgresStore":
        from toolgate.routing.learned_postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
