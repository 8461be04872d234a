"""The request bodies the gateway filters: read within a limit, parsed and written exactly.

A body is read no further than the gateway's ``max_body_bytes`` (:func:`body`), decoded
from its content coding within the same bound (:func:`decode`), parsed with every integer
exact (:func:`parse`) (all three: :func:`read`), and, when filtering changed it, written out
again (:func:`dumps`; :func:`written`). One passed through goes on as it comes, framed as the
client framed it (:func:`passed_on`). A large or compressed body is decoded, parsed and
written on a worker thread: on the event loop, a few megabytes (an image, long tool results)
held every other request of the worker for a fifth of a second.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any, TypeVar

from toolgate import json_limits
from toolgate.errors import InvalidInputError
from toolgate.extras import needs_extra
from toolgate.gateway import answers

with needs_extra("gateway", "toolgate.gateway"):
    import anyio.to_thread
    import orjson
    from starlette.requests import Request
    from starlette.responses import Response

try:  # zstd when zstandard is installed (httpx decodes answers in it then too)
    import zstandard
except ImportError:  # pragma: no cover - an install without it
    zstandard = None  # type: ignore[assignment]

__all__ = [
    "CODINGS",
    "OFF_LOOP_BYTES",
    "body",
    "decode",
    "dumps",
    "parse",
    "passed_on",
    "read",
    "written",
]

#: Bodies larger than this (as sent; any compressed one, whose decoded size is unknown) are
#: decoded, parsed and written on a worker thread: 256 KiB parse in about a millisecond, and
#: the hop would cost small bodies more than it saves.
OFF_LOOP_BYTES = 256 << 10

#: The request content codings the gateway decodes.
CODINGS = ("gzip", "x-gzip", "deflate", *(("zstd",) if zstandard is not None else ()))
_CHUNK = 1 << 16
_ZSTD_MIN_WINDOW = 1 << 21
_ZSTD_MAX_WINDOW = 1 << 23
# What a body not in the coding it names raises.
_CORRUPT: tuple[type[Exception], ...] = (
    zlib.error, EOFError, *((zstandard.ZstdError,) if zstandard is not None else ()),
)  # fmt: skip
_T = TypeVar("_T")


class _UnknownCodingError(InvalidInputError):
    """A request body in a content coding the gateway does not decode (its answer: 415)."""


async def read(request: Request, limit: int, provider: str) -> tuple[bytes, Any] | Response:
    """A filtered request's body, decoded from its content coding, and its JSON object; or
    the gateway's answer refusing it: 413 past ``limit`` bytes (as sent or decoded), 415 in
    a coding it does not decode (which the gateway could not filter, nor forward unseen), 400
    not a JSON object."""
    raw = await body(request, limit)
    coding = request.headers.get("content-encoding", "")
    if raw is None:
        return _too_large(provider, limit)
    # A compressed body's decoded size is unknown (a small one may inflate to the limit).
    bound = OFF_LOOP_BYTES if not coding.strip() else -1
    return await _off_loop_past(bound, len(raw), partial(_decoded, raw, coding, limit, provider))


async def written(body: Any, size: int) -> bytes:
    """``body`` as :func:`dumps` writes it, on a worker thread when the body it came from was
    ``size`` bytes, past :data:`OFF_LOOP_BYTES`."""
    return await _off_loop_past(OFF_LOOP_BYTES, size, partial(dumps, body))


async def _off_loop_past(bound: int, size: int, work: Callable[[], _T]) -> _T:
    """``work()``, on a worker thread when ``size`` is past ``bound``; a request cancelled
    (its client gone, the gateway stopping) does not wait for it."""
    if size <= bound:
        return work()
    return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)


def _too_large(provider: str, limit: int) -> Response:
    """The 413 refusing a body past ``limit`` bytes, as sent or decoded."""
    message = f"the request body is larger than {limit:,} bytes, the gateway's max_body_bytes"
    return answers.error(provider, 413, message, "body_too_large")


def _decoded(raw: bytes, coding: str, limit: int, provider: str) -> tuple[bytes, Any] | Response:
    """:func:`read`'s body decoded and parsed, or its answer refusing it."""
    try:
        decoded = decode(raw, coding, limit)
    except _UnknownCodingError as exc:
        refused = answers.error(provider, 415, str(exc), "unsupported_encoding")
        refused.headers["accept-encoding"] = ", ".join(CODINGS)
        return refused
    except InvalidInputError as exc:
        return answers.error(provider, 400, str(exc), "bad_encoding")
    if decoded is None:
        return _too_large(provider, limit)
    try:
        parsed = parse(decoded)
    except ValueError as exc:  # orjson's JSONDecodeError, or past the exact reader's bounds
        return answers.error(
            provider, 400, f"the request body is not valid JSON: {exc}", "bad_json"
        )
    if not isinstance(parsed, dict):
        message = f"the request body must be a JSON object, got {type(parsed).__name__}"
        return answers.error(provider, 400, message, "bad_body")
    return decoded, parsed


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


