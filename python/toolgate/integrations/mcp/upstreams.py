"""The proxy's upstream connections, each held open by a task of its own until closed.

A stdio upstream is asked which protocol era it speaks with a ``ping`` rather than the SDK's
``server/discover`` (:class:`_PingProbe`): servers on the 1.x SDK answer a ping quietly, but
log every method they do not know with one line per request type they do know (about a
hundred lines on stderr, which the proxy shares, at every start).

An HTTP upstream's URL may hold a key (``?api_key=``, ``/sk-.../mcp``), and the HTTP clients
log the URLs they request (httpx2 and httpx at INFO, the SDK's transport at DEBUG): once
:class:`Upstreams` is made, a filter on those loggers (:data:`URL_LOGGERS`) cuts every URL
they log to its scheme and host (:mod:`toolgate.redaction`). It is added to those loggers
alone, and changes nothing else of the application's logging. Its HTTP client tells when
the server refused a request as one of a session it forgot
(:mod:`~toolgate.integrations.mcp.sessions`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
import httpx2
from anyio.abc import TaskGroup
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCRequest

from toolgate.integrations.mcp.children import TAG_ENV, exists, kill_tagged, new_tag
from toolgate.integrations.mcp.in_flight import busy, idle
from toolgate.integrations.mcp.json_bodies import json_body_limit
from toolgate.integrations.mcp.listing import McpClient
from toolgate.integrations.mcp.relay import ASK_TIMEOUT
from toolgate.integrations.mcp.server_config import (
    HttpServer,
    ServerSpec,
    request_timeout,
    result_limit,
)
from toolgate.integrations.mcp.sessions import hear_response
from toolgate.integrations.mcp.stdio import bounded_stdio_client
from toolgate.redaction import redact_logged_urls, redact_urls

__all__ = ["URL_LOGGERS", "Upstreams", "why_not_started"]

#: The loggers that log the URLs of HTTP upstreams: the HTTP clients' (the SDK's is
#: httpx2), and the SDK's Streamable HTTP transport's ("Connecting to ... endpoint: URL").
URL_LOGGERS = ("httpx2", "httpx", "mcp.client.streamable_http")

# Seconds to wait for the servers killed at close to be reaped.
_REAP_WAIT = 1.0


class Upstreams:
    """The upstream connections, each held open by a task of its own (a client must be
    closed by the task that opened it) until :meth:`close`."""

    def __init__(self, names: list[str]) -> None:
        """Nothing connected yet, for the servers ``names``, in the config's order."""
        self.names = names
        self.connected: dict[str, Client] = {}
        self.errors: dict[str, BaseException] = {}
        self.settled = {name: anyio.Event() for name in names}
        self.closed = {name: anyio.Event() for name in names}
        self.scopes = {name: anyio.CancelScope() for name in names}
        self.locks = {name: anyio.Lock() for name in names}
        self.tag = new_tag()  # on every server started, for close() to find the stuck ones
        # Connections replaced by restart() while requests were under way through them, kept
        # open for those (retire()); then those being closed, until they are.
        self._replaced: dict[str, _Held] = {}
        self._retired: list[_Held] = []
        redact_logged_urls(*URL_LOGGERS)

    @property
    def clients(self) -> dict[str, McpClient]:
        """The upstreams connected and not failed since, in the config's order (not the
        order they came up in, which changes from run to run)."""
        return {
            n: self.connected[n] for n in self.names if n in self.connected and n not in self.errors
        }

    async def hold(self, name: str, spec: ServerSpec, options: Mapping[str, Any]) -> None:
        """Connect to ``name`` and hold the connection open until its scope is cancelled; a
        failure to connect is kept in :attr:`errors`."""
        # Its own scope and events: a connection that restart() replaced and that closes
        # later must not settle, close or fail the one that replaced it.
        scope, settled, closed = self.scopes[name], self.settled[name], self.closed[name]
        try:
            with scope:
                async with _client(name, spec, options, self.tag) as client:
                    self.connected[name] = client
                    settled.set()
                    await anyio.sleep_forever()
        except Exception as exc:  # a command that fails to start, a URL that fails
            if self.scopes[name] is scope:
                self.errors.setdefault(name, exc)
        finally:
            settled.set()
            closed.set()

    async def restart(
        self,
        group: TaskGroup,
        name: str,
        spec: ServerSpec,
        options: Mapping[str, Any],
        timeout: float,
    ) -> Client | None:
        """Open a new connection to ``name`` in place of the one it has (its server died, or
        forgot its session): the new client, or ``None`` when it does not come up in
        ``timeout`` seconds. The old connection is closed first, unless requests are under
        way through it: it is then kept for them until :meth:`retire`."""
        old = _Held(self.connected.get(name), self.scopes[name], self.closed[name])
        if old.client is not None and busy(old.client):
            self.retire(group, name)  # one replaced earlier, not retired yet
            self._replaced[name] = old
        else:
            old.scope.cancel()
            with anyio.move_on_after(timeout):
                await old.closed.wait()
        self.connected.pop(name, None)
        self.errors.pop(name, None)
        self.settled[name], self.closed[name] = anyio.Event(), anyio.Event()
        self.scopes[name] = anyio.CancelScope()
        group.start_soon(self.hold, name, spec, options)
        with anyio.move_on_after(timeout):
            await self.settled[name].wait()
        if name in self.connected and name not in self.errors:
            return self.connected[name]
        if not self.settled[name].is_set():
            self.errors[name] = TimeoutError(f"no answer within {timeout:g} s")
        self.scopes[name].cancel()
        return None

    def retire(self, group: TaskGroup, name: str) -> None:
        """Close the connection :meth:`restart` replaced and kept open for the requests under
        way through it, once they are done: call it once the new connection is the one
        requests take."""
        old = self._replaced.pop(name, None)
        if old is not None:
            self._retired.append(old)
            group.start_soon(self._drain, old)

    async def _drain(self, old: _Held) -> None:
        assert old.client is not None
        await idle(old.client)
        old.scope.cancel()
        await old.closed.wait()
        self._retired.remove(old)

    def why(self, name: str, spec: ServerSpec) -> str:
        """Why ``name``, whose server is ``spec``, failed to connect, to be read."""
        exc = self.errors.get(name)
        return "it is not connected" if exc is None else why_not_started(spec, first_error(exc))

    async def close(self, timeout: float) -> None:
        """Close every upstream at once, waiting at most ``timeout`` seconds; then kill the
        servers still running (:mod:`~toolgate.integrations.mcp.children` says why)."""
        held = [*self._replaced.values(), *self._retired]
        for scope in [*self.scopes.values(), *(old.scope for old in held)]:
            scope.cancel()
        with anyio.move_on_after(timeout):
            for event in [*self.closed.values(), *(old.closed for old in held)]:
                await event.wait()
        killed = kill_tagged(self.tag)
        # Until the event loop's child watcher reaps them, they are zombies: a proxy that
        # exits first leaves them to an init that may never reap them.
        with anyio.move_on_after(_REAP_WAIT):
            while any(exists(pid) for pid in killed):
                await anyio.sleep(0.02)


