"""Checking the model's tool calls and forwarding those that pass to the server that has
the tool, under the tool's own name; a refused call becomes an error result for the model."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import anyio.to_thread
from mcp.types import CallToolResult

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.scopes import pattern_list
from toolgate.catalog.tool import Tool
from toolgate.errors import CatalogError
from toolgate.formats.calls import call_name
from toolgate.integrations.mcp.answers import error_result
from toolgate.integrations.mcp.catalogs import ServerCatalogs
from toolgate.integrations.mcp.listing import McpClient, plain
from toolgate.json_limits import json_problem
from toolgate.promotion.active_set import tools_in_scope
from toolgate.routing.router import Router
from toolgate.telemetry.recorder import VerdictReport
from toolgate.verify import Verdict

__all__ = ["CallForwarder", "CallOutcome", "UpstreamCall", "verified"]

#: ``upstream_call(server, client, name, arguments)``: the server's answer to a checked call.
UpstreamCall = Callable[[str, McpClient, str, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class CallOutcome:
    """What became of one tool call.

    Attributes:
        result: the ``CallToolResult`` to hand back to the model: the server's, or an error
            (``is_error``) saying why the call was refused, or the tools a ``tool_search``
            call found.
        verdict: the check of the call against the turn's tools.
        server: the server the call went to; ``None`` when it went to none.
        found: tool ids promised to the model for its next turn: those a ``tool_search``
            call found, or a real tool it asked for that the turn did not offer (the refusal
            tells it to ask again). Pass them as ``include=`` to the next
            :meth:`McpRouter.tools`, which still applies the state and allow / deny lists.
    """

    result: CallToolResult
    verdict: Verdict
    server: str | None = None
    found: tuple[str, ...] = ()

    def __hash__(self) -> int:
        # Not of the result, a pydantic model, which has no hash.
        return hash((self.verdict, self.server, self.found))

    @property
    def forwarded(self) -> bool:
        """Whether the call reached a server."""
        return self.server is not None


async def verified(
    router: Router, tool_call: object, offered: Any, turn_id: str = ""
) -> tuple[Verdict, VerdictReport]:
    """``router``'s check of ``tool_call`` against ``offered`` (:meth:`Router.checked`) and
    what reports it, in a worker thread: checking a call walks its arguments in Python (up
    to ``json_limits.MAX_VALUES`` of them, a tenth of a second or more), which on the event
    loop holds every other session of a proxy. Nothing is reported here: the caller reports
    the verdict the call ends with."""
    check = partial(router.checked, tool_call, offered, turn_id=turn_id)
    return await anyio.to_thread.run_sync(check)


class CallForwarder:
    """Forwards checked calls to the servers of ``catalogs``, checking each again against
    the tool as it is now when the server's tools changed since the call was checked."""

    def __init__(self, catalogs: ServerCatalogs) -> None:
        """See the class docstring."""
        self._catalogs = catalogs
        self._scope_ids: tuple[Any, frozenset[str]] | None = None

    async def turn_call(
        self, router: Router, verdict: Verdict, scope: Mapping[str, Any], report: VerdictReport
    ) -> CallOutcome:
        """A call checked against a turn's tools by ``router``, forwarded or refused (and
        ``report``ed). A real tool the turn did not offer is promised for the next turn if
        the host's ``scope`` admits it: otherwise, asking again would not help."""
        outcome = await self.forward(router, verdict, report)
        if outcome.found and not await self._admitted(outcome.found[0], scope):
            shut = replace(
                outcome.verdict,
                message=f"Tool {verdict.name!r} is not available. Use one of the available tools.",
            )
            return CallOutcome(error_result(shut), shut)
        return outcome

    async def any_call(
        self,
        tool_call: object,
        *,
        allow: Iterable[str] | None,
        deny: Iterable[str] | None,
        turn_id: str,
        upstream_call: UpstreamCall | None,
    ) -> CallOutcome:
        """A call of any tool of the current catalog that ``allow`` / ``deny`` admit,
        checked and forwarded."""
        router = self._catalogs.router
        catalog = router.catalog
        allow, deny = pattern_list(allow), pattern_list(deny)
        # Checked against the tools the name can mean, not the whole catalog, whose list of
        # names a verdict would build on every call; only a name no admitted tool has (an
        # error, and its closest name) is looked for among them all.
        name = call_name(tool_call)  # the arguments are read once, by verify
        meant = {catalog.get(name), catalog.get_exposed(name, ignore_case=True)}
        scope = None if allow is None and deny is None else self._in_scope(catalog, allow, deny)
        offered = [
            tool.id
            for tool in (*meant, *catalog.with_name(name))
            if tool is not None and (scope is None or tool.id in scope)
        ]
        if not offered:
            offered = list(catalog.ids if scope is None else sorted(scope))
        verdict, report = await verified(router, tool_call, offered, turn_id)
        return await self.forward(router, verdict, report, upstream_call)

    async def forward(
        self,
        router: Router,
        verdict: Verdict,
        report: VerdictReport,
        upstream_call: UpstreamCall | None = None,
    ) -> CallOutcome:
        """The server's answer to a verified call (made by ``upstream_call`` if given), or
        the error when the check failed; the verdict the call ends with is ``report``ed
        before it is sent.

        ``router`` resolved the call; the current router decides whether the tool is still
        there and what its schema is now.
        """
        checked = await self._checked(router, verdict)
        if isinstance(checked, CallOutcome):
            report(checked.verdict)
            return checked
        tool, client, arguments = checked
        report(verdict)
        if upstream_call is None:
            result = await client.call_tool(tool.name, arguments)
        else:
            result = await upstream_call(tool.server, client, tool.name, arguments)
        return CallOutcome(_as_call_result(result, tool.server), verdict, server=tool.server)

    async def _checked(
        self, router: Router, verdict: Verdict
    ) -> CallOutcome | tuple[Tool, McpClient, dict[str, Any]]:
        """The refusal of a call, or what sends one that passes: its tool as it is now, its
        server's client and its arguments."""
        if not verdict.ok:
            # A real tool the turn did not offer: promised for the next turn, as the
            # refusal tells the model to ask again.
            asked = verdict.error == "tool_not_available" and verdict.tool_id is not None
            found = (str(verdict.tool_id),) if asked else ()
            return CallOutcome(error_result(verdict), verdict, found=found)
        tool = router.catalog[str(verdict.tool_id)]
        client = self._catalogs.clients.get(tool.server)
        if client is None:
            return _refused(verdict, tool, f"its server {tool.server!r} was disconnected")
        current = self._catalogs.router
        if current is not router:
            now = current.catalog.get(tool.id)
            if now is None:
                return _refused(verdict, tool, f"its server {tool.server!r} removed it")
            if now.fingerprint != tool.fingerprint:
                call = {"name": now.exposed_name, "arguments": verdict.arguments or {}}
                recheck, _ = await verified(current, call, [now.id])
                if not recheck.ok:
                    recheck = replace(recheck, call_id=verdict.call_id, name=verdict.name)
                    return CallOutcome(error_result(recheck), recheck)
                tool = now
        arguments = dict(verdict.arguments or {})
        # Walked again, strictly, in a worker thread as verify was.
        if problem := await anyio.to_thread.run_sync(json_problem, arguments):
            return _unsendable(verdict, tool, problem)
        return tool, client, arguments

    async def _admitted(self, tool_id: str, scope: Mapping[str, Any]) -> bool:
        """Whether the state and the allow / deny lists of ``scope`` let ``tool_id`` in."""
        router = self._catalogs.router
        if tool_id not in router.catalog:
            return False
        # Routed unreported (a shallow copy shares the index): a check of toolgate's own, no
        # route the model was shown; reported, UsageStats counted the tool as routed.
        quiet = copy.copy(router)
        quiet.telemetry = None
        check = partial(quiet.route, f"select:{tool_id}", **scope)
        return tool_id in (await anyio.to_thread.run_sync(check)).ids

    def _in_scope(
        self, catalog: Catalog, allow: tuple[str, ...] | None, deny: tuple[str, ...] | None
    ) -> frozenset[str]:
        """The ids of ``catalog`` that ``allow`` / ``deny`` admit, kept for the last scope
        asked (a proxy asks for the same one on every call)."""
        key = (catalog.version, allow, deny)
        if self._scope_ids is None or self._scope_ids[0] != key:
            admitted = frozenset(tool.id for tool in tools_in_scope(catalog, allow, deny))
            self._scope_ids = (key, admitted)
        return self._scope_ids[1]


