"""The SDK's stdio transport for the proxy's own client, answering the lines that are no MCP
message.

The SDK's ``stdio_server`` drops a line it cannot read as one message: invalid JSON, a batch,
a request whose id is null, fractional or a boolean (it reads such a request as a
notification, and a notification gets no answer), or an object that is no JSON-RPC 2.0
message. The client was never answered and waited for ever. Here each such line is answered
as JSON-RPC 2.0 wants: a parse error (-32700) or an invalid request (-32600), with the
request's id when it has one that can be an id, else ``null``. A batch is refused as a whole:
MCP 2025-06-18 removed them, and the SDK takes none on either transport (2025-03-26, which
had them, is served without). A blank line is skipped. A malformed answer to a request of the
proxy's is read as an error answering that request, which would otherwise wait until it
times out.

The transport is the SDK's (its ``stdin`` argument takes the lines it reads), but for
claiming stdin, which it does only when it opens stdin itself: the same claim is made here,
so that nothing else in the process reads the client's messages.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from io import TextIOWrapper
from typing import Any, BinaryIO, cast

import anyio
import pydantic_core
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

__all__ = ["checked_line", "checked_stdio_server", "claimed_stdin", "refusal"]

# How much of a parse error's own text is kept in its answer.
_MAX_REASON = 200


@asynccontextmanager
async def checked_stdio_server(
    stdin: anyio.AsyncFile[str] | None = None,
) -> AsyncIterator[tuple[Any, Any]]:
    """``mcp.server.stdio.stdio_server()``, answering the lines that are no MCP message (see
    the module docstring); ``stdin``: read it instead of the process's stdin (tests)."""
    release = None
    if stdin is None:
        buffer, release = claimed_stdin()
        stdin = anyio.wrap_file(_Unowned(buffer, encoding="utf-8", errors="replace"))
    # Unbuffered: a client that floods such lines and reads nothing is not read further.
    refused, refusals = anyio.create_memory_object_stream[JSONRPCError](0)
    try:
        # The SDK only iterates its stdin, line by line.
        lines = cast("anyio.AsyncFile[str]", _Checked(stdin, refused))
        async with stdio_server(stdin=lines) as (read, write), anyio.create_task_group() as group:
            group.start_soon(_answer, refusals, write)
            yield read, write
            group.cancel_scope.cancel()
    finally:
        refused.close()
        refusals.close()
        if release is not None:
            release()


def claimed_stdin() -> tuple[BinaryIO, Callable[[], None] | None]:
    """The process's stdin, claimed as the SDK's ``stdio_server`` claims it (fd 0 moved to a
    private descriptor, the null device put in its place), and what releases it. The claim
    is the SDK's private ``_claim_fd`` (mcp 2.3), imported here: a 2.x release without it
    leaves stdin read in place, as the SDK does when it cannot claim it, rather than failing
    to load the proxy's transports."""
    try:
        from mcp.server.stdio import _claim_fd, _open_stdin_diversion
    except ImportError:
        return sys.stdin.buffer, None
    buffer, release = _claim_fd(0, sys.stdin, "rb", _open_stdin_diversion)
    return buffer, release


class _Unowned(TextIOWrapper):
    """A text layer whose close leaves its buffer open: the buffer is the claim's, or the
    process's own stdin (the SDK's ``_UnownedTextWrapper``)."""

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.detach()


class _Checked:
    """The lines of ``stdin`` that are MCP messages, for the SDK to read; each other line's
    answer goes to ``refused``."""

    def __init__(self, stdin: anyio.AsyncFile[str], refused: MemoryObjectSendStream[JSONRPCError]):
        self._stdin, self._refused = stdin, refused

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._stdin:
            if not line.strip():
                continue
            read = checked_line(line)
            if isinstance(read, str):
                yield read
                continue
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                await self._refused.send(read)


async def _answer(refusals: MemoryObjectReceiveStream[JSONRPCError], write: Any) -> None:
    """Write each refusal to the client, until the session's write stream closes."""
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        async for answer in refusals:
            await write.send(SessionMessage(answer))


def checked_line(line: str) -> str | JSONRPCError:
    """What the SDK is to read for the client's ``line``: the line, or for an answer to a
    request of the proxy's that is no JSON-RPC answer, an error answering that request
    (the SDK would drop it, and the request would wait until it times out: an upstream's
    elicitation passed on, 10 minutes); or the error to answer the client with
    (:func:`refusal`)."""
    refused = refusal(line)
    if refused is not None:
        return refused
    value = pydantic_core.from_json(line)  # an object, as refusal found
    if "method" in value or not _is_id(value.get("id")) or _is_message(value):
        return line
    why = 'the proxy\'s client answered with no JSON-RPC answer (a "result" object, or an'
    error = _error(value["id"], INTERNAL_ERROR, f'{why} "error" with a code and a message)')
    return error.model_dump_json(by_alias=True, exclude_unset=True)


def refusal(line: str) -> JSONRPCError | None:
    """The error answering ``line`` when it is no MCP message the client awaits an answer
    to, or ``None`` when it is to be read as it is."""
    try:
        value = pydantic_core.from_json(line)
    except ValueError as exc:
        return _error(None, PARSE_ERROR, f"Parse error: {str(exc)[:_MAX_REASON]}")
    if isinstance(value, list):
        batch = "Invalid Request: a batch is not taken (MCP has none since 2025-06-18)"
        return _error(None, INVALID_REQUEST, f"{batch}; send each message on a line of its own")
    if not isinstance(value, dict):
        return _error(None, INVALID_REQUEST, "Invalid Request: a message is a JSON object")
    has_id, request_id = "id" in value, value.get("id")
    if "method" not in value and ("result" in value or "error" in value):
        return None  # an answer to the proxy: a broken one is the SDK's to drop
    if has_id and not _is_id(request_id) and not _null_id_notification(value):
        # The SDK reads it as a notification, which is never answered.
        return _error(None, INVALID_REQUEST, "Invalid Request: an id is a string or an integer")
    if not _is_message(value):
        return _error(
            request_id if has_id else None,
            INVALID_REQUEST,
            'Invalid Request: not a JSON-RPC 2.0 message ("jsonrpc": "2.0", a string '
            '"method", "params" an object if given)',
        )
    return None


def _is_message(value: object) -> bool:
    try:
        jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError:
        return False
    return True


def _null_id_notification(value: dict[str, Any]) -> bool:
    """Whether ``value`` is a notification spelled as JSON-RPC 1.0 had it, with ``"id":
    null``: the SDK reads it as the notification it is, and its client awaits no answer
    (refused, a client's ``notifications/initialized`` was lost). MCP's notifications are
    the methods under ``notifications/``."""
    method = value.get("method")
    return value["id"] is None and isinstance(method, str) and method.startswith("notifications/")


def _is_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _error(request_id: str | int | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))
