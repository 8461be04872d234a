"""The learned memory's stores themselves: what their messages show of a PostgreSQL address,
a PostgreSQL store outliving its connection (on a real throwaway server), and the salt that
keys the hashes of queries."""

from __future__ import annotations

import importlib.abc
import json
import os
import sqlite3
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fixtures.postgres import postgres_server
from toolgate.cli.commands import demo_catalog
from toolgate.embedding.embedder import Embedder
from toolgate.errors import InvalidInputError
from toolgate.routing import learned_store
from toolgate.routing.learned_postgres import PostgresStore
from toolgate.routing.learned_store import (
    LEARN_SALT_ENV,
    SqliteStore,
    StoreError,
    StoreWarning,
    open_store,
    query_key,
)
from toolgate.routing.router import Router

SECRET = "Pa55wordSecret"
# Port 1 refuses at once: the store's open fails, with its message.
NOWHERE = "127.0.0.1:1/db"


@pytest.mark.parametrize(
    "address",
    [
        f"postgresql://app:{SECRET}@{NOWHERE}",
        f"postgresql://app@{NOWHERE}?password={SECRET}",
        f"postgresql://{NOWHERE}?user=app&password={SECRET}&sslmode=disable",
        f"postgresql://{NOWHERE}?sslpassword={SECRET}&sslmode=disable",
        f"postgres://app:{SECRET}@{NOWHERE}?connect_timeout=2",
    ],
    ids=["userinfo", "query", "query-with-user", "sslpassword", "postgres-scheme"],
)
def test_a_failed_open_names_the_database_without_its_password(address: str) -> None:
    with pytest.raises(StoreError) as failed:
        open_store(address)
    message = str(failed.value)
    assert SECRET not in message
    assert f"postgresql://{NOWHERE}" in message


def test_a_keyword_address_shows_no_password() -> None:
    with pytest.raises(StoreError) as failed:
        PostgresStore(f"host=127.0.0.1 port=1 dbname=db user=app password={SECRET}")
    message = str(failed.value)
    assert SECRET not in message
    assert f"postgresql://{NOWHERE}" in message


@pytest.mark.parametrize(
    "address",
    [
        f"host=127.0.0.1 port=1 dbname=db user=app password={SECRET}",
        f"  dbname = db host=127.0.0.1 port=1 password={SECRET}",
    ],
)
def test_a_keyword_address_is_opened_as_postgresql(
    address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read as a SQLite path, it made a file named with the password, quoted in messages.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError) as failed:
        open_store(address)
    assert SECRET not in str(failed.value)
    assert f"postgresql://{NOWHERE}" in str(failed.value)
    assert list(tmp_path.iterdir()) == []


def test_an_address_that_does_not_parse_is_not_quoted() -> None:
    # libpq's own reason would quote "Secret9": missing "=" after "Secret9".
    with pytest.raises(StoreError) as failed:
        PostgresStore("host=127.0.0.1 password=Pa55 Secret9")
    assert "Secret9" not in str(failed.value)


def test_without_psycopg_the_store_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as when the extra is not installed
    with pytest.raises(StoreError, match=r'pip install "toolgate-router\[postgres\]"'):
        PostgresStore(f"postgresql://{NOWHERE}")


class _NoLibpq(importlib.abc.MetaPathFinder):
    """psycopg installed, but failing to load as it does on a machine without libpq."""

    REASON = "no pq wrapper available: libpq library not found"

    def find_spec(self, name: str, *args: object) -> None:
        if name == "psycopg":
            raise ImportError(self.REASON)


def test_a_psycopg_that_cannot_load_is_not_called_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # The extra is installed: telling the user to install psycopg would not help; its reason does.
    monkeypatch.delitem(sys.modules, "psycopg", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_NoLibpq(), *sys.meta_path])
    with pytest.raises(StoreError) as failed:
        PostgresStore(f"postgresql://{NOWHERE}")
    assert _NoLibpq.REASON in str(failed.value)
    assert "libpq" in str(failed.value).replace(_NoLibpq.REASON, "")


def test_the_postgres_store_is_still_found_in_the_learned_store_module() -> None:
    assert learned_store.PostgresStore is PostgresStore


def test_the_learned_store_module_has_no_other_late_names() -> None:
    with pytest.raises(AttributeError, match="NoSuchStore"):
        _ = learned_store.NoSuchStore


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as address:
        yield address


