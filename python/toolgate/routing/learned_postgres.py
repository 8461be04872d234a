"""PostgreSQL's learned store: one table that replicas on several machines share.

:class:`PostgresStore` is a :class:`~toolgate.routing.learned_store.LearnedStore` over
psycopg 3, imported only when a store is opened (it is an optional dependency). Its messages
name the database by host, port and name only: an address can hold passwords, and they are
masked in what libpq says of a failure too. Leases are marked on the server's clock, since
replicas' clocks differ.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from toolgate.forks import keep_for_ever
from toolgate.routing.learned_store import LearnedStore, StoreError, _Run

__all__ = ["PostgresStore", "is_postgres_address"]

# The clock a PostgreSQL store's offset to the server's is measured against.
_now = time.time

# The libpq connection settings that hold secrets.
_SECRET_KEYS = ("password", "sslpassword")

# libpq's connection settings (PostgreSQL 17): an address in its keyword form starts with one.
_KEYWORDS = frozenset((
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth",
    "channel_binding", "connect_timeout", "client_encoding", "options", "application_name",
    "fallback_application_name", "keepalives", "keepalives_idle", "keepalives_interval",
    "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode",
    "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode",
    "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "sslnegotiation", "requirepeer",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib",
    "gssdelegation", "service", "target_session_attrs", "load_balance_hosts",
))  # fmt: skip
_FIRST_KEYWORD = re.compile(r"\s*([a-z_]+)\s*=")

_T = TypeVar("_T")


class PostgresStore(LearnedStore):
    """Learned rows in a PostgreSQL table that several replicas share (psycopg 3)."""

    _param = "%s"
    _SCHEMA = (
        "CREATE TABLE IF NOT EXISTS learned (seq BIGSERIAL PRIMARY KEY, scope TEXT NOT NULL, "
        "tool TEXT NOT NULL, server TEXT NOT NULL, query_key BYTEA NOT NULL, "
        "codes BYTEA NOT NULL, scale DOUBLE PRECISION NOT NULL, "
        "weight DOUBLE PRECISION NOT NULL, at DOUBLE PRECISION NOT NULL)",
        "CREATE INDEX IF NOT EXISTS learned_scope ON learned (scope, seq)",
        "CREATE INDEX IF NOT EXISTS learned_recent ON learned (scope, at)",
        "CREATE INDEX IF NOT EXISTS learned_tool ON learned (tool)",
        "CREATE INDEX IF NOT EXISTS learned_server ON learned (server)",
        "CREATE TABLE IF NOT EXISTS learned_versions (scope TEXT NOT NULL, holder TEXT NOT NULL, "
        "used_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (scope, holder))",
        "CREATE TABLE IF NOT EXISTS learned_meta (name TEXT PRIMARY KEY, value BYTEA NOT NULL)",
    )

    def __init__(self, address: str, *, salt: str | bytes | None = None) -> None:
        super().__init__(salt=salt)
        try:
            import psycopg
        except ImportError as exc:
            raise _import_error(exc) from exc
        self._psycopg = psycopg
        self._errors = psycopg.Error
        self.address = address
        self._shown = _redacted(address)
        parts = _conninfo(address)
        # None: the address does not parse, and libpq's reason may quote any of it.
        self._secrets = (
            None if parts is None else [str(parts[k]) for k in _SECRET_KEYS if parts.get(k)]
        )
        self._closed = False
        self._db: Any = None
        self._closer: weakref.finalize[Any, Any] | None = None
        try:
            self._connect()
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot open the learned memory at {self._shown}: {self._reason(exc)}"
            ) from exc
        self._check_salt()

    def __repr__(self) -> str:
        return f"PostgresStore({self._shown!r})"

    def _connect(self) -> None:
        """A new connection, with the tables created if they are missing."""
        db = self._psycopg.connect(self.address, autocommit=True)
        try:
            # Two replicas creating the table at once would race: one lock for the set-up.
            with db.transaction():
                db.execute("SELECT pg_advisory_xact_lock(7718)")
                for statement in self._SCHEMA:
                    db.execute(statement)
            self._clock_offset = _offset_to(db)
        except BaseException:
            db.close()
            raise
        if self._closer is not None:
            self._closer()  # closes the connection it replaces, and is forgotten
        self._db = db
        self._closer = weakref.finalize(self, db.close)  # a dropped store closes it

    def _leave_inherited_connection(self) -> None:
        # The socket is the parent's session: this process must neither read its replies nor
        # write to it, even the Terminate a close (or libpq's finish at exit) sends. So the
        # descriptor is pointed at /dev/null, and the connection kept, closed by no one.
        if self._db is None:
            return
        if self._closer is not None:
            self._closer.detach()
            self._closer = None
        with contextlib.suppress(self._errors, OSError):
            _blind(self._db.pgconn.socket)
        keep_for_ever(self._db)
        self._db = None

    def _reason(self, exc: BaseException) -> str:
        """``exc``'s text, without the address's passwords; of an address that does not
        parse (whose passwords are unknown), only its kind."""
        if self._secrets is None:
            return f"{type(exc).__name__} (libpq's reason is not shown: it may quote the address)"
        return _scrubbed(str(exc), self._secrets)

    def _using(self, work: Callable[[Any], _T]) -> _T:
        """``work(connection)`` under the lock, as a :class:`StoreError` if it fails.

        A connection the server dropped (a restart, a failover, an idle timeout) is found
        dropped only when used: then ``work`` runs once more on a new connection, and a
        connection an earlier use found dropped is replaced before ``work`` runs, once. A
        write whose connection dropped after the server committed it but before it answered
        is run twice: a row stored twice is one lesson counted twice, a rare and bounded
        cost, where not retrying would lose the first lesson after every drop.
        """
        with self._lock:
            if self._closed:
                raise StoreError(f"the learned memory at {self._shown} is closed")
            renewed = self._db is None or self._db.closed
            try:
                if renewed:
                    self._connect()
                return work(self._db)
            except self._errors as exc:
                if renewed or not self._db.closed:
                    raise self._failure(exc) from exc
            try:
                self._connect()
                return work(self._db)
            except self._errors as exc:
                raise self._failure(exc) from exc

    def _failure(self, exc: BaseException) -> StoreError:
        return StoreError(f"the learned memory at {self._shown}: {self._reason(exc)}")

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._using(lambda db: _rows_of(db, sql, args))

    def _insert(self, sql: str, args: Sequence[Any]) -> int:
        def run(db: Any) -> int:
            row = db.execute((sql + " RETURNING seq").encode(), tuple(args)).fetchone()
            return int(row[0]) if row else 0

        return self._using(run)

    def _change(self, sql: str, args: Sequence[Any]) -> int:
        return self._using(lambda db: int(db.execute(sql.encode(), tuple(args)).rowcount))

    def _exclusive(self, work: Callable[[_Run], _T]) -> _T:
        # Not a _transaction: on a connection found dropped, _using runs all of ``work`` again
        # on a new one, which a context manager's body cannot be.
        def transaction(db: Any) -> _T:
            with db.transaction():
                # Replicas pruning at once would each keep their own view of the most recent.
                db.execute("SELECT pg_advisory_xact_lock(7719)")
                # Measured again for the marks ``work`` makes and expires: this process's
                # clock may have been stepped since the connection was made (NTP setting a
                # clock right after boot), and the old offset would shift them by as much.
                self._clock_offset = _offset_to(db)
                return work(lambda sql, args: _rows_of(db, self._sql(sql), args))

        return self._using(transaction)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._db is not None:
                self._db.close()


def is_postgres_address(text: str) -> bool:
    """Whether ``text`` names a PostgreSQL database: a ``postgresql://`` (or ``postgres://``)
    URI, or libpq's ``key=value`` words (``host=db dbname=toolgate``) starting with one of its
    settings. Read as a SQLite path, such words made a file named with their password."""
    if text.startswith(("postgresql://", "postgres://")):
        return True
    first = _FIRST_KEYWORD.match(text)
    return first is not None and first.group(1) in _KEYWORDS


def _rows_of(db: Any, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows of one statement on the psycopg connection ``db`` (none for a write)."""
    cursor = db.execute(sql.encode(), tuple(args))
    return list(cursor.fetchall()) if cursor.description else []


