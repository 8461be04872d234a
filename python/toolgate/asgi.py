"""What toolgate's HTTP servers, the gateway and the MCP proxy, share at the ASGI level: the
types of an app and of what it is called with, a JSON answer, the reading of a bearer
token and of a secret from the environment, and the log filters for requests cut as the
server stops and for answers cut as their source broke off."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from toolgate.errors import InvalidInputError, ToolgateError

__all__ = [
    "AnswerCut",
    "App",
    "Message",
    "NotCancelled",
    "NotCut",
    "Receive",
    "Scope",
    "Send",
    "bearer_token",
    "is_secret",
    "secret_from_env",
    "send_json",
]

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


def bearer_token(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The token of a request's ``Authorization: Bearer <token>``, from its (ASGI) headers:
    the scheme in any case, as RFC 7235 has it, spaces around the token ignored. None
    without one, with another scheme, and with two ``Authorization`` headers (which of
    them counts is not for a server to guess).

    >>> bearer_token([(b"authorization", b"bearer  s3cret ")])
    b's3cret'
    """
    given = [value for name, value in headers if name.lower() == b"authorization"]
    if len(given) != 1:
        return None
    scheme, _, token = given[0].strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return token.strip() or None


def is_secret(offered: bytes | None, secret: bytes) -> bool:
    """Whether ``offered`` is ``secret``, compared in constant time, so timing tells nothing
    of the secret; nothing offered (``None``, empty) is not."""
    if not offered:
        return False
    return hmac.compare_digest(offered, secret)


def secret_from_env(variable: str, where: str) -> str:
    """The secret (a token, a key) in the environment variable ``variable``, which the setting
    or option ``where`` names, without surrounding whitespace: a secret file's last newline (a
    Kubernetes secret made ``--from-file`` keeps it) cannot go in a header, so every client
    was refused, or every upstream call failed. An :class:`InvalidInputError` naming the
    variable, never its value, when it is unset, blank, or holds a control character."""
    value = os.environ.get(variable)
    if not value:
        raise InvalidInputError(f"{where}: {variable} is not set")
    secret = value.strip()
    if not secret:
        raise InvalidInputError(f"{where}: {variable} holds only whitespace")
    if any(ord(char) < 32 or ord(char) == 127 for char in secret):
        raise InvalidInputError(
            f"{where}: {variable} holds a control character, which no HTTP header can carry"
        )
    return secret


class NotCancelled(logging.Filter):
    """Lets through the log records that are not about a task's cancellation. uvicorn
    cancels a request still running when its graceful shutdown ends (having said so in one
    line), and logs each one's ``CancelledError`` as an error with a traceback: cut as it
    must be, it is no error."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is about something other than a task's cancellation."""
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, asyncio.CancelledError)


class AnswerCut(ToolgateError):
    """Raised to the server by an app whose answer, begun, cannot be finished (its source, an
    upstream, broke off): the server then closes the client's connection short of the
    answer's end, the one way ASGI has to tell a cut answer from a whole one. The app logs
    why before it raises."""


class NotCut(logging.Filter):
    """Lets through the log records that are not about an :class:`AnswerCut`: the server logs
    each as an error with a traceback, where the app has said why in one line already."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether ``record`` is about something other than an answer cut."""
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, AnswerCut)
