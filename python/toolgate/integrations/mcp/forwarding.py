"""Forwarding a call to the upstream server that has the tool, and the tool error the model
reads for each way that can fail: refused, server down, connection lost mid-call. A call
the server refused because it forgot the proxy's session is made again in a new one. A call
the server cannot run before the user opens a page (MCP 2025-11-25's
``URLElicitationRequiredError``) is that error for a client that can show the page, and a
tool error naming it for the model otherwise."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.types import (
    CallToolResult,
    ElicitRequestURLParams,
    InputRequiredResult,
)

from toolgate.catalog.tool import Tool
from toolgate.integrations.mcp.answers import json_size, not_answering, passed_on, text_result
from toolgate.integrations.mcp.in_flight import using
from toolgate.integrations.mcp.passthrough import Reconnect, connection_closed, reconnected
from toolgate.integrations.mcp.relay import InputRequired, RequestRelay, pages_named, pages_to_open
from toolgate.integrations.mcp.router import CallOutcome, McpRouter
from toolgate.integrations.mcp.sessions import watching
from toolgate.verify import Verdict

__all__ = ["Forwarder"]

logger = logging.getLogger(__name__)

#: ``result_limit(server)``: the most bytes of JSON an answer of ``server``'s may take.
ResultLimit = Callable[[str], int]


class Forwarder:
    """Calls of upstream tools made for the proxy's clients (see
    :class:`~toolgate.integrations.mcp.proxy.McpProxy` for ``allow``, ``deny``,
    ``reconnect`` and ``unavailable``). An answer larger than ``result_limit(server)``
    bytes of JSON is not passed on: the model gets a ``result_too_large`` error instead."""

    def __init__(
        self,
        router: McpRouter,
        *,
        allow: Sequence[str] | None,
        deny: Sequence[str] | None,
        reconnect: Reconnect | None,
        unavailable: Callable[[], Sequence[str]],
        result_limit: ResultLimit,
    ) -> None:
        """See the class docstring."""
        self.router = router
        self.allow, self.deny = allow, deny
        self.reconnect = reconnect
        self.unavailable = unavailable
        self.result_limit = result_limit

    async def forward(
        self, name: str, arguments: dict[str, Any], relay: RequestRelay | None, search: str
    ) -> tuple[CallToolResult | InputRequiredResult | MCPError, str, str]:
        """The answer to a call of the upstream tool ``name``, the server it is for (``""``:
        none) and how the call went: ``ok``, ``tool_error`` (the tool answered with an
        error), ``refused``, ``input_required``, ``too_large`` or ``failed``. The answer is
        an ``MCPError``, for the proxy to raise, when it is the server's
        ``URLElicitationRequiredError`` and ``relay``'s client takes it."""
        tool = self._tool(name)
        server = tool.server if tool is not None else ""
        if server and server in self.unavailable():  # being started again: no wait for it
            return _server_down(name, server), server, "failed"
        try:
            outcome = await self._call(name, arguments, relay)
        except InputRequired as asked:  # the client answers the tool's requests, and retries
            return self._bounded(name, server, passed_on(asked.result), "input_required")
        except _Interrupted as cut:
            return self._interrupted(name, cut.server, cut.restarted), server, "failed"
        except Exception as exc:  # the upstream server, its answer or its connection failed
            if isinstance(exc, MCPError) and (pages := pages_to_open(exc)):
                return _page_to_open(name, server, exc, pages, relay), server, "input_required"
            return self._failure(name, server, exc), server, "failed"
        if not outcome.verdict.ok:
            return _refusal(outcome.verdict, search, self.unavailable()), server, "refused"
        result = passed_on(outcome.result)
        how = "tool_error" if result.is_error else "ok"
        return self._bounded(name, outcome.server or server, result, how)

    def _bounded(
        self, name: str, server: str, result: CallToolResult | InputRequiredResult, how: str
    ) -> tuple[CallToolResult | InputRequiredResult, str, str]:
        """``result`` of ``server``'s tool ``name`` as :meth:`forward` returns it, or, when
        it is larger than the server's limit, the ``result_too_large`` error in its place:
        a broken or hostile server could otherwise send the model, and every client's
        memory, hundreds of megabytes."""
        limit = self.result_limit(server)
        size = json_size(result)
        if size <= limit:
            return result, server, how
        logger.warning(
            "MCP server %r: the result of %r is %s bytes of JSON, over its limit of %s; "
            "the model is sent an error in its place",
            server,
            name,
            f"{size:,}",
            f"{limit:,}",
        )
        return _too_large(name, server, size, limit), server, "too_large"

    def _tool(self, name: str) -> Tool | None:
        """The tool ``name`` calls, by its exposed name or its id."""
        catalog = self.router.router.catalog
        return catalog.get(name) or catalog.get_exposed(name)

    def _failure(self, name: str, server: str, exc: Exception) -> CallToolResult:
        """The tool error for a call that failed upstream: the server is not answering (and
        the model may retry later), or what the server or its connection raised."""
        if server and server in self.unavailable():
            return _server_down(name, server)
        failure = {"error": "upstream_error", "message": f"Calling {name!r} failed: {_why(exc)}"}
        return text_result(json.dumps(failure), is_error=True)

    def _interrupted(self, name: str, server: str, restarted: bool) -> CallToolResult:
        """The tool error for a call cut off by its server's death, and not sent again."""
        now = (
            "The server was started again."
            if restarted
            else f"{not_answering([server], start='Server')} now; retry later."
        )
        message = (
            f"Calling {name!r} was interrupted: the connection to server {server!r} closed "
            "before it answered, so the call may or may not have run. It was not sent again, "
            "since the tool is not marked read-only or idempotent: check whether it took "
            f"effect before calling it again. {now}"
        )
        body = {"error": "interrupted", "message": message, "servers": [server]}
        return text_result(json.dumps(body), is_error=True)

    async def _call(
        self, name: str, arguments: dict[str, Any], relay: RequestRelay | None
    ) -> CallOutcome:
        """``call_any``, made once more after a reconnection if the server had died while
        the call was under way and the tool says that running it twice is harmless (its
        ``readOnlyHint`` or ``idempotentHint``), else :class:`_Interrupted`; or if the
        server refused the call's own ``tools/call`` as one of a session it had forgotten,
        whatever the tool: it did not run the call. Another request's refusal (the GET
        resuming the call's cut answer, another call's) says nothing of this call's."""
        forward = partial(
            self.router.call_any,
            {"name": name, "arguments": arguments},
            allow=self.allow,
            deny=self.deny,
            upstream_call=relay.call_tool if relay else None,
        )
        tool = self._tool(name)
        connected = tool is not None and tool.server in self.router.servers
        used = self.router.client(tool.server) if tool and connected else None
        try:
            with watching() as sent, using(used):
                return await forward()
        except MCPError as exc:
            if tool is None or used is None:
                raise
            forgotten = sent.forgotten("tools/call")
            if not connection_closed(exc) and not forgotten:
                raise
            restarted = await reconnected(self.reconnect, tool.server, used, exc, forgotten)
            died = restarted or tool.server in self.unavailable()
            if died and not forgotten and not _resendable(tool):
                raise _Interrupted(tool.server, restarted) from exc
            if not restarted:
                raise
        with using(self.router.client(tool.server)):
            return await forward()


