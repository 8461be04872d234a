"""The learned memory's stores themselves: what their messages show of a PostgreSQL address."""

from __future__ import annotations

import pytest

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
