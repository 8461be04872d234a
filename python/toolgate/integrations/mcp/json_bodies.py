"""A bound on the JSON bodies an HTTP upstream answers with, as they are read.

A Streamable HTTP server may answer a request with one JSON body rather than an event
stream, which the SDK reads whole before the proxy's ``maxResultBytes`` check (an event
stream's events it bounds itself, with ``max_sse_event_size``): a broken or hostile server's
gigabytes held the proxy's memory. :func:`json_body_limit` makes an ``httpx2`` response hook
that reads such a body through a counter, which fails the read past the limit with an
``httpx2.StreamError``: the SDK then answers the request with a parse error that says so,
and the connection goes on.
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
            response.stream = _Capped(response.stream, limit, server)

    return hook


class _Capped(httpx2.AsyncByteStream):
    """A response body read through a counter, which fails the read past ``limit`` bytes."""

    def __init__(self, inner: object, limit: int, server: str) -> None:
        assert isinstance(inner, httpx2.AsyncByteStream)  # an async client's response
        self._inner, self._limit, self._server = inner, limit, server

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._inner:
            read += len(chunk)
            if read > self._limit:
                raise httpx2.StreamError(dropped_answer(self._server, self._limit))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
