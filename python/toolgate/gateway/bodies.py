"""The request bodies the gateway filters: read within a limit, parsed and written exactly.

A body is read no further than the gateway's ``max_body_bytes`` (:func:`body`), parsed with
every integer exact (:func:`parse`), and, when filtering changed it, written out again
(:func:`dumps`). One passed through goes on as it comes, framed as the client framed it
(:func:`passed_on`).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request

from toolgate import json_limits
from toolgate.errors import InvalidInputError

__all__ = ["body", "dumps", "parse", "passed_on"]


async def body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None past ``limit`` bytes (read no further than that)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


async def passed_on(
    request: Request,
) -> tuple[list[tuple[bytes, bytes]], bytes | AsyncIterator[bytes]]:
    """The length header and the content a passed-through request goes upstream with: its
    body as it comes, with the client's ``content-length`` (the body is not changed: a server
    may refuse a chunked one, 411) or chunked as the client sent it; none for a request
    without one (a ``GET`` sent chunked is a body some servers refuse), read all the same
    so the watch for the client leaving starts."""
    if "transfer-encoding" in request.headers:
        return [], request.stream()
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > 0:
        return [(b"content-length", length.encode())], request.stream()
    return [], await request.body()


# Nineteen digits in a row may be an integer past 64 bits, which orjson reads as a float.
_LONG_DIGITS = re.compile(rb"\d{19}")


def parse(raw: bytes) -> Any:
    """The request body's JSON, every integer exact: a body holding one past 64 bits (an id
    in a tool result) is read again by the standard library, as orjson would round it."""
    body = orjson.loads(raw)
    if _LONG_DIGITS.search(raw):
        body = json_limits.loads(raw)
    return body


def dumps(body: Any) -> bytes:
    """``body`` as JSON text; what orjson cannot write (an integer past 64 bits, nesting past
    254 levels) the standard library writes, and what neither can is an
    :class:`InvalidInputError`."""
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError
        pass
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except RecursionError:
        raise InvalidInputError("the request is nested too deeply to write out") from None
