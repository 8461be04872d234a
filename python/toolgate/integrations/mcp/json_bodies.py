"""A bound on the JSON bodies an HTTP upstream answers with, as they are read.

A Streamable HTTP server may answer a request with one JSON body rather than an event
stream, which the SDK reads whole before the proxy's ``maxResultBytes`` check (an event
stream's events it bounds itself, with ``max_sse_event_size``): a broken or hostile server's
gigabytes held the proxy's memory. :func:`json_body_limit` makes an ``httpx2`` response hook
that reads such a body through a counter, which fails the read past the limit with an
``httpx2.StreamError``: the SDK then answers the request with a parse error that says so,
and the connection goes on. A body in a content coding (gzip...) is decoded by the counter
and counted as decoded: a few kilobytes of gzip on the wire may hold gigabytes, which the
client would have decoded after the count.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator

import httpx2

# The decoders httpx2 itself reads a response's content coding with (each step's output is
# bounded, so a small input cannot inflate in one piece).
from httpx2._decoders import MultiDecoder

from toolgate.integrations.mcp.answers import dropped_answer

__all__ = ["json_body_limit"]


def json_body_limit(limit: int, server: str) -> Callable[[httpx2.Response], Awaitable[None]]:
    """An ``httpx2`` response hook that reads the JSON body of each response of the server
    called ``server`` up to ``limit`` bytes."""

    async def hook(response: httpx2.Response) -> None:
        if response.headers.get("content-type", "").lower().startswith("application/json"):
            values = response.headers.get_list("content-encoding", split_commas=True)
            codings = [c.strip().lower() for c in values if c.strip().lower() != "identity"]
            # Decoded here, where it is counted: the client must not decode it again.
            response.headers.pop("content-encoding", None)
            response.stream = _Capped(response.stream, limit, server, codings)

    return hook


class _Capped(httpx2.AsyncByteStream):
    """A response body, decoded from its content ``codings`` (in the order applied), read
    through a counter of the decoded bytes, which fails the read past ``limit`` of them."""

    def __init__(self, inner: object, limit: int, server: str, codings: list[str]) -> None:
        assert isinstance(inner, httpx2.AsyncByteStream)  # an async client's response
        self._inner, self._limit, self._server = inner, limit, server
        self._codings = codings

    async def __aiter__(self) -> AsyncIterator[bytes]:
        decoder = MultiDecoder(self._codings) if self._codings else None
        read = 0

        def counted(pieces: Iterable[bytes]) -> Iterator[bytes]:
            nonlocal read
            for piece in pieces:
                read += len(piece)
                if read > self._limit:
                    raise httpx2.StreamError(dropped_answer(self._server, self._limit))
                yield piece

        async for chunk in self._inner:
            for piece in counted((chunk,) if decoder is None else decoder.decode(chunk)):
                yield piece
        if decoder is not None:
            for piece in counted(decoder.flush()):
                yield piece

    async def aclose(self) -> None:
        await self._inner.aclose()
