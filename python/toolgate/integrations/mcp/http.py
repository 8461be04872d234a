"""The MCP proxy over Streamable HTTP, for clients on other machines or in other processes.

One proxy then serves a whole team or a fleet of agents: it keeps no state per client, so any
number of them share its upstream connections and its index. The MCP SDK's Streamable HTTP
app serves the proxy's server at ``/mcp``, under uvicorn. Requests from web pages are refused
(:mod:`toolgate.browser_guard`): one carrying an ``Origin`` not allowed by ``--allow-origin``
gets a 403 naming it, and one to a loopback listener under a ``Host`` other than a loopback
name (DNS rebinding) a 421; ``--allow-host`` adds names, and off loopback restricts ``Host``
to them. A listener given a token admits only requests that carry it as ``Authorization:
Bearer <token>``, on top.

Beside it, ``GET /healthz`` answers ``{"status": "ok"}`` to anyone (a load balancer's or an
orchestrator's probe carries no token, and learns nothing but that the proxy serves), and
``GET /metrics`` the proxy's Prometheus metrics, behind the token like ``/mcp``.

A client's calls under way end with the client, cancelled upstream (the SDK sends the
upstream ``notifications/cancelled``, the proxy's upstream connections stay open): a
2026-07-28 client's when it closes the call's response stream, which is how that protocol
cancels; an earlier-protocol client's when it cancels the call, when it ends its session
(``DELETE``), and when its session expires, :data:`SESSION_IDLE_SECONDS` after its last
request (a client that went away without a word). A response stream that merely closed is
not taken for a cancellation on that protocol (MCP says a disconnection is not one), so such
a call runs on until its server answers, its server's ``timeout``, or the session's end.
Stopping the proxy ends every session.
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from mcp.types import JSONRPCError
from starlette.middleware.cors import CORSMiddleware

from toolgate.asgi import (
    App,
    Message,
    NotCancelled,
    Receive,
    Scope,
    Send,
    bearer_token,
    is_secret,
    send_json,
)
from toolgate.browser_guard import (
    BrowserGuard,
    BrowserPolicy,
    host_pattern,
    is_loopback,
    origin_pattern,
    served_hosts,
)
from toolgate.errors import InvalidInputError
from toolgate.integrations.mcp.metrics import ProxyMetrics
from toolgate.integrations.mcp.stdio_server import checked_line

__all__ = [
    "GRACE_SECONDS",
    "HEALTH_PATH",
    "MCP_PATH",
    "METRICS_PATH",
    "SESSION_IDLE_SECONDS",
    "HttpListener",
    "proxy_app",
    "serve_over_http",
]

#: Where the proxy's MCP endpoint is.
MCP_PATH = "/mcp"

#: The liveness probe: no token, no details.
HEALTH_PATH = "/healthz"

#: The Prometheus metrics, behind the token when there is one.
METRICS_PATH = "/metrics"

#: Seconds a graceful stop gives requests under way before closing what is still open.
GRACE_SECONDS = 10.0

#: Seconds an earlier-protocol client's session lasts with no request of its under way (no
#: call, no open event stream): then it ends, and the calls it left running are cancelled.
#: The SDK's default; a client idle longer is answered 404 and starts a new session, as MCP
#: has it.
SESSION_IDLE_SECONDS = 30 * 60.0

# One filter, added once however many times the server is stopped.
_NOT_CANCELLED = NotCancelled()


@dataclass(frozen=True)
class HttpListener:
    """Where the proxy listens (``port`` 0: a free port, named on stderr once listening),
    the bearer token requests must carry (``None``: none), and the ``Host`` names (beside
    the loopback ones on a loopback address) and ``Origin`` values it admits."""

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = field(default=None, repr=False)  # reprs reach tracebacks and logs
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()

    @classmethod
    def parse(
        cls,
        address: str,
        *,
        token: str | None,
        open_to_all: bool,
        allow_hosts: Iterable[str] = (),
        allow_origins: Iterable[str] = (),
    ) -> HttpListener:
        """``HOST:PORT`` (``127.0.0.1:8765``, ``[::1]:8765``, ``0.0.0.0:8765``; ``:8765`` for
        loopback) as a listener. A host other than loopback needs ``token`` unless
        ``open_to_all``: without one, anyone who can reach the port can call the tools.
        ``allow_hosts`` and ``allow_origins`` are ``--allow-host`` and ``--allow-origin``."""
        host, colon, port_text = address.rpartition(":")
        number = port_text.isascii() and port_text.isdigit()
        if not colon or not number or int(port_text) > 65535:
            raise InvalidInputError(f"--http takes HOST:PORT, e.g. 127.0.0.1:8765; got {address!r}")
        bracketed = host.startswith("[")
        if bracketed != host.endswith("]") or (":" in host and not bracketed):
            raise InvalidInputError(
                f"--http: an IPv6 address goes in brackets, as in [::1]:8765; got {address!r}"
            )
        host = (host[1:-1] if bracketed else host) or "127.0.0.1"
        if token is not None and not token.strip():
            raise InvalidInputError("the bearer token is empty")
        if token is None and not open_to_all and not is_loopback(host):
            raise InvalidInputError(
                f"serving on {host} without a token lets anyone who reaches the port call "
                "every upstream tool: give a token (--auth-token-env NAME), or --no-auth"
            )
        hosts = tuple(host_pattern(name, "--allow-host") for name in allow_hosts)
        origins = tuple(origin_pattern(origin, "--allow-origin") for origin in allow_origins)
        return cls(host, int(port_text), token, hosts, origins)

    @property
    def policy(self) -> BrowserPolicy:
        """The ``Host`` and ``Origin`` checks of this listener."""
        return BrowserPolicy(served_hosts(self.host, self.allowed_hosts), self.allowed_origins)

    def bind(self) -> socket.socket:
        """A socket listening at this address (bound before anything else starts, so a port
        in use is said at once); an :class:`InvalidInputError` naming the address when it
        cannot be."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            sock = socket.create_server((self.host, self.port), family=family)
        except OSError as exc:
            raise InvalidInputError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        # Taken on by every connection accepted. asyncio sets it only on sockets made with
        # proto IPPROTO_TCP, which create_server's are not; without it, a response written
        # in two parts waits for the client's delayed ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    @property
    def url(self) -> str:
        """The endpoint's URL as configured (port 0 is only known once listening)."""
        return _url(self.host, self.port)