def _page_to_open(
    name: str,
    server: str,
    exc: MCPError,
    pages: Sequence[ElicitRequestURLParams],
    relay: RequestRelay | None,
) -> CallToolResult | MCPError:
    """A server's ``URLElicitationRequiredError`` for the call of ``name``: as it is for a
    client that takes URL-mode elicitations (it shows the page, and calls again once the
    user is done with it); else a tool error that names the pages, for the model to give
    the user. As a plain failure, the model was told only "requires more information", and
    the tool could never be used: the proxy had said for its client that it takes them."""
    if relay is not None and relay.pass_pages(server, pages):
        return MCPError(exc.code, exc.message, exc.data)
    each, urls = pages_named(pages)
    message = (
        f"Calling {name!r} needs the user to open a page first: ask the user to open it and "
        f"finish there (the client cannot show it), then call the tool again. {each}"
    )
    body = {
        "error": "url_elicitation_required",
        "message": message,
        "servers": [server],
        "urls": urls,
    }
    return text_result(json.dumps(body, ensure_ascii=False), is_error=True)


def _refusal(verdict: Verdict, search: str, down: Sequence[str]) -> CallToolResult:
    """A refused call, short: any tool may be called through the proxy, so the list of
    available ones a turn's refusal carries would be the whole catalog. A name no tool has
    while servers are ``down`` may be one of theirs: the refusal says so, as a failure
    that may pass."""
    body: dict[str, Any] = {"error": verdict.error}
    hint = f" Did you mean {verdict.closest!r}?" if verdict.closest else ""
    if verdict.error == "unknown_tool" and down:
        body["error"] = "server_unavailable"
        body["message"] = (
            f"No server answering now has a tool {verdict.name!r}.{hint} "
            f"{not_answering(down, start='Server')}, and may have it: retry later, or find "
            f"tools with {search}."
        )
        body["servers"] = list(down)
    elif verdict.error == "invalid_arguments":
        body["message"] = verdict.message
    elif verdict.error == "tool_not_available":  # shut out by the proxy's allow / deny
        body["message"] = f"Tool {verdict.name!r} is not available.{hint} Find tools with {search}."
    else:
        body["message"] = f"There is no tool {verdict.name!r}.{hint} Find tools with {search}."
    if verdict.closest:
        body["closest"] = verdict.closest
    if verdict.path:
        body["path"] = verdict.path
    return text_result(json.dumps(body, ensure_ascii=False), is_error=True)