def decode(raw: bytes, coding: str, limit: int) -> bytes | None:
    """``raw`` decoded from ``coding`` (a ``Content-Encoding`` value: its codings in the order
    they were applied), or None past ``limit`` bytes decoded (a small body may inflate to
    gigabytes). :class:`_UnknownCodingError` for a coding not in :data:`CODINGS`, an
    :class:`InvalidInputError` for a body not in the coding it names.

    >>> decode(zlib.compress(b"{}"), "deflate", 10)
    b'{}'
    """
    codings = [part.strip().lower() for part in coding.split(",") if part.strip()]
    for name in reversed(codings):
        if name == "identity":
            continue
        if name not in CODINGS:
            raise _UnknownCodingError(
                f"the request body's content coding {name!r} is not one the gateway decodes "
                f"({', '.join(CODINGS)}); send it in one of those, or uncompressed"
            )
        try:
            decoded = _unzstd(raw, limit) if name == "zstd" else _inflate(raw, name, limit)
        except _CORRUPT as exc:
            raise InvalidInputError(f"the request body is not valid {name}: {exc}") from None
        if decoded is None:
            return None
        raw = decoded
    return raw


def _inflate(raw: bytes, name: str, limit: int) -> bytes | None:
    """``raw`` inflated (gzip: each of its members; deflate: zlib-wrapped, or raw as some
    clients send it), or None past ``limit`` bytes."""
    if name == "deflate":
        try:
            return _inflated(raw, zlib.MAX_WBITS, limit, members=False)
        except zlib.error:
            return _inflated(raw, -zlib.MAX_WBITS, limit, members=False)
    return _inflated(raw, 16 + zlib.MAX_WBITS, limit, members=True)


def _inflated(raw: bytes, wbits: int, limit: int, *, members: bool) -> bytes | None:
    out = bytearray()
    data = raw
    while data:
        inflater = zlib.decompressobj(wbits)
        while not inflater.eof:
            chunk = inflater.decompress(data, limit + 1 - len(out))  # never past the bound
            data = inflater.unconsumed_tail
            out += chunk
            if len(out) > limit:
                return None
            if not chunk and not data and not inflater.eof:  # a member of no bytes ends so
                raise EOFError("the compressed data ends before its end")
        data = inflater.unused_data if members else b""
    return bytes(out)


def _unzstd(raw: bytes, limit: int) -> bytes | None:
    # A frame cut short reads as a shorter body, which is then no JSON object: a 400 still.
    assert zstandard is not None  # only a coding in CODINGS is decoded
    window = _zstd_window(limit)
    out = bytearray()
    decompressor = zstandard.ZstdDecompressor(max_window_size=window)
    try:
        with decompressor.stream_reader(raw, read_across_frames=True) as reader:
            while chunk := reader.read(_CHUNK):
                out += chunk
                if len(out) > limit:
                    return None
    except zstandard.ZstdError as exc:
        if "too much memory" not in str(exc):  # zstd's words for a window past the bound
            raise
        raise zstandard.ZstdError(
            f"{exc} (the gateway decodes windows of at most {window:,} bytes)"
        ) from None
    return bytes(out)


def _zstd_window(limit: int) -> int:
    """The largest window a zstd frame of a body of at most ``limit`` bytes may ask for:
    ``limit`` rounded up to a power of two, from 2 MiB (zstd's own window, streaming at its
    default level, which a client compressing on the fly sends however short the body) to
    8 MiB (what zstd's levels up to 19 ask). zstandard allocates the window a frame asks for,
    up to 128 MiB, for each request."""
    return min(max(1 << (limit - 1).bit_length(), _ZSTD_MIN_WINDOW), _ZSTD_MAX_WINDOW)


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