async def serve_over_http(
    server: Server[Any],
    listener: HttpListener,
    sock: socket.socket,
    on_stop: Callable[[Callable[[], None]], None],
    *,
    metrics: ProxyMetrics | None = None,
    session_idle_timeout: float = SESSION_IDLE_SECONDS,
) -> None:
    """Serve ``server`` on ``sock`` (from ``listener.bind()``) until told to stop: ``on_stop``
    is given the function that stops it, gracefully: requests under way get
    :data:`GRACE_SECONDS` to finish, and then the connections still open (event streams
    stay open for as long as their clients listen) are closed. The process's signals are
    the caller's, not uvicorn's. ``metrics`` are served at :data:`METRICS_PATH`. A session
    ends after ``session_idle_timeout`` seconds without a request of its client's under way,
    and its calls still running are cancelled upstream (see the module docstring)."""
    app = proxy_app(server, listener, metrics=metrics, session_idle_timeout=session_idle_timeout)
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", timeout_graceful_shutdown=int(GRACE_SECONDS)
    )
    http = _Listening(config)
    on_stop(http.stop)
    host, port = sock.getsockname()[:2]
    # Clients that connect before uvicorn accepts wait in the socket's backlog.
    print(f"toolgate mcp-proxy: serving on {_url(host, port)}", file=sys.stderr, flush=True)
    try:
        await http.serve(sockets=[sock])
    except SystemExit:  # uvicorn's way to say its start failed (it logged why)
        raise InvalidInputError(f"the HTTP server on {_url(host, port)} failed to start") from None


def proxy_app(
    server: Server[Any],
    listener: HttpListener,
    *,
    metrics: ProxyMetrics | None = None,
    session_idle_timeout: float = SESSION_IDLE_SECONDS,
) -> App:
    """The ASGI app serving ``server`` at :data:`MCP_PATH` as ``listener`` says: the health
    probe first (any name, no token), then the ``Host`` / ``Origin`` checks, then CORS for
    the allowed origins, the token, the metrics and MCP."""
    app: App = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        host=listener.host,
        # The SDK's own check is off: the guard below makes it for every path, /metrics too,
        # answers in JSON naming the header, and can check Origin while admitting any Host
        # (a listener off loopback), which TransportSecuritySettings cannot say.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=session_idle_timeout,
    )
    app = _Messages(app)
    if metrics is not None:
        app = _Route(METRICS_PATH, _reads_only(metrics.asgi_app()), app)
    if listener.token is not None:
        app = _BearerGate(app, listener.token)
    policy = listener.policy
    if policy.origins:  # a page of an allowed origin may read the answers, and preflight
        app = CORSMiddleware(
            app, allow_origin_regex=policy.origin_regex(), allow_methods=["*"],
            allow_headers=["*"], expose_headers=["*"],
        )  # fmt: skip
    # The metrics answer any name where the token guards them (a scrape by the pod's
    # address): a page rebound to the proxy does not hold the token.
    keyed = [METRICS_PATH] if listener.token is not None else []
    app = BrowserGuard(app, policy, any_host_paths=keyed, log=logging.getLogger(__name__))
    return _Route(HEALTH_PATH, _reads_only(_healthy), app)


class _Listening(uvicorn.Server):
    """uvicorn's server, leaving the process's signals to the proxy."""

    def capture_signals(self) -> Any:
        return nullcontext()

    def stop(self) -> None:
        print(
            f"toolgate mcp-proxy: stopping; requests under way have {GRACE_SECONDS:g} s",
            file=sys.stderr,
            flush=True,
        )
        # An event stream still open when the grace ends is cancelled, as it must be: not
        # an error with a traceback.
        logging.getLogger("uvicorn.error").addFilter(_NOT_CANCELLED)
        self.should_exit = True


