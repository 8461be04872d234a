"""A bound on the JSON bodies an HTTP upstream answers with, as they are read.

A Streamable HTTP server may answer a request with one JSON body rather than an event
stream, which the SDK reads whole before the proxy's ``maxResultBytes`` check (an event
stream's events it bounds itself, with ``max_sse_event_size``): a broken or hostile server's
gigabytes held the proxy's memory. :func:`json_body_limit` makes an ``httpx2`` response hook
that reads such a body through a counter, which fails the read past the limit with an
``httpx2.StreamError``: the SDK then answers the request with a parse error that says so,
and the connection goes on. A body in a content coding (gzip...) is decoded by the counter
and counted as decoded: a few kilobytes of gzip on the wire may hold gigabytes, which the
client would have decoded after the count. Only httpx2's public API is used (its decoders
through ``Response.aiter_bytes``): httpx2 is required with no upper bound.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2

from toolgate.integrations.mcp.answers import dropped_answer

__all__ = ["json_body_limit"]


def json_body_limit(limit: int, server: str) -> Callable[[httpx2.Response], Awaitable[None]]:
    """An ``httpx2`` response hook that reads the JSON body of each response of the server
    called ``server`` up to ``limit`` bytes."""

    async def hook(response: httpx2.Response) -> None:
        if response.headers.get("content-type", "").lower().startswith("application/json"):
            # The body as it came, headers and all, decoded by httpx2's public reader; the
            # client reads it from the counter, already decoded: not to be decoded again.
            wire = httpx2.Response(
                response.status_code,
                headers=response.headers,
                stream=response.stream,
                request=response.request,
            )
            response.headers.pop("content-encoding", None)
            response.stream = _Capped(wire, limit, server)

    return hook


class _Capped(httpx2.AsyncByteStream):
    """The body of the response ``wire``, decoded from its content coding (by
    ``aiter_bytes``, in pieces of bounded size), read through a counter of the decoded bytes,
    which fails the read past ``limit`` of them."""

    def __init__(self, wire: httpx2.Response, limit: int, server: str) -> None:
        self._wire, self._limit, self._server = wire, limit, server

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for piece in self._wire.aiter_bytes():
            read += len(piece)
            if read > self._limit:
                raise httpx2.StreamError(dropped_answer(self._server, self._limit))
            yield piece

    async def aclose(self) -> None:
        await self._wire.aclose()
