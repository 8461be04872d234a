"""A request the server cuts as it stops answered in the gateway's error shape.

uvicorn gives the requests still running when it is told to stop its graceful timeout, then
cancels them, and answers one whose answer had not begun with a plain-text 500: an SDK reads
no error from it (Anthropic's and Google's expect their JSON), and is told the server failed
when it was only going away. :class:`AnswerWhenStopped` answers such a request itself, with
the gateway's 503 in the error shape of the provider the request was for, which the SDKs
retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from toolgate.asgi import App, Message, Receive, Scope, Send
from toolgate.extras import needs_extra

with needs_extra("gateway", "toolgate.gateway"):
    import anyio
    from starlette.responses import Response

__all__ = ["AnswerWhenStopped"]

_log = logging.getLogger("toolgate.gateway")


class AnswerWhenStopped:
    """ASGI middleware answering an HTTP request that is cancelled from outside (the server
    stopping; the gateway's own cancellations, of a request whose client left, stay inside
    ``app``) before its answer began with ``answer(scope)``; the cancellation then goes on.
    A request whose client had already left is not answered (nobody would read it) but
    passed to ``on_gone(scope)``: a server may cancel such a request itself."""

    def __init__(
        self,
        app: App,
        answer: Callable[[Scope], Response],
        on_gone: Callable[[Scope], None] | None = None,
    ) -> None:
        self.app = app
        self.answer = answer
        self.on_gone = on_gone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        gone = False

        async def receiving() -> Message:
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "http.disconnect"
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        except asyncio.CancelledError as exc:
            if started:
                raise
            if gone:
                # Cancelled by a server that saw the client leave first (Daphne does, once
                # its close timeout passes): a client gone, not the gateway stopping.
                if self.on_gone is not None:
                    self.on_gone(scope)
                raise
            # The server's reason, where it gives one (uvicorn: "timeout graceful shutdown
            # exceeded"; a host's deadline its own), tells a shutdown from anything else.
            # The path quoted, as the gateway's other lines quote it.
            _log.warning(
                "%s %r 503: the server cancelled the request before its answer began (%s)",
                scope["method"], scope["path"], str(exc) or "no reason given",
            )  # fmt: skip
            with anyio.CancelScope(shield=True):
                await self.answer(scope)(scope, receive, send)
            raise