def drop_connections(address: str) -> int:
    """Ends every other session of the server, as a restart or a failover would."""
    import psycopg

    with psycopg.connect(address, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchall()
    return len(rows)


def test_a_dropped_connection_is_replaced_on_the_next_read(postgres: str) -> None:
    store = PostgresStore(postgres)
    store.insert("reads", "t", "s", b"k", np.ones(4, np.float32), at=1.0)
    assert drop_connections(postgres) >= 1
    assert [row.tool for row in store.load("reads")] == ["t"]


def test_a_dropped_connection_is_replaced_on_the_next_write(postgres: str) -> None:
    store = PostgresStore(postgres)
    drop_connections(postgres)
    store.insert("writes", "t", "s", b"k", np.ones(4, np.float32), at=1.0)
    assert len(store.load("writes")) == 1


class Memory:
    """Stands for a memory holding a scope (a store keeps a weak reference to it)."""


def test_a_dropped_connection_is_replaced_for_a_memory_opening(postgres: str) -> None:
    store = PostgresStore(postgres)
    drop_connections(postgres)
    assert store.use("opening", Memory(), keep=8, lease_s=60.0, now=1.0) == []


def test_a_closed_store_stays_closed(postgres: str) -> None:
    store = PostgresStore(postgres)
    store.close()
    with pytest.raises(StoreError, match="is closed"):
        store.load("closed")


def test_a_server_refusing_connections_fails_the_use_and_not_the_next(postgres: str) -> None:
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute("CREATE DATABASE refusing")
        store = PostgresStore(postgres.rsplit("/", 1)[0] + "/refusing")
        admin.execute("ALTER DATABASE refusing ALLOW_CONNECTIONS false")
        drop_connections(postgres)
    with pytest.raises(StoreError, match="refusing"):
        store.load("refused")
    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute("ALTER DATABASE refusing ALLOW_CONNECTIONS true")
    assert store.load("refused") == []


QUERY = "drop the payroll database of ACME Corp before the audit"


def test_a_salted_store_keeps_no_hash_a_guess_of_the_query_matches(embedder: Embedder) -> None:
    router = Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)
    memory = router.learn(SqliteStore(":memory:", salt="a secret"))
    tool = router.catalog.ids[0]
    router.feedback(QUERY, used=[tool])
    (row,) = memory.store.load(memory.scope)
    assert row.key != query_key(QUERY)
    assert row.key == query_key(QUERY, b"a secret")


def test_a_repeated_query_merges_under_the_salt(embedder: Embedder) -> None:
    router = Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)
    memory = router.learn(SqliteStore(":memory:", salt=b"a secret"))
    tool = router.catalog.ids[0]
    router.feedback(QUERY, used=[tool])
    router.feedback(QUERY, used=[tool])
    assert len(memory) == 1


def test_a_store_takes_its_salt_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEARN_SALT_ENV, "from the environment")
    assert open_store(":memory:").key(QUERY) == query_key(QUERY, b"from the environment")


def test_a_store_without_a_salt_hashes_the_text_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LEARN_SALT_ENV, raising=False)
    assert open_store(":memory:").key(QUERY) == query_key(QUERY)


def test_a_salt_past_blake2b_s_key_size_is_hashed_to_it() -> None:
    long_salt = b"s" * 200
    assert query_key(QUERY, long_salt) != query_key(QUERY, b"s" * 64)


@pytest.mark.parametrize("timeout_s", [float("nan"), -1.0, float("inf"), "30", None])
def test_a_wait_that_is_no_seconds_is_refused(tmp_path: Path, timeout_s: Any) -> None:
    # NaN waited for ever on a locked file (no deadline passes NaN), -1 read as no wait.
    with pytest.raises(InvalidInputError, match="timeout_s must be"):
        SqliteStore(tmp_path / "learned.sqlite3", timeout_s=timeout_s)


def test_a_store_opened_with_another_salt_than_its_first_warns(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "learned.sqlite3", salt="the replicas' salt")
    with pytest.warns(StoreWarning, match="another salt"):
        SqliteStore(tmp_path / "learned.sqlite3", salt=b"")  # a replica missing the variable


@pytest.mark.parametrize("value", ["abc", 2**62, 1.5])
def test_a_salt_record_that_is_no_blob_warns(tmp_path: Path, value: object) -> None:
    path = tmp_path / "learned.sqlite3"
    SqliteStore(path).close()
    with sqlite3.connect(path) as db:  # SQLite keeps whatever type a writer gives it
        db.execute("UPDATE learned_meta SET value = ? WHERE name = 'salt_probe'", (value,))
    db.close()
    with pytest.warns(StoreWarning, match="another salt"):
        store = SqliteStore(path)
    assert store.load("any") == []


