"""The learned memory's stores themselves: what their messages show of a PostgreSQL address,
a PostgreSQL store outliving its connection (on a real throwaway server), and the salt that
keys the hashes of queries."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.fixtures.postgres import postgres_server
from toolgate.cli.commands import demo_catalog
from toolgate.embedding.embedder import Embedder
from toolgate.errors import InvalidInputError
from toolgate.routing.learned_store import (
    LEARN_SALT_ENV,
    PostgresStore,
    SqliteStore,
    StoreError,
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


def test_an_address_that_does_not_parse_is_not_quoted() -> None:
    # libpq's own reason would quote "Secret9": missing "=" after "Secret9".
    with pytest.raises(StoreError) as failed:
        PostgresStore("host=127.0.0.1 password=Pa55 Secret9")
    assert "Secret9" not in str(failed.value)


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


@pytest.mark.parametrize(
    ("salt", "message"),
    [(3, "a store's salt is a str or bytes, got int"), ("\ud800", "lone surrogate")],
)
def test_a_bad_salt_is_refused(salt: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        SqliteStore(":memory:", salt=salt)  # type: ignore[arg-type]
