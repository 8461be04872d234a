"""What the gateway and the MCP proxy share at the ASGI level: the bearer token's reading."""

from __future__ import annotations

import pytest

from toolgate.asgi import bearer_token, is_secret


@pytest.mark.parametrize(
    ("values", "token"),
    [
        ([b"Bearer s3cret"], b"s3cret"),
        ([b"bearer s3cret"], b"s3cret"),  # the scheme in any case (RFC 7235)
        ([b" BEARER   s3cret "], b"s3cret"),
        ([b"Basic s3cret"], None),
        ([b"Bearer "], None),
        ([b"s3cret"], None),
        ([], None),
        ([b"Bearer s3cret", b"Bearer s3cret"], None),  # two: which counts is not ours to guess
    ],
)
def test_the_bearer_token_is_read_as_rfc_7235_has_it(
    values: list[bytes], token: bytes | None
) -> None:
    headers = [(b"host", b"localhost"), *((b"Authorization", value) for value in values)]
    assert bearer_token(headers) == token


@pytest.mark.parametrize(
    ("offered", "expected"), [(b"s3cret", True), (b"s3cre", False), (b"", False), (None, False)]
)
def test_only_the_secret_itself_is_the_secret(offered: bytes | None, expected: bool) -> None:
    assert is_secret(offered, b"s3cret") is expected