def test_a_store_opened_with_its_first_salt_does_not_warn(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "learned.sqlite3", salt="the replicas' salt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store = SqliteStore(tmp_path / "learned.sqlite3", salt="the replicas' salt")
    assert store.load("any") == []


@pytest.mark.parametrize(
    ("salt", "message"),
    [(3, "a store's salt is a str or bytes, got int"), ("\ud800", "lone surrogate")],
)
def test_a_bad_salt_is_refused(salt: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        SqliteStore(":memory:", salt=salt)  # type: ignore[arg-type]


# A pre-forking server's master opens the store, then forks workers that learn at once and
# exit normally (sys.exit: every exit handler runs). In a process of its own, so its children
# exit as real workers do. Prints what each worker stored and the master's session after.
_FORKED_WORKERS = """
import json, os, signal, sys
import numpy as np
from toolgate.routing.learned_store import open_store

store = open_store(sys.argv[1])
sqlite = not sys.argv[1].startswith("postgresql")
session = "SELECT 0" if sqlite else "SELECT pg_backend_pid()"
before = store._execute(session)
store._execute("CREATE TEMP TABLE master_only (x)" if sqlite else "SELECT 1")
read, write = os.pipe()
workers = []
for n in range(2):
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)  # a worker hung on a reply the other took dies
        seqs = [store.insert("forked", f"t/{n}", "t", b"k", np.ones(4, np.float32), 0.0)
                for _ in range(100)]
        temp = store._execute("SELECT name FROM temp.sqlite_master") if sqlite else []
        report = {"tool": f"t/{n}", "seqs": seqs, "temp": temp}
        os.write(write, (json.dumps(report) + "\\n").encode())
        sys.exit(0)
    workers.append(pid)
exits = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in workers]
os.close(write)
reports = [json.loads(line) for line in os.fdopen(read).read().splitlines()]
tool_of = dict(store._execute("SELECT seq, tool FROM learned"))
print(json.dumps({
    "exits": exits,
    "session_kept": store._execute(session) == before,
    "wrong_seqs": sum(tool_of.get(s) != r["tool"] for r in reports for s in r["seqs"]),
    "seqs": sum(len(r["seqs"]) for r in reports),
    "temp_seen": sum(len(r["temp"]) for r in reports),
}))
"""


def _forked_workers(address: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-c", _FORKED_WORKERS, address],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(run.stdout)
    return result


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def forked(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    if request.param == "sqlite":
        return _forked_workers(str(tmp_path_factory.mktemp("forked") / "learned.sqlite3"))
    return _forked_workers(request.getfixturevalue("postgres"))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_forked_workers_of_one_store_exit_normally(forked: dict[str, Any]) -> None:
    assert forked["exits"] == [0, 0]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_forked_workers_each_get_their_own_rows_seq(forked: dict[str, Any]) -> None:
    assert forked["seqs"] == 200
    assert forked["wrong_seqs"] == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_workers_exit_leaves_the_masters_session(forked: dict[str, Any]) -> None:
    assert forked["session_kept"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_worker_does_not_use_the_masters_connection(forked: dict[str, Any]) -> None:
    assert forked["temp_seen"] == 0  # the master's temporary table is its connection's own


_HALF_MADE_AT_FORK = """
import os, sys
from toolgate.routing.learned_store import LearnedStore, SqliteStore

folder = sys.argv[1]
# Many stores, so that some come after the half-made one in the hook's (set) order.
made = [SqliteStore(os.path.join(folder, f"{i}.sqlite3")) for i in range(15)]
half = object.__new__(SqliteStore)
LearnedStore.__init__(half)  # what a fork sees while another thread builds a store
made += [SqliteStore(os.path.join(folder, f"after{i}.sqlite3")) for i in range(15)]
pid = os.fork()
if pid == 0:
    os._exit(sum(store._db._db is not None for store in made))
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_store_half_made_at_a_fork_does_not_keep_the_others_on_the_parents_connection(
    tmp_path: Path,
) -> None:
    run = subprocess.run(
        [sys.executable, "-c", _HALF_MADE_AT_FORK, str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert run.stdout.strip() == "0", run.stderr  # stores holding the parent's connection
