"""``toolgate mcp-proxy``: the proxy as a process, in front of the servers of a config file
(:mod:`~toolgate.integrations.mcp.server_config`).

The proxy (:func:`serve`) serves one client on stdin / stdout, or any number over Streamable
HTTP (:mod:`toolgate.integrations.mcp.http`).

Every upstream is started (or reached) at once, each within ``connect_timeout`` seconds, while
the embedding model loads. The proxy answers its clients' handshakes as soon as the upstreams
have answered theirs, and lists and indexes their tools meanwhile (requests wait for that).
Each upstream lives in a task of its own until the proxy stops: when its stdio client closes
stdin, or on SIGTERM / SIGINT (over HTTP, once the requests under way are done). Stopping
closes every upstream at once and kills, after :data:`CLOSE_GRACE`, the servers still
running, so none outlives the proxy. An upstream whose connection closes (it died) is
started again by the next call to it. One that could not be started (left out under
``lenient``, or not back after it died) is tried again in the background, after
``retry_after`` seconds and then at doubling intervals up to :data:`MAX_RETRY_INTERVAL`,
until it joins; calls to it meanwhile are answered at once, with an error saying it is down.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from mcp.shared.exceptions import MCPError
from mcp.types import METHOD_NOT_FOUND

from toolgate.errors import InvalidInputError, ModelError, ToolgateError
from toolgate.integrations.mcp.http import HttpListener, serve_over_http
from toolgate.integrations.mcp.listing import McpClient, list_server_tools
from toolgate.integrations.mcp.metrics import ProxyMetrics
from toolgate.integrations.mcp.proxy import McpProxy
from toolgate.integrations.mcp.relay import UpstreamRequests
from toolgate.integrations.mcp.router import McpRouter
from toolgate.integrations.mcp.server_config import (
    HttpServer,
    ServerSpec,
    load_servers,
    result_limit,
    server_overrides,
    tool_overrides,
)
from toolgate.integrations.mcp.sessions import watching
from toolgate.integrations.mcp.stdio_server import checked_stdio_server
from toolgate.integrations.mcp.upstreams import Upstreams
from toolgate.routing.config import RouterConfig
from toolgate.telemetry.recorder import Telemetry

__all__ = [
    "CONNECT_TIMEOUT",
    "MAX_RETRY_INTERVAL",
    "HttpServer",
    "ServerSpec",
    "load_servers",
    "serve",
]

#: Seconds an upstream server has to start and answer the handshake.
CONNECT_TIMEOUT = 30.0

#: The longest wait, in seconds, between two tries to start an upstream left out at start.
MAX_RETRY_INTERVAL = 300.0

#: Seconds the upstreams have to end once the proxy stops; then the ones left are killed.
#: Less than the two seconds an MCP client waits for the proxy itself before killing it.
CLOSE_GRACE = 1.5


async def serve(
    servers: Mapping[str, ServerSpec],
    *,
    http: HttpListener | None = None,
    top_k: int = 5,
    lenient: bool = False,
    connect_timeout: float = CONNECT_TIMEOUT,
    allow: Sequence[str] | None = None,
    deny: Sequence[str] | None = None,
    retry_after: float = 30.0,
    telemetry: Telemetry | None = None,
    learn: str | None = None,
    config: RouterConfig | None = None,
) -> None:
    """Connect to ``servers``, then serve the proxy: over this process's stdin / stdout until
    the client closes it or a SIGTERM / SIGINT arrives, or with ``http`` over Streamable HTTP
    until a SIGTERM / SIGINT, which lets the requests under way finish first.

    An upstream that cannot be started or reached in ``connect_timeout`` seconds is an
    :class:`InvalidInputError` naming it, or with ``lenient`` left out, with a line on
    stderr, and tried again from ``retry_after`` seconds on (see the module docstring).
    ``allow`` / ``deny`` are :class:`McpProxy`'s; ``retry_after`` is also how long a server
    whose re-listing failed keeps its tools before it is listed again (:class:`McpRouter`).
    An ``http`` address is bound first, so one in use is an error before anything starts.
    ``learn`` (a SQLite path or a ``postgresql://`` address) makes the routes learn from use:
    a call of a tool a ``tool_search`` found counts as used for the search's words.
    ``telemetry`` gets the route, promote and verify events of every search and call (a
    :class:`~toolgate.telemetry.sinks.JsonFileSink` makes a log ``toolgate stats --events`` reads).
    ``config`` is the router's (``toolgate mcp-proxy --set``). Each server's ``overrides``
    (from its config entry) apply to its tools; one naming a tool the server does not list
    is a line on stderr once it is listed. Without the embedding model (see
    ``toolgate model ensure``) it raises :class:`ModelError` before starting anything.
    """
    _check_model(config)  # before any upstream starts
    router = McpRouter(
        top_k=top_k, lenient=lenient, retry_after=retry_after, telemetry=telemetry, learn=learn,
        config=config, overrides=tool_overrides(servers),
    )  # fmt: skip
    run = partial(
        _serve, servers, router, lenient=lenient, connect_timeout=connect_timeout,
        allow=allow, deny=deny, retry_after=retry_after,
        requests=UpstreamRequests(one_client=http is None), over_http=http is not None,
    )  # fmt: skip
    if http is None:
        await run(_over_stdio)
        return
    with http.bind() as sock:
        await run(partial(_over_http, http, sock))


def _check_model(config: RouterConfig | None) -> None:
    """Raise the :class:`ModelError` that says how to prepare the embedding model unless it
    is in place and passes its checksums: no tool can be found without it. Reads the files
    (a tenth of a second, while loading it builds a session too)."""
    from toolgate.embedding.models import load

    try:
        load((config or RouterConfig()).precision)
    except ModelError as exc:
        raise ModelError(f"the proxy needs its embedding model: {exc}") from None


async def _serve(
    servers: Mapping[str, ServerSpec],
    router: McpRouter,
    transport: Callable[[_Serving], Awaitable[None]],
    *,
    lenient: bool,
    connect_timeout: float,
    allow: Sequence[str] | None,
    deny: Sequence[str] | None,
    retry_after: float,
    requests: UpstreamRequests,
    over_http: bool,
) -> None:
    """Connect ``router`` to ``servers``, then serve the proxy over ``transport`` until it
    returns; ``requests`` passes the upstreams' requests for input on to the clients.
    ``over_http``: the transport is HTTP, which serves the proxy's metrics and can stop
    gracefully.

    The proxy answers its clients' handshakes once the upstreams have answered theirs (their
    instructions go into its own, and the protocol has no way to send them later), while
    the upstreams are listed and indexed: requests wait for that. Their tools may change
    later, and the clients are told.
    """
    failure: ToolgateError | None = None
    async with anyio.create_task_group() as group:
        upstreams = Upstreams(list(servers))
        serving = _Serving(
            group, router, servers, upstreams, connect_timeout, requests=requests,
            over_http=over_http, retry_after=retry_after,
        )  # fmt: skip
        # First: a signal during start-up must close the upstreams started so far.
        group.start_soon(_stop_on_signal, serving)
        # The model loads while the upstreams start, rather than after them.
        group.start_soon(_prepare, router)
        try:
            await serving.connect_all(lenient)
            clients = serving.upstreams.clients
            serving.proxy = McpProxy(
                router, allow=allow, deny=deny, instructions=_instructions(clients),
                reconnect=serving.reconnect, requests=serving.requests,
                ready=serving.wait_indexed, unavailable=serving.unavailable,
                metrics=serving.metrics() if over_http else None,
                max_result_bytes={name: result_limit(spec) for name, spec in servers.items()},
            )  # fmt: skip
            group.start_soon(serving.index, clients)
            await transport(serving)
        except ToolgateError as exc:  # raised after the group, not wrapped in its group
            failure = exc
        await serving.close_upstreams()
        group.cancel_scope.cancel()
    failure = failure or serving.failure
    if failure is not None:
        raise failure


async def _over_stdio(serving: _Serving) -> None:
    """Serve the proxy's one client on stdin / stdout, until it closes them (a line that is
    no MCP message is answered with an error, not dropped)."""
    assert serving.proxy is not None
    server = serving.proxy.server
    async with checked_stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def _over_http(listener: HttpListener, sock: socket.socket, serving: _Serving) -> None:
    """Serve the proxy's clients over Streamable HTTP, until a signal stops it."""
    proxy = serving.proxy
    assert proxy is not None

    def on_stop(stop: Callable[[], None]) -> None:
        def stop_serving() -> None:
            proxy.end_event_streams()  # or they hold their connections for the whole grace
            stop()

        serving.on_stop(stop_serving)
        if serving.failure is not None:  # it failed before the transport could be stopped
            stop_serving()

    await serve_over_http(proxy.server, listener, sock, on_stop, metrics=proxy.metrics)


