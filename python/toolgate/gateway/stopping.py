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

import anyio
from starlette.responses import Response

from toolgate.asgi import App, Message, Receive, Scope, Send

__all__ = ["AnswerWhenStopped"]

_log = logging.getLogger("toolgate.gateway")


class AnswerWhenStopped:
    """ASGI middleware answering an HTTP request that is cancelled from outside (the server
    stopping; the gateway's own cancellations, of a request whose client left, stay inside
    ``app``) before its answer began with ``answer(scope)``; the cancellation then goes on."""

    def __init__(self, app: App, answer: Callable[[Scope], Response]) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            if not started:
                # The path quoted, as the gateway's other lines quote it.
                _log.warning(
                    "%s %r 503: the gateway stopped before its answer began",
                    scope["method"], scope["path"],
                )  # fmt: skip
                with anyio.CancelScope(shield=True):
                    await self.answer(scope)(scope, receive, send)
            raise
