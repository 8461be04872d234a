"""Whether an HTTP upstream forgot the proxy's session.

A Streamable HTTP server of the handshake era keeps its clients' sessions in memory: once
it restarts, is redeployed, lets a session expire, or a load balancer sends the proxy to
another instance, it answers every request that carries the old ``Mcp-Session-Id`` with a
404, and the spec has the client start a new session with a fresh ``initialize``. Servers
on the 1.x Python SDK answer ``400 Bad Request: No valid session ID provided`` instead. The
SDK turns either into an ``MCPError`` whose code and text are the server's own (or a
stand-in), which tells nothing reliable; so each HTTP upstream's HTTP client has a
:class:`SessionWatch` that hears its responses, and :func:`session_lost` says whether the
last one to a request in the session was such a 404 or 400.

A 400 may also be a server's answer to a request it found wrong in a live session: that is
why the proxy, told the session may be lost, first asks the old connection for its tools
(:meth:`~toolgate.integrations.mcp.serve._Serving.reconnect`) and starts a new session only
if that fails too. Either status means the server did not run the request, so the request
is sent again in the new session, whatever its tool's hints say.
"""

from __future__ import annotations

import weakref

import httpx2
from mcp.client.streamable_http import MCP_SESSION_ID

__all__ = ["SessionWatch", "session_lost", "watch_session"]

# The statuses of a request in a session the server does not know: the spec's 404, and the
# 400 of servers on the 1.x Python SDK.
_UNKNOWN_SESSION = (404, 400)

# Each watched client's watch, by the client's id: the SDK's Client is an unhashable
# dataclass; the entry is dropped when the client is collected, before its id is reused.
_watches: dict[int, SessionWatch] = {}


class SessionWatch:
    """Hears the responses of one upstream's HTTP client (an ``httpx2`` response hook)."""

    def __init__(self) -> None:
        """See the class docstring."""
        self.lost = False

    async def __call__(self, response: httpx2.Response) -> None:
        """Note whether ``response``, to a request in a session, says the session is
        unknown; a success says it is known (after a 400 of another cause)."""
        if MCP_SESSION_ID not in response.request.headers:
            return  # no session yet: the era probe, the handshake
        if response.status_code in _UNKNOWN_SESSION:
            self.lost = True
        elif response.is_success:
            self.lost = False


def watch_session(client: object, watch: SessionWatch) -> None:
    """Tie ``watch``, which hears the responses of ``client``'s connection, to ``client``."""
    key = id(client)
    _watches[key] = watch
    weakref.finalize(client, _watches.pop, key, None)


def session_lost(client: object) -> bool:
    """Whether the server of ``client`` (an HTTP upstream's) may have forgotten its session:
    its last answer to a request in it was a 404 or a 400. ``False`` for clients of stdio
    upstreams, and of HTTP ones without sessions (the 2026-07-28 protocol)."""
    watch = _watches.get(id(client))
    return watch is not None and watch.lost
