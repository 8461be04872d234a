"""The learned memory's stores themselves: what their messages show of a PostgreSQL address,
and a PostgreSQL store outliving its connection (on a real throwaway server)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.fixtures.postgres import postgres_server
from toolgate.routing.learned_store import PostgresStore, StoreError, open_store

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
