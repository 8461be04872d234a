"""The MCP proxy over Streamable HTTP, for clients on other machines or in other processes.

One proxy then serves a whole team or a fleet of agents: it keeps no state per client, so any
number of them share its upstream connections and its index. The MCP SDK's Streamable HTTP
app serves the proxy's server at ``/mcp``, under uvicorn. A listener on a loopback address
checks the ``Host`` and ``Origin`` headers (the SDK's DNS-rebinding protection); one given a
token admits only requests that carry it as ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import uvicorn
from mcp.server.lowlevel import Server

from toolgate.errors import InvalidInputError

__all__ = ["MCP_PATH", "HttpListener", "serve_over_http"]

#: Where the proxy's MCP endpoint is.
MCP_PATH = "/mcp"

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_App = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


@dataclass(frozen=True)
class HttpListener:
    """Where the proxy listens (``port`` 0: a free port, named on stderr once listening)
    and the bearer token requests must carry (``None``: none)."""

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None

    @classmethod
    def parse(cls, address: str, *, token: str | None, open_to_all: bool) -> HttpListener:
        """``HOST:PORT`` (``127.0.0.1:8765``, ``[::1]:8765``, ``0.0.0.0:8765``; ``:8765`` for
        loopback) as a listener. A host other than loopback needs ``token`` unless
        ``open_to_all``: without one, anyone who can reach the port can call the tools."""
        host, colon, port_text = address.rpartition(":")
        if not colon or not port_text.isdigit() or int(port_text) > 65535:
            raise InvalidInputError(f"--http takes HOST:PORT, e.g. 127.0.0.1:8765; got {address!r}")
        host = host.strip("[]") or "127.0.0.1"
        if token is not None and not token.strip():
            raise InvalidInputError("the bearer token is empty")
        if token is None and not open_to_all and not _loopback(host):
            raise InvalidInputError(
                f"serving on {host} without a token lets anyone who reaches the port call "
                "every upstream tool: give a token (--auth-token-env NAME), or --no-auth"
            )
        return cls(host, int(port_text), token)

    @property
    def url(self) -> str:
        """The endpoint's URL as configured (port 0 is only known once listening)."""
        return _url(self.host, self.port)


async def serve_over_http(
    server: Server[Any], listener: HttpListener, on_stop: Callable[[Callable[[], None]], None]
) -> None:
    """Serve ``server`` at ``listener`` until told to stop: ``on_stop`` is given the function
    that stops it (gracefully: requests under way are finished). The process's signals are
    the caller's, not uvicorn's."""
    app: _App = server.streamable_http_app(streamable_http_path=MCP_PATH, host=listener.host)
    if listener.token is not None:
        app = _BearerGate(app, listener.token)
    config = uvicorn.Config(
        app, host=listener.host, port=listener.port, log_level="warning", lifespan="on"
    )
    http = _Listening(config)
    on_stop(http.stop)
    await http.serve()
    if not http.started:  # the port was taken, or the host cannot be bound
        raise InvalidInputError(f"cannot listen on {listener.host}:{listener.port}")


class _Listening(uvicorn.Server):
    """uvicorn's server, which says where it listens once it does, and leaves signals alone."""

    def capture_signals(self) -> Any:
        return nullcontext()

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        for listening in self.servers:
            for sock in listening.sockets:
                host, port = sock.getsockname()[:2]
                print(f"toolgate mcp-proxy: serving on {_url(host, port)}", file=sys.stderr)
                sys.stderr.flush()

    def stop(self) -> None:
        self.should_exit = True


class _BearerGate:
    """Lets through only HTTP requests whose ``Authorization`` is ``Bearer <token>``; the
    others get a 401 (compared in constant time, so timing tells nothing of the token)."""

    def __init__(self, app: _App, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "http":
            given = b""
            for name, value in scope.get("headers", []):
                if name.lower() == b"authorization":
                    given = value
            if not hmac.compare_digest(given, self.expected):
                body = json.dumps({"error": "unauthorized: a bearer token is needed"}).encode()
                headers = [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b"Bearer"),
                    (b"content-length", str(len(body)).encode()),
                ]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{MCP_PATH}"