class _BearerGate:
    """Lets through only HTTP requests with one ``Authorization`` header, ``Bearer <token>``
    (the scheme in any case, as RFC 7235 has it); the others get a 401. The token is
    compared in constant time, so timing tells nothing of it. A CORS preflight (``OPTIONS``
    with ``Origin`` and ``Access-Control-Request-Method``) carries no credentials by design
    and goes through; any other ``OPTIONS`` needs the token."""

    def __init__(self, app: App, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._admits(scope):
            body = {"error": "unauthorized: a bearer token is needed"}
            await send_json(send, 401, body, [(b"www-authenticate", b"Bearer")])
            return
        await self.app(scope, receive, send)

    def _admits(self, scope: Scope) -> bool:
        """Whether the request carries the token, or is a CORS preflight."""
        token = bearer_token(scope.get("headers", []))
        return _is_preflight(scope) or is_secret(token, self.token)


class _Messages:
    """Answers a ``POST`` whose body is no MCP message with JSON-RPC's error, at 400, and
    passes the others on, body and all, a broken answer to a request of the proxy's as an
    error answering it (as :func:`~toolgate.integrations.mcp.stdio_server.checked_line` has
    it). The SDK's handshake-era transport read a request whose id is null, fractional or a
    boolean as a notification, and answered 202 with nothing; a batch got "invalid params";
    a broken answer was dropped, its request left waiting. A body over the SDK's limit is
    left to the SDK (its 413), unread."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not _json(scope):
            await self.app(scope, receive, send)  # the SDK refuses a body not said to be JSON
            return
        if (_declared_length(scope) or 0) > DEFAULT_MAX_REQUEST_BODY_SIZE:
            await self.app(scope, receive, send)  # the SDK's 413, from the header alone
            return
        read: list[bytes] = []
        size, more = 0, True
        while more and size <= DEFAULT_MAX_REQUEST_BODY_SIZE:
            message = await receive()
            if message["type"] != "http.request":  # the client left: the SDK sees it
                await self.app(scope, _replayed([message], receive), send)
                return
            read.append(message.get("body", b""))
            size += len(read[-1])
            more = message.get("more_body", False)
        body = b"".join(read)
        text = body.decode("utf-8", "replace")
        checked = text if more else checked_line(text)
        if isinstance(checked, JSONRPCError):
            error = checked.model_dump(mode="json", by_alias=True, exclude_unset=True)
            await send_json(send, 400, error)
            return
        if checked != text:  # a broken answer, read as an error answering its request
            body = checked.encode()
        first: Message = {"type": "http.request", "body": body, "more_body": more}
        await self.app(scope, _replayed([first], receive), send)


def _json(scope: Scope) -> bool:
    """Whether the request says its body is JSON."""
    types = [value for name, value in scope.get("headers", []) if name.lower() == b"content-type"]
    return len(types) == 1 and types[0].lower().startswith(b"application/json")


def _declared_length(scope: Scope) -> int | None:
    """The request's ``Content-Length``, read as the SDK's limit reads it (the first such
    header, as Python's ``int`` parses it), or None."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replayed(messages: list[Message], receive: Receive) -> Receive:
    """``receive``, giving ``messages`` first (what was read of a request already)."""
    waiting = list(messages)

    async def replay() -> Message:
        return waiting.pop(0) if waiting else await receive()

    return replay


class _Route:
    """Sends HTTP requests for ``path`` to ``app``, and everything else to ``rest``."""

    def __init__(self, path: str, app: App, rest: App) -> None:
        self.path, self.app, self.rest = path, app, rest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") == self.path:
            await self.app(scope, receive, send)
        else:
            await self.rest(scope, receive, send)


def _is_preflight(scope: Scope) -> bool:
    """Whether ``scope`` is a CORS preflight: ``OPTIONS`` with the two headers every
    browser's carries (an ``OPTIONS`` alone is no preflight, and gets no pass)."""
    if scope.get("method") != "OPTIONS":
        return False
    names = {name.lower() for name, _ in scope.get("headers", [])}
    return {b"origin", b"access-control-request-method"} <= names


def _reads_only(app: App) -> App:
    """``app`` for ``GET`` and ``HEAD`` requests; a 405 to any other method."""

    async def reading(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") not in ("GET", "HEAD"):
            allow = [(b"allow", b"GET, HEAD")]
            await send_json(send, 405, {"error": "method not allowed"}, allow)
            return
        await app(scope, receive, send)

    return reading


async def _healthy(_scope: Scope, _receive: Receive, send: Send) -> None:
    """``{"status": "ok"}``; nothing about the upstreams, to anyone."""
    await send_json(send, 200, {"status": "ok"}, [(b"cache-control", b"no-store")])


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{MCP_PATH}"