@dataclass
class _Serving:
    """What the proxy's process runs: its task group, its router, the upstream servers and
    their connections, and the proxy once connected (upstream notices heard before it
    exists concern nothing a client has seen yet)."""

    group: TaskGroup
    router: McpRouter
    servers: Mapping[str, ServerSpec]
    upstreams: Upstreams
    timeout: float
    proxy: McpProxy | None = None
    #: Seconds before an upstream that could not be started is tried again (then doubling).
    retry_after: float = 30.0
    #: Where the upstreams' requests for input find the client they are for.
    requests: UpstreamRequests = field(default_factory=UpstreamRequests)
    #: Whether the transport is HTTP (else stdio), which can stop gracefully.
    over_http: bool = False
    #: Stops the transport gracefully (requests under way finish); ``None``: there is no
    #: such way, and a signal ends the process once the upstreams are closed.
    stop: Callable[[], None] | None = None
    #: Set once the upstreams connected at start are listed and indexed, or that failed.
    indexed: anyio.Event = field(default_factory=anyio.Event)
    #: Why the proxy stopped after it began serving (listing or indexing failed).
    failure: ToolgateError | None = None
    #: Upstreams that are not answering: left out at start, or dead and not restarted.
    down: set[str] = field(default_factory=set)
    #: Set once the proxy closes its upstreams to stop: what ends then is no failure.
    stopping: bool = False

    async def close_upstreams(self) -> None:
        """Close every upstream, the proxy stopping (their watches end quietly); meanwhile
        learn from the calls still queued, dropping those a stalled learned store holds up
        past the same grace, so that it never holds the exit up."""
        self.stopping = True
        async with anyio.create_task_group() as closing:
            closing.start_soon(self.router.aclose, CLOSE_GRACE)
            await self.upstreams.close(timeout=CLOSE_GRACE)

    async def index(self, clients: Mapping[str, McpClient]) -> None:
        """List and index the upstreams ``clients`` (connected at start) while the proxy's
        clients initialize; then follow their changes, and start the others again later.
        A failure (listing in strict mode, the model) stops the proxy with its error,
        unless the proxy is stopping (:meth:`fail`)."""
        try:
            await self.router.connect(clients)
        except ToolgateError as exc:
            await self.fail(exc)
            return
        self.check_overrides(clients)
        for name in clients:
            self.group.start_soon(self.watch, name)
        left_out = [name for name in self.servers if name not in clients]
        if left_out:
            self.group.start_soon(self.join_later, left_out, self.retry_after)
        self.indexed.set()

    def check_overrides(self, names: Iterable[str]) -> None:
        """Say on stderr which tools the ``overrides`` of the servers ``names`` name that
        their listing does not hold (a typo, or the name the proxy shows for the one the
        server lists), which would apply to nothing; servers not listed yet are left out."""
        catalog = self.router.router.catalog
        for name in names:
            if name in self.router.changed:  # not listed (lenient): nothing to check against
                continue
            missing = [
                t for t in server_overrides(self.servers[name]) if f"{name}/{t}" not in catalog
            ]
            if missing:
                print(
                    f"toolgate mcp-proxy: warning: mcpServers.{name}.overrides names tools "
                    f"{name!r} does not list, which it applies to nothing: "
                    f"{', '.join(map(repr, missing))} (name tools as the server lists them)",
                    file=sys.stderr,
                )

    async def wait_indexed(self) -> None:
        """Return once the upstreams are indexed (the proxy's requests wait for it)."""
        await self.indexed.wait()
        if self.failure is not None:
            raise self.failure

    async def fail(self, failure: ToolgateError) -> None:
        """Stop the proxy with ``failure``: gracefully where the transport can be (HTTP;
        :func:`serve` raises it then), else on stderr, ending the process with code 2.
        Nothing when the proxy is stopping: the upstreams it closed failed the listing."""
        if self.stopping:  # a client that left while the upstreams were listed
            return
        self.failure = failure
        self.indexed.set()  # requests waiting for it get the error
        if self.over_http:
            if self.stop is not None:  # else the transport stops as soon as it starts
                self.stop()
            return
        print(f"toolgate mcp-proxy: error: {failure}", file=sys.stderr)
        await _end(self, code=2)

    def unavailable(self) -> list[str]:
        """The upstream servers not answering now, in the config's order."""
        return [name for name in self.servers if name in self.down]

    def answering(self, name: str) -> bool:
        """Whether upstream ``name`` is connected and not known to be down."""
        return name in self.upstreams.clients and name not in self.down

    def metrics(self) -> ProxyMetrics:
        """Metrics for the proxy, with gauges that read this process's upstreams."""

        def tools() -> int:
            ready = self.indexed.is_set() and self.failure is None
            return len(self.router.router.catalog) if ready else 0

        return ProxyMetrics(self.servers, answering=self.answering, tools=tools)

    def on_stop(self, stop: Callable[[], None]) -> None:
        """The transport's graceful stop, for a signal to use."""
        self.stop = stop

    def client_options(self, name: str) -> dict[str, Any]:
        """``mcp.Client``'s keyword arguments for ``name``'s connection: its message
        handler (the router marks it changed, the proxy passes the notice on) and the
        callbacks that pass its requests for input on to the proxy's clients."""
        handler = self.router.message_handler(name, then=partial(self._heard, name))
        over_http = isinstance(self.servers[name], HttpServer)
        return {"message_handler": handler, **self.requests.callbacks(name, over_http=over_http)}

    async def _heard(self, name: str, notice: Any) -> None:
        # Passed on in a task of its own: the handler runs in the upstream connection's
        # receive loop, which must not wait for the proxy's clients to take the notice.
        if self.proxy is not None:
            self.group.start_soon(self._pass_on, self.proxy, name, notice)
        await anyio.lowlevel.checkpoint()

    @staticmethod
    async def _pass_on(proxy: McpProxy, name: str, notice: Any) -> None:
        try:
            await proxy.heard(name, notice)
        except Exception as exc:  # a task of the proxy's group: it must not end the proxy
            print(f"toolgate mcp-proxy: a notice of {name!r} was lost: {exc!r}", file=sys.stderr)

    async def connect_all(self, lenient: bool) -> None:
        """Start every upstream at once; the ones that fail or do not answer in time are an
        error, or when ``lenient`` left out with a line on stderr."""
        upstreams = self.upstreams
        for name, spec in self.servers.items():
            self.group.start_soon(upstreams.hold, name, spec, self.client_options(name))
        with anyio.move_on_after(self.timeout):
            for event in upstreams.settled.values():
                await event.wait()
        for name, event in upstreams.settled.items():
            if not event.is_set():
                upstreams.errors[name] = TimeoutError(f"no answer within {self.timeout:g} s")
                upstreams.scopes[name].cancel()
        problems = [
            f"cannot connect to MCP server {name!r}: {upstreams.why(name, spec)}"
            for name, spec in self.servers.items()
            if name in upstreams.errors
        ]
        if problems and not lenient:
            raise InvalidInputError("; ".join(problems))
        self.down |= set(upstreams.errors)
        for problem in problems:
            print(f"toolgate mcp-proxy: {problem}; going on without it", file=sys.stderr)

    async def reconnect(self, name: str, failed: McpClient) -> bool:
        """Start ``name`` again after a request through its client ``failed`` failed as a
        closed connection does, or as one whose session the server forgot (a new connection
        is a new session); whether a new connection is in place. One restart at a time per
        server: a request that waited for another's restart finds a new client and goes
        on; one whose client still answers failed for another reason, and is not made
        again. A server that does not come back is down: requests to it are answered at
        once, and it is started again in the background (:meth:`join_later`), so a server
        that hangs as it starts costs one request the connect timeout, not every one."""
        if name in self.down:
            return False
        async with self.upstreams.locks[name]:
            if self.router.client(name) is not failed:
                return True  # restarted meanwhile
            if name in self.down:  # found down by the request this one waited for
                return False
            with watching() as probe:  # its refusal, if any, names the cause in the log
                try:
                    with anyio.fail_after(self.timeout):
                        await list_server_tools(name, failed)
                    return False  # it answers: the request failed, the server did not die
                except Exception:  # the connection is gone: start the server again
                    pass
            spec = self.servers[name]
            client = await self.upstreams.restart(
                self.group, name, spec, self.client_options(name), self.timeout
            )
            if client is None:
                self.upstreams.retire(self.group, name)  # its calls under way may still end
                why = self.upstreams.why(name, spec)
                print(
                    f"toolgate mcp-proxy: could not restart {name!r}: {why}; trying again in "
                    f"{self.retry_after:g} s",
                    file=sys.stderr,
                )
                self.down.add(name)
                self.group.start_soon(self.join_later, [name], self.retry_after)
                return False
            self.down.discard(name)
            why = (
                "server had forgotten its session" if probe.forgotten() else "connection had closed"
            )
            print(f"toolgate mcp-proxy: restarted {name!r}, whose {why}", file=sys.stderr)
            # Listed before it takes calls: the SDK checks a result against its tool's output
            # schema, and on a session that has listed nothing it lists inside the call, so a
            # listing refused after the call ran reported a call that ran as failed.
            with contextlib.suppress(Exception), anyio.fail_after(self.timeout):
                await list_server_tools(name, client)
            try:
                await self.router.replace_client(name, client)
            finally:
                # The old connection is closed once the calls under way through it are done
                # (only this request's own failed, the others' transport may be fine), and
                # also when the new one could not take its place.
                self.upstreams.retire(self.group, name)
            self.group.start_soon(self.watch, name)
            return True

    async def join_later(self, pending: list[str], first_wait: float) -> None:
        """Try to start each upstream of ``pending`` (left out at start, or not restarted)
        again, after ``first_wait`` seconds and then at doubling intervals (at most
        :data:`MAX_RETRY_INTERVAL`), until every one has joined: its tools are then found
        and called like the others', and the proxy's clients are told its tools, prompts
        and resources are there."""
        wait = first_wait
        pending = list(pending)
        while pending:
            await anyio.sleep(wait)
            wait = min(max(wait * 2, 1.0), MAX_RETRY_INTERVAL)
            for name in list(pending):
                async with self.upstreams.locks[name]:
                    client = await self.upstreams.restart(
                        self.group,
                        name,
                        self.servers[name],
                        self.client_options(name),
                        self.timeout,
                    )
                    self.upstreams.retire(self.group, name)  # down: it takes no new calls
                    if client is None:
                        continue
                    try:  # lenient: a listing that fails is a warning, and is tried again
                        if name in self.router.servers:  # it was connected before it died
                            await self.router.replace_client(name, client)
                        else:
                            await self.router.add_server(name, client)
                    except Exception as exc:  # this server's problem must not stop the proxy
                        print(f"toolgate mcp-proxy: {name!r} left out: {exc}", file=sys.stderr)
                        self.upstreams.scopes[name].cancel()
                        continue
                pending.remove(name)
                self.down.discard(name)
                print(f"toolgate mcp-proxy: {name!r} started and joined", file=sys.stderr)
                self.check_overrides([name])
                self.group.start_soon(self.watch, name)
                if self.proxy is not None:
                    await self.proxy.announce("tools", "prompts", "resources")

    async def watch(self, name: str) -> None:
        """Follow ``name``'s change events on the 2026-07-28 protocol: the router marks it
        changed, and the proxy hears them through the message handler (the SDK passes listen
        events on to it), as it hears an older connection's notifications."""
        try:
            await self.router.watch(name, prompts=True, resources=True)
        except InvalidInputError:
            pass
        except MCPError as exc:
            if exc.code != METHOD_NOT_FOUND:  # not found: it has no listen, so it tells nothing
                self._stopped_watching(name, exc)
        except Exception as exc:  # a dropped stream: changes then come with the next listing
            self._stopped_watching(name, exc)

    def _stopped_watching(self, name: str, exc: Exception) -> None:
        """Say on stderr that ``name``'s changes are no longer followed, unless the proxy is
        stopping: its stream then ends as its connection closes (the SDK's
        ``SubscriptionLost``, or a ``RuntimeError`` from its task group), which is no
        failure."""
        if not self.stopping:
            print(f"toolgate mcp-proxy: stopped watching {name!r}: {exc!r}", file=sys.stderr)


