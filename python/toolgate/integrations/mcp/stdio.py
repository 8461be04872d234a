"""The SDK's stdio transport to an upstream server, with a bound on the line it reads.

The SDK's ``stdio_client`` reads a whole line of the server's stdout before anything can
check its size, and joins each piece it reads to the ones before (time quadratic in the
line): a broken or hostile server that prints gigabytes with no newline held the proxy's
memory and a core, where ``maxResultBytes`` was meant to bound an answer. This transport is
the SDK's, but for its reader (:class:`_LineReader`), which holds at most ``max_line`` bytes
of one line. The rest of a longer line is read and dropped; once it ends, the request it
answers, found by its ``id`` at the start or the end of the line (where the SDKs write it),
gets an error saying so, and the connection goes on. A line too long that is the server's
own request (``"method"`` among its first members) answers nothing of the client's, whose
ids are counted apart: the server is sent the error instead (a notification is dropped),
since taken for an answer it failed the client's request of the same id. A line too long
whose id cannot be found answers no one: the connection is closed, so that no request waits
for it forever.
Spawning and stopping the server are the SDK's own (its grace after stdin closes, then the
kill of its process tree).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
from mcp.client._transport import TransportStreams
from mcp.client.stdio import (
    _WRITER_FLUSH_TIMEOUT,
    StdioServerParameters,
    _aclose_all,
    _create_platform_compatible_process,
    _drain_stdout,
    _get_executable_command,
    _parse_line,
    _stop_server_process,
    get_default_environment,
)
from mcp.os.win32.utilities import ServerProcess
from mcp.shared.message import SessionMessage
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST, ErrorData, JSONRPCError

from toolgate.integrations.mcp.answers import dropped_answer

__all__ = ["bounded_stdio_client"]

logger = logging.getLogger(__name__)

# How much of each end of a line too long is kept, to find the id of the request it answers.
_ENDS = 512
_ID = rb'(-?\d+|"(?:[^"\\]|\\.){0,200}")'
# The id as the first member (after "jsonrpc"), as pydantic writes it, or the last (before
# "jsonrpc" or not), as JavaScript's JSON.stringify writes the TypeScript SDK's answers.
_HEAD_ID = re.compile(rb'\A\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID)
_TAIL_ID = re.compile(
    rb'[,{]\s*"id"\s*:\s*' + _ID + rb'\s*(?:,\s*"jsonrpc"\s*:\s*"2\.0"\s*)?\}\s*\Z'
)
# A request or notification of the server's own: "method" first, or after "jsonrpc" and "id".
_HEAD_METHOD = re.compile(
    rb'\A\s*\{\s*(?:"(?:jsonrpc|id)"\s*:\s*(?:-?\d+|"(?:[^"\\]|\\.){0,200}")\s*,\s*){0,2}'
    rb'"method"\s*:'
)


class _Overlong:
    """A line longer than the reader holds: its size, the id it carries (``None``: not
    found), and whether it is the server's own request or notification (``asks``) rather
    than the answer to a request of the client's."""

    def __init__(self, size: int, request_id: int | str | None, *, asks: bool = False) -> None:
        self.size, self.request_id, self.asks = size, request_id, asks