@dataclass(frozen=True, eq=False)
class _Held:
    """One connection as :meth:`Upstreams.hold` holds it: its client (``None`` when it did
    not come up), the scope that closes it, and the event set once it is closed."""

    client: Client | None
    scope: anyio.CancelScope
    closed: anyio.Event


def first_error(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (the SDK's task groups wrap transport errors)."""
    # By duck type: BaseExceptionGroup is a builtin from Python 3.11 only.
    while (inner := getattr(exc, "exceptions", None)) and isinstance(inner[0], BaseException):
        exc = inner[0]
    return exc


def why_not_started(spec: ServerSpec, exc: BaseException) -> str:
    """Why the server of ``spec`` could not be started, from the error ``exc`` that starting
    it raised: a stdio command that is not there or cannot be run is named (the OS error
    names neither the command nor the directory it looked in)."""
    spawning = (FileNotFoundError, PermissionError, NotADirectoryError)
    if not isinstance(spec, StdioServerParameters):
        return redact_urls(repr(exc))  # an HTTP error may name the URL, and its key
    if not isinstance(exc, spawning):
        return repr(exc)
    command = spec.command
    if spec.cwd is not None and not os.path.isdir(spec.cwd):
        return f"its working directory {str(spec.cwd)!r} does not exist"
    # The server is started with its entry's env over the proxy's, PATH included.
    path = (spec.env or {}).get("PATH", os.environ.get("PATH"))
    if isinstance(exc, FileNotFoundError) and shutil.which(command, path=path) is None:
        where = "" if os.sep in command else " on PATH"
        return f"command {command!r} not found{where}"
    return f"command {command!r} cannot be run: {exc.strerror or repr(exc)}"


@asynccontextmanager
async def _client(
    name: str, spec: ServerSpec, options: Mapping[str, Any], tag: str
) -> AsyncIterator[Client]:
    timeout = request_timeout(spec)
    if timeout is not None:  # the config's: each request's, as the clients that wrote it mean
        options = {**options, "read_timeout_seconds": timeout}
    if isinstance(spec, HttpServer):
        # A response stream may stay open long, silent while a client of the proxy answers
        # the upstream's question: up to ASK_TIMEOUT, and the SDK's 300 s otherwise.
        limits = httpx2.Timeout(30.0, read=max(300.0, ASK_TIMEOUT + 30.0))
        # The bound first: hear_response reads some bodies.
        hooks = {"response": [json_body_limit(_answer_limit(spec), name), hear_response]}
        async with httpx2.AsyncClient(
            headers=dict(spec.headers), timeout=limits, event_hooks=hooks
        ) as http:
            transport = streamable_http_client(
                spec.url, http_client=http, max_sse_event_size=_answer_limit(spec)
            )
            async with Client(transport, **options) as client:
                yield client
    else:
        tagged = spec.model_copy(update={"env": {**(spec.env or {}), TAG_ENV: tag}})
        async with Client(_pinged_first(tagged, name), **options) as client:
            yield client


def _answer_limit(spec: ServerSpec) -> int:
    """The most bytes read of one message from the server of ``spec``, an event or a JSON
    body over HTTP (the SDK's own default for an event is 1 MiB; for a body, none) or a line
    over stdio (the SDK's: none): room for an
    answer at the server's limit however the server writes its JSON (its JSON-RPC envelope,
    text escaped), so that the limit that decides is the one the model is told of, while a
    message far past it is still cut off as it is read."""
    return 2 * result_limit(spec) + (64 << 10)


@asynccontextmanager
async def _pinged_first(spec: StdioServerParameters, name: str) -> AsyncIterator[Any]:
    """The SDK's stdio transport to ``spec``'s server (called ``name``), its lines bounded
    (:mod:`~toolgate.integrations.mcp.stdio`) and its era probe sent as a ping."""
    async with bounded_stdio_client(spec, max_line=_answer_limit(spec), name=name) as streams:
        read, write = streams
        yield read, _PingProbe(write)


class _PingProbe:
    """The write side of a stdio connection, on which the SDK's first request, its
    ``server/discover`` probe, goes out as a ``ping`` with the same id and the same
    2026-07-28 ``_meta`` envelope.

    A server on the 1.x SDK answers the ping (``{}``, which is no discover result: the SDK
    falls back to ``initialize``) where it would log a validation error a hundred lines
    long for ``server/discover``. A server that speaks the 2026-07-28 protocol takes the
    envelope as its era, has no ``ping`` in it and says so; the SDK's ``initialize`` is then
    answered with the versions it serves, and the SDK probes again with
    ``server/discover``, which goes out as it is. Either way the SDK's own negotiation
    decides, on evidence, and only the first probe changes.
    """

    def __init__(self, inner: Any) -> None:
        """See the class docstring."""
        self._inner = inner
        self._probed = False

    async def send(self, item: SessionMessage, /) -> None:
        """Send ``item``; the first request, if it is the era probe, as a ping."""
        message = item.message
        if not self._probed and isinstance(message, JSONRPCRequest):
            self._probed = True
            if message.method == "server/discover":
                ping = message.model_copy(update={"method": "ping"})
                item = SessionMessage(ping, metadata=item.metadata)
        await self._inner.send(item)

    async def aclose(self) -> None:
        """Close the stream."""
        await self._inner.aclose()

    async def __aenter__(self) -> _PingProbe:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()