def _offset_to(db: Any) -> float:
    """The PostgreSQL server's time minus this process's: leases are compared on the
    server's clock, since replicas' clocks differ (one a lease ahead would prune every
    other's version)."""
    before = _now()
    (server,) = db.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8").fetchone()
    return float(server) - (before + _now()) / 2


def _blind(fd: int) -> None:
    """Points the descriptor ``fd`` at /dev/null: what is written to it goes nowhere."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def _conninfo(address: str) -> dict[str, Any] | None:
    """libpq's settings in ``address`` (a URI or ``key=value`` words), or ``None`` when it
    does not parse."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        return dict(conninfo_to_dict(address))
    except Exception:  # psycopg's ProgrammingError; any failure: no settings to show
        return None


def _import_error(exc: ImportError) -> StoreError:
    """Why psycopg did not import: not installed (the extra names it), or installed but unable
    to load its libpq binding, whose own reason is the one that helps."""
    if isinstance(exc, ModuleNotFoundError) and exc.name == "psycopg":
        return StoreError(
            'a PostgreSQL learned memory needs psycopg 3: pip install "toolgate-router[postgres]"'
        )
    reason = " ".join(str(exc).split())  # psycopg lists each binding it tried on a line
    return StoreError(
        f"psycopg is installed but cannot load ({reason}); it needs the system's libpq "
        "(Debian's libpq5)"
    )


def _redacted(address: str) -> str:
    """A PostgreSQL address as ``postgresql://host:port/dbname``, for messages: libpq takes a
    password in the user part, as ``?password=`` or ``?sslpassword=``, or as a ``password=``
    word, so only the parts that say where the database is are kept."""
    parts = _conninfo(address)
    if parts is None:
        return "a PostgreSQL address that does not parse"
    host, port, dbname = (str(parts.get(key, "")) for key in ("host", "port", "dbname"))
    where = ",".join(
        _host_port(name, number)
        for name, number in itertools.zip_longest(host.split(","), port.split(","), fillvalue="")
    )
    return f"postgresql://{where}/{dbname}"


def _host_port(host: str, port: str) -> str:
    """``host:port`` as a URI writes it (an IPv6 address in brackets; no port: the host)."""
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port else shown


def _scrubbed(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every one of ``secrets`` masked: libpq's messages do not quote a
    password, but one that did would reach a log."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text
