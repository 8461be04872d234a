"""A request's handling stopped when its client goes away, and the upstream call with it.

Starlette runs an endpoint to its end whether or not its client is still there: it listens
for the client leaving only while it streams a response out. A gateway request spends most
of its time before that, waiting for the upstream's answer (a whole completion, or a
stream's first event: seconds to minutes), so a client that gave up (a timeout, a closed
tab, a cancelled agent step) left the upstream generating, and billing, for nobody.

:class:`CancelOnDisconnect` watches the connection once the request's body has been read
(before that the app's own reads see the client leave, and Starlette raises
``ClientDisconnect``, which the middleware takes for the client gone) and cancels the app's
handling the moment the client is gone. httpx closes a connection whose request is
cancelled, which is how an upstream learns to stop.
"""

from __future__ import annotations

from collections.abc import Callable

from toolgate.asgi import App, Message, Receive, Scope, Send
from toolgate.extras import needs_extra

with needs_extra("gateway", "toolgate.gateway"):
    import anyio
    from starlette.requests import ClientDisconnect

__all__ = ["CancelOnDisconnect"]


class CancelOnDisconnect:
    """ASGI middleware cancelling ``app``'s handling of an HTTP request once its client has
    disconnected; ``on_gone(scope)`` is then called if no answer had started to go out (a
    started one was already counted by its status)."""

    def __init__(self, app: App, on_gone: Callable[[Scope], None] | None = None) -> None:
        self.app = app
        self.on_gone = on_gone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = _Client(receive)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                client.answered = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                client.finished = True
            await send(message)

        failed: Exception | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(client.watch, group.cancel_scope)
            try:
                await self.app(scope, client.receive, sending)
            except ClientDisconnect:
                # The client left while still sending its body (Starlette's reads say so by
                # raising): a client gone, counted below, not a server error.
                pass
            except Exception as exc:  # raised as it is below, not in an exception group
                failed = exc
            group.cancel_scope.cancel()  # done: stop watching
        if failed is not None:
            raise failed
        if client.gone.is_set() and not client.answered and self.on_gone is not None:
            self.on_gone(scope)


class _Client:
    """One request's connection: its body handed to the app as it comes, then a watch for
    the client leaving, which the app's later reads wait on."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.body_read = anyio.Event()
        self.gone = anyio.Event()
        self.answered = False
        self.finished = False

    async def receive(self) -> Message:
        """The app's reads: the body's parts, then the disconnect once the client leaves."""
        if self.body_read.is_set():
            await self.gone.wait()
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.gone.set()
        elif not message.get("more_body", False):
            self.body_read.set()
        return message

    async def watch(self, handling: anyio.CancelScope) -> None:
        """Once the body is read, wait for the client to leave, then cancel ``handling``.
        The server also says "disconnect" once the answer is all sent: not a client gone."""
        await self.body_read.wait()
        while (await self._receive())["type"] != "http.disconnect":
            pass  # a server may wake a read with an empty body part
        self.gone.set()
        if not self.finished:
            handling.cancel()