def _refused(verdict: Verdict, tool: Tool, why: str) -> CallOutcome:
    """Refuse a call that passed the turn's check but whose tool is gone since."""
    gone = replace(
        verdict,
        ok=False,
        error="tool_not_available",
        message=f"Tool {tool.exposed_name!r} is gone: {why}. Use one of the available tools.",
        available=tuple(name for name in verdict.available if name != tool.exposed_name),
    )
    return CallOutcome(error_result(gone), gone)


def _unsendable(verdict: Verdict, tool: Tool, problem: str) -> CallOutcome:
    """Refuse a call whose arguments no JSON text holds: a lone surrogate fails the
    transport's encoding, which closes the server's connection (a restart, and the calls in
    flight cut off), and NaN would reach the server as null."""
    bad = replace(
        verdict,
        ok=False,
        error="invalid_arguments",
        message=f"Invalid arguments for {tool.exposed_name!r}: they hold {problem}, which "
        "cannot be sent to the server as JSON.",
    )
    return CallOutcome(error_result(bad), bad)


def _as_call_result(result: Any, server: str) -> CallToolResult:
    """The server's ``tools/call`` answer as a ``CallToolResult``; an answer that is not one
    is the server's fault, reported as a :class:`CatalogError` naming it."""
    if isinstance(result, CallToolResult):
        return result
    what = f"MCP server {server!r}: tools/call"
    try:
        return CallToolResult.model_validate(plain(result, what))
    except ValueError as exc:
        raise CatalogError(f"{what} returned no valid CallToolResult: {exc}") from None