async def _prepare(router: McpRouter) -> None:
    """Load ``router``'s model early; a failure is left for connecting, which raises it
    again where the proxy reports its errors."""
    with contextlib.suppress(ToolgateError):
        await router.prepare()


def _instructions(clients: Mapping[str, McpClient]) -> str:
    """Each upstream's instructions, under its name."""
    parts = []
    for name, client in clients.items():
        text = getattr(client, "instructions", None)
        if isinstance(text, str) and text.strip():
            parts.append(f"Server {name}: {text.strip()}")
    return "\n\n".join(parts)


async def _stop_on_signal(serving: _Serving) -> None:
    """On SIGTERM or SIGINT, stop the transport gracefully where it can be (HTTP); else, or
    on a second signal, close every upstream and end the process. Where signals can be
    received (not on Windows).

    The process ends with ``os._exit``: on stdio, the task reading stdin waits in a thread
    that nothing can interrupt but input, which a client that signals may never send.
    """
    try:
        receiver = anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT)
    except NotImplementedError:
        return
    with receiver as signals:
        async for _ in signals:
            if serving.stop is not None:
                stop, serving.stop = serving.stop, None
                stop()  # the transport returns; the upstreams are closed after it
                continue
            await _end(serving, code=0)


async def _end(serving: _Serving, *, code: int) -> None:
    """Close every upstream and end the process with ``code``, at once: on stdio the task
    reading stdin waits in a thread that nothing but input interrupts."""
    await serving.close_upstreams()
    sys.stderr.flush()
    os._exit(code)