class _LineReader:
    """Splits a byte stream into lines, holding at most ``limit`` bytes of one line (linear
    time: pieces are joined once, when their line ends)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self._head: bytes | None = None  # set once the line is over the limit
        self._tail = b""

    def feed(self, chunk: bytes) -> list[bytes | _Overlong]:
        """The lines that ``chunk`` ends, in order."""
        lines: list[bytes | _Overlong] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._add(chunk[start:end])
            lines.append(self._end())
            start = end + 1
        self._add(chunk[start:])
        return lines

    def _add(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._head is not None:
            self._tail = (self._tail + piece[-_ENDS:])[-_ENDS:]
        elif self._size > self.limit:
            line = b"".join(self._parts) + piece
            self._head, self._tail = line[:_ENDS], line[-_ENDS:]
            self._parts = []
        else:
            self._parts.append(piece)

    def _end(self) -> bytes | _Overlong:
        head, size = self._head, self._size
        line = b"" if head is not None else b"".join(self._parts)
        found = None if head is None else _HEAD_ID.match(head) or _TAIL_ID.search(self._tail)
        self._parts, self._size, self._head, self._tail = [], 0, None, b""
        if head is None:
            return line
        request_id = json.loads(found.group(1)) if found else None
        return _Overlong(size, request_id, asks=_HEAD_METHOD.match(head) is not None)


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters, *, max_line: int, name: str = ""
) -> AsyncIterator[TransportStreams]:
    """``mcp.client.stdio.stdio_client(server)``, reading at most ``max_line`` bytes of one
    line of the server's (called ``name`` in what it logs): see the module docstring."""
    command = await _get_executable_command(server.command)
    process = await _create_platform_compatible_process(
        command=command,
        args=server.args,
        env=get_default_environment() | (server.env or {}),
        cwd=server.cwd,
    )
    # As the SDK's: no await until the task group is entered, or the process could leak.
    read_stream_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](
        0
    )
    write_stream, write_stream_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def stdout_reader() -> None:
        assert process.stdout, "Opened process is missing stdout"
        lines = _LineReader(max_line)
        try:
            async with read_stream_writer:
                try:
                    async for chunk in process.stdout:
                        for line in lines.feed(chunk):
                            if isinstance(line, _Overlong) and line.asks:
                                # In a task of its own: a server that writes on without
                                # reading its stdin would otherwise hold both sides waiting.
                                group.start_soon(_refuse, process, line, server, max_line, name)
                                continue
                            item = _message(line, server, max_line, name)
                            if item is None:  # no request can be told of that line
                                await read_stream_writer.aclose()  # before the drain below
                                return
                            await read_stream_writer.send(item)
                finally:
                    await _drain_stdout(process)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # our own shutdown, or the session gone: the read stream closes either way

    async def stdin_writer() -> None:
        assert process.stdin, "Opened process is missing stdin"
        try:
            async with write_stream_reader:
                async for item in write_stream_reader:
                    text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    data = (text + "\n").encode(server.encoding, server.encoding_error_handler)
                    await process.stdin.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_stream_writer.aclose()  # the session sees the connection end
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(_WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await _stop_server_process(process)
        await _aclose_all(read_stream, write_stream, read_stream_writer, write_stream_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):  # the server must be stopped whatever comes
                await shutdown()
            group.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()


async def _refuse(
    process: ServerProcess, line: _Overlong, server: StdioServerParameters, max_line: int, name: str
) -> None:
    """Answer the server's own request that came on ``line``, too long, with an error saying
    so (a notification, having no id, is only logged): the server's request would otherwise
    wait for ever, and with it, maybe, the client's call it asked in the course of."""
    logger.warning(
        "MCP server %r sent a request or notification of %s bytes, more than the %s the proxy"
        " reads: dropped",
        name,
        f"{line.size:,}",
        f"{max_line:,}",
    )
    if line.request_id is None:
        return
    message = (
        f"the request is {line.size:,} bytes, more than the {max_line:,} bytes the proxy reads "
        "of one message, so it was dropped"
    )
    error = ErrorData(code=INVALID_REQUEST, message=message)
    answer = JSONRPCError(jsonrpc="2.0", id=line.request_id, error=error)
    text = answer.model_dump_json(by_alias=True, exclude_unset=True)
    assert process.stdin, "Opened process is missing stdin"
    # Beside stdin_writer's sends: each send writes its whole line before it waits.
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        await process.stdin.send(
            (text + "\n").encode(server.encoding, server.encoding_error_handler)
        )


def _message(
    line: bytes | _Overlong, server: StdioServerParameters, max_line: int, name: str
) -> SessionMessage | Exception | None:
    """What the session reads for ``line``: the message, its parse error, the error for the
    request a line too long answers, or ``None`` when no request can be named (close)."""
    if not isinstance(line, _Overlong):
        try:
            text = line.decode(server.encoding, server.encoding_error_handler)
        except UnicodeDecodeError as exc:
            return exc
        return _parse_line(text)
    if line.request_id is None:
        logger.warning(
            "MCP server %r wrote a line of %s bytes, more than the %s the proxy reads, naming"
            " no request it answers: its connection is closed",
            name,
            f"{line.size:,}",
            f"{max_line:,}",
        )
        return None
    message = dropped_answer(name, max_line, line.size)
    error = ErrorData(code=INTERNAL_ERROR, message=message)
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=line.request_id, error=error))
