"""Whether an HTTP upstream refused a request as one of a session it forgot.

A Streamable HTTP server of the handshake era keeps its clients' sessions in memory: once
it restarts, is redeployed, lets a session expire, or a load balancer sends the proxy to
another instance, it answers every request that carries the old ``Mcp-Session-Id`` with a
404, and the spec has the client start a new session with a fresh ``initialize``. Servers
on the 1.x Python SDK answer ``400 Bad Request: No valid session ID provided`` instead. The
SDK turns either into an ``MCPError`` whose code and text are the server's own (or a
stand-in), which tells nothing reliable; so each HTTP upstream's HTTP client has a response
hook, :func:`hear_response`, and the requests sent within a :func:`watching` block are told
apart from every other of the connection's: the answers to the GETs (the SDK resumes a cut
answer with one, and a restarted server refuses it with a 404), to the other tasks' calls,
to the proxy's own checks. Only the status of a request's own POST says the server did not
run it: a call whose answer was cut may have run, whatever the resumption got.

The hook knows the block by a context variable: the SDK sends each request's POST from a
task that runs in a copy of its sender's context. A 400 may also be a server's answer to a
request it found wrong in a live session (the SDKs send a JSON-RPC error at 400 for invalid
params): so a 400 counts as a lost session only when its body is not a JSON-RPC error (the
1.x Python SDK's plain text) or is one that names the session (the TypeScript SDK's
examples: "No valid session ID provided"). A JSON-RPC error that answers the request by its
own id, at either status, was written by a server that took the request, maybe by the tool
itself ("session limit reached" from a tool that starts browser sessions): it counts only
when it says the session is unknown in the words servers use for that (``_REFUSAL``); a
refusal made before the request was read has no id, or one of its own. Any other 400 is
passed on as the server's answer, and the call is never sent again: a listing after it may
fail for its own reasons (a busy gateway), which made the proxy start a new session and run
the call twice. Told the session
may be lost, the proxy still first asks the old connection for its tools
(:meth:`~toolgate.integrations.mcp.serve._Serving.reconnect`) and starts a new session only
if that fails too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import httpx2
from mcp.client.streamable_http import MCP_SESSION_ID

__all__ = ["SentRequests", "hear_response", "watching"]

# The status of a request in a session the server does not know, as the spec has it; servers
# on the 1.x Python SDK and the TypeScript SDK's examples answer 400 (:func:`_session_lost`).
_UNKNOWN_SESSION = 404
_BAD_REQUEST = 400

# Words by which a 400's JSON-RPC error says the server knows no such session: the TypeScript
# SDK's "No valid session ID provided" and "Server not initialized" (a restarted server).
_SESSION_WORDS = ("session", "not initialized")

# How an error that answers the request by its id says the session is unknown: the SDKs'
# "No valid session ID provided", "Missing session ID", "Invalid or expired session ID",
# "Mcp-Session-Id header is required", "Session not found", "Session has been terminated",
# "Server not initialized"; not a tool's own words about sessions of its own.
_REFUSAL = re.compile(
    r"session[ _-]?id\b|session not found|unknown session|session (?:has been |was )?"
    r"(?:terminated|expired)|not initialized",
    re.IGNORECASE,
)


class SentRequests:
    """How the servers answered the JSON-RPC requests sent within one :func:`watching`
    block (by its task, and the tasks the SDK starts to send them)."""

    def __init__(self) -> None:
        """Nothing sent yet."""
        self._refused: dict[str, bool] = {}  # by method: whether the last one was refused

    def forgotten(self, method: str | None = None) -> bool:
        """Whether the last request of ``method`` (of any method: ``None``) was refused as
        one of a session its server does not know: the server did not run it."""
        if method is None:
            return any(self._refused.values())
        return self._refused.get(method, False)

    def note(self, method: str, refused: bool) -> None:
        """Note the answer to a request of ``method``: ``refused`` as of a lost session."""
        self._refused[method] = refused


_sent: ContextVar[SentRequests | None] = ContextVar("toolgate_mcp_sent", default=None)


@contextmanager
def watching() -> Iterator[SentRequests]:
    """The answers to the requests sent within the block, as they come."""
    sent = SentRequests()
    token = _sent.set(sent)
    try:
        yield sent
    finally:
        _sent.reset(token)


async def hear_response(response: httpx2.Response) -> None:
    """An ``httpx2`` response hook: note the answer to a JSON-RPC request's POST in a
    session, sent within a :func:`watching` block."""
    sent = _sent.get()
    request = response.request
    if sent is None or request.method != "POST" or MCP_SESSION_ID not in request.headers:
        return  # not watched; a GET or DELETE; no session yet (the era probe, the handshake)
    posted = _posted_request(request)
    if posted is not None:
        method, request_id = posted
        sent.note(method, await _session_lost(response, request_id))


async def _session_lost(response: httpx2.Response, request_id: object) -> bool:
    """Whether ``response`` refuses the request ``request_id`` as one of a session the
    server does not know: a 404, or a 400 whose body is no JSON-RPC error naming something
    else; either, when its JSON-RPC error answers the request by its id, only if it says so
    in the words of such a refusal."""
    if response.status_code not in (_UNKNOWN_SESSION, _BAD_REQUEST):
        return False
    error = await _json_rpc_error(response)
    if error is None:
        return True
    answered, message = error
    if answered == request_id:  # the server took the request: its words must say it
        return _REFUSAL.search(message) is not None
    lowered = message.lower()
    return response.status_code == _UNKNOWN_SESSION or any(w in lowered for w in _SESSION_WORDS)


async def _json_rpc_error(response: httpx2.Response) -> tuple[object, str] | None:
    """The id and message of the JSON-RPC error in ``response``'s JSON body; ``None`` for
    any other body. Read as the SDK reads it next (the body is kept for it): only a JSON
    one."""
    if not response.headers.get("content-type", "").lower().startswith("application/json"):
        return None
    try:
        body = json.loads(await response.aread())
    except (httpx2.HTTPError, httpx2.StreamError, ValueError):  # cut off, not JSON
        return None
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return (body.get("id"), message) if isinstance(message, str) else None


def _posted_request(request: httpx2.Request) -> tuple[str, object] | None:
    """The method and id of the JSON-RPC request ``request`` posts; ``None`` for a
    notification, an answer to the server's own request, or a body that is none of these."""
    try:
        message = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        return None
    if not isinstance(message, dict) or message.get("id") is None:
        return None
    method = message.get("method")
    return (method, message["id"]) if isinstance(method, str) else None
