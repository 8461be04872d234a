"""What toolgate's HTTP servers, the gateway and the MCP proxy, share at the ASGI level: the
types of an app and of what it is called with, and a JSON answer."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

__all__ = ["App", "Message", "Receive", "Scope", "Send", "send_json"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


async def send_json(
    send: Send, status: int, body: Any, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """Answer with ``body`` as JSON, with ``status`` and ``headers`` besides the type and
    length."""
    data = json.dumps(body).encode()
    head = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(data)),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": data})