class _Interrupted(Exception):
    """A call whose server's connection closed before it answered, not to be sent again."""

    def __init__(self, server: str, restarted: bool) -> None:
        super().__init__(f"the connection to {server!r} closed during the call")
        self.server = server
        self.restarted = restarted


def _resendable(tool: Tool) -> bool:
    """Whether ``tool`` may be called twice for one call: its server marks it read-only or
    idempotent (MCP tool annotations, hints a server gives about its own tools)."""
    hints = tool.annotations
    return hints.get("readOnlyHint") is True or hints.get("idempotentHint") is True


# The most of a failure's text the model is shown: the server's own error says what went
# wrong; anything else (a transport's or a parser's) is named in its first line, not dumped
# with the bytes it could not read.
_MAX_ERROR_CHARS = 1000
_MAX_FAILURE_CHARS = 300


def _why(exc: Exception) -> str:
    """What a failed call's error says, within bounds: an MCP error's message (the server
    wrote it for its caller), any other exception's first line."""
    if isinstance(exc, MCPError):
        return _cut(str(exc), _MAX_ERROR_CHARS)
    lines = str(exc).splitlines()
    named = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return _cut(named, _MAX_FAILURE_CHARS)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


def _too_large(name: str, server: str, size: int, limit: int) -> CallToolResult:
    """The tool error for a result of ``size`` bytes, over ``server``'s ``limit``."""
    message = (
        f"The result of {name!r} from server {server!r} is {size:,} bytes, more than the "
        f"{limit:,} bytes the proxy passes on, so it was dropped. The call reached the "
        "server, which may have acted on it: only its answer is missing. If the tool can, "
        "call it again asking for less (a narrower query, fewer items, one page)."
    )
    body = {
        "error": "result_too_large",
        "message": message,
        "servers": [server],
        "bytes": size,
        "limit": limit,
    }
    return text_result(json.dumps(body), is_error=True)


def _server_down(name: str, server: str) -> CallToolResult:
    """The tool error for a call to ``name`` of ``server``, which is not answering."""
    message = f"Calling {name!r} failed: {not_answering([server])}; retry later."
    body = {"error": "server_unavailable", "message": message, "servers": [server]}
    return text_result(json.dumps(body), is_error=True)
