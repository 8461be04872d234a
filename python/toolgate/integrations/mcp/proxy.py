"""An MCP server in front of other MCP servers, for clients that send every tool to the model.

A client connected to the proxy (a desktop app, an IDE, an agent framework: anything that
speaks MCP) lists two tools, and the upstream tools pinned with ``overrides`` (the
:class:`~toolgate.integrations.mcp.McpRouter`'s; a config file's, for ``toolgate
mcp-proxy``), in place of every upstream server's tools:

- ``search_tools(query)``: the tools routed for ``query`` (words, ``select:a,b`` or
  ``+term``), each with its description and full input schema;
- ``call_tool(name, arguments)``: checks the call (a known tool, arguments valid against its
  schema) and forwards it to the upstream server that has the tool, under its own name.

So a model that would have been sent a few hundred schemas on every turn is sent two, and
loads the few it needs by searching, the pattern of Claude Code's ToolSearch. The proxy keeps
no state per client, so it serves many clients at once, on either protocol era. Upstream
servers are listed once and again when they say their tools changed; only changed tools are
embedded again (:class:`~toolgate.integrations.mcp.McpRouter` does the work).

``toolgate mcp-proxy --config servers.json`` runs it over stdio in front of the servers of an
MCP client configuration (:mod:`toolgate.integrations.mcp.serve`).

Upstream prompts, resources and their completions are passed through as they are
(:mod:`toolgate.integrations.mcp.passthrough`), and so are each upstream's instructions and
its notices that its tools, prompts or resources changed (:meth:`McpProxy.heard`): clients
on the 2026-07-28 protocol hear them on their ``subscriptions/listen`` stream, earlier ones
as ``notifications/*/list_changed``. A call's progress and the upstream's requests for input
(sampling, elicitation) reach the client that made it
(:mod:`toolgate.integrations.mcp.relay`), while getting a prompt or reading a resource too
(but for a 2026-07-28 client, who would have to be sent an ``InputRequiredResult`` for it).
Not passed through: resource subscriptions and upstream log messages.
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ServerEvent,
    ToolsListChanged,
)
from mcp.types import (
    INTERNAL_ERROR,
    CallToolRequestParams,
    CallToolResult,
    CompleteRequestParams,
    CompleteResult,
    ElicitCompleteNotification,
    GetPromptRequestParams,
    GetPromptResult,
    InputRequiredResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    NotificationParams,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    ServerCapabilities,
)
from mcp.types import Tool as McpTool
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from toolgate._toolgate import __version__
from toolgate.arguments import check_count
from toolgate.catalog.scopes import pattern_list
from toolgate.catalog.tool import Tool
from toolgate.errors import InvalidInputError, ToolgateError
from toolgate.formats.mcp import export
from toolgate.integrations.mcp.answers import (
    MAX_RESULT_BYTES,
    MIN_RESULT_BYTES,
    not_answering,
    unknown_names_note,
)
from toolgate.integrations.mcp.forwarding import Forwarder
from toolgate.integrations.mcp.meta_tools import (
    CALL,
    SEARCH,
    call_tool_listing,
    invalid_arguments,
    meta_names,
    search_result,
    search_tool_listing,
    shadowed_tool,
    unwrap_call,
)
from toolgate.integrations.mcp.metrics import ProxyMetrics
from toolgate.integrations.mcp.passthrough import Passthrough, Reconnect
from toolgate.integrations.mcp.relay import RequestRelay, UpstreamRequests
from toolgate.integrations.mcp.router import McpRouter
from toolgate.integrations.mcp.tool_search import asked_for
from toolgate.promotion.discovery import TOOL_SEARCH_ID
from toolgate.telemetry.events import VerifyEvent
from toolgate.unicode import trimmed

__all__ = ["MAX_QUERY_CHARS", "McpProxy"]

logger = logging.getLogger(__name__)

#: The longest ``search_tools`` query taken: a search reads only the start of a query, and
#: tokenizing a huge one would cost memory on a server others share.
MAX_QUERY_CHARS = 8000


#: What each kind of change is, as an upstream's notification and as a listen-stream event.
_CHANGES: dict[str, tuple[str, ServerEvent]] = {
    "tools": ("notifications/tools/list_changed", ToolsListChanged()),
    "prompts": ("notifications/prompts/list_changed", PromptsListChanged()),
    "resources": ("notifications/resources/list_changed", ResourcesListChanged()),
}


class McpProxy:
    """The proxy's MCP server over a connected :class:`McpRouter` (see the module docstring).

    ``top_k`` is the most tools one search returns (default: the router's). ``allow`` and
    ``deny`` are patterns (as :meth:`~toolgate.Router.route` takes them) over the upstream
    tools: what they shut out is neither found nor called. ``instructions`` are added to the
    proxy's own (each upstream's, for instance). ``reconnect(server, failed)``, when given,
    is awaited when a call fails as a closed connection does: if it returns true (``failed``,
    the client the call went through, was dead and a new connection is in place), the call
    is made once more when its tool is marked ``readOnlyHint`` or ``idempotentHint``; any
    other tool's call may have run, and the model is told so rather than have it run twice.
    Upstream prompts and resources are served by :attr:`passthrough`.
    ``requests`` is where the upstream connections' input callbacks
    (:meth:`UpstreamRequests.callbacks`, given to each ``mcp.Client``) find the client a
    request is for.

    ``ready``, when given, is awaited before each request is served: the router may then be
    connected after the proxy is made, and its clients' handshakes answered meanwhile
    (``toolgate mcp-proxy`` lists and indexes the upstreams while they initialize).
    ``unavailable()`` names the upstream servers not answering now, so that a call to one
    of them, or to a tool no answering server has, says so (a transient failure) rather
    than that the tool does not exist. ``metrics`` counts searches and calls.

    ``max_result_bytes`` bounds what an upstream's answer (to a tool call, a prompt, a read)
    may take as JSON to be passed on: one limit for every server, or a limit per server name
    (servers not named get :data:`~toolgate.integrations.mcp.answers.MAX_RESULT_BYTES`). A
    tool result over it becomes a ``result_too_large`` tool error naming the tool, the
    server, the size and the limit; a prompt or a read over it, an ``INTERNAL_ERROR``.
    """

    def __init__(
        self,
        router: McpRouter,
        *,
        name: str = "toolgate",
        top_k: int | None = None,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        instructions: str = "",
        reconnect: Reconnect | None = None,
        requests: UpstreamRequests | None = None,
        ready: Callable[[], Awaitable[None]] | None = None,
        unavailable: Callable[[], Sequence[str]] | None = None,
        metrics: ProxyMetrics | None = None,
        max_result_bytes: int | Mapping[str, int] = MAX_RESULT_BYTES,
    ) -> None:
        """See the class docstring."""
        if top_k is not None:
            check_count("top_k", top_k, minimum=1)
        result_limit = _result_limits(max_result_bytes)
        self.router = router
        self._top_k = top_k
        self._ready = ready
        self.unavailable: Callable[[], Sequence[str]] = unavailable or (lambda: ())
        self.metrics = metrics
        self.allow, self.deny = pattern_list(allow), pattern_list(deny)
        self.reconnect = reconnect
        self._forwarder = Forwarder(
            router,
            allow=self.allow,
            deny=self.deny,
            reconnect=reconnect,
            unavailable=self.unavailable,
            result_limit=result_limit,
        )
        self.passthrough = Passthrough(router, reconnect, result_limit=result_limit)
        self._misshapen: set[str] = set()  # pinned tools listed without their passed_on
        self.requests = requests or UpstreamRequests()
        #: Change events for the clients' ``subscriptions/listen`` streams (2026-07-28).
        self.events = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.events)
        # Connections of clients on earlier protocols, told of changes by notification.
        self._legacy_clients: weakref.WeakSet[Any] = weakref.WeakSet()
        # Kinds of change being announced, and those that changed again meanwhile.
        self._announcing: set[str] = set()
        self._changed_again: set[str] = set()
        # Not connected yet (``ready``): the names pinned tools leave free are not known, and
        # are the usual ones but for a pinned upstream tool called search_tools.
        search, call = meta_names(router.router.catalog) if router.servers else (SEARCH, CALL)
        own = (
            f"Most tools are not listed. Call {search} to find the ones a task needs, then "
            f"{call} to call one."
        )
        self.server: Server[Any] = _ProxyServer(
            name,
            version=__version__,
            instructions=f"{own}\n\n{instructions}" if instructions else own,
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
            on_list_prompts=self._on_list_prompts,
            on_get_prompt=self._on_get_prompt,
            on_list_resources=self._on_list_resources,
            on_list_resource_templates=self._on_list_resource_templates,
            on_read_resource=self._on_read_resource,
            on_completion=self._on_completion,
            on_subscriptions_listen=self._listen,
        )
        # A client on an earlier protocol is remembered from its handshake on, so it hears
        # of changes even before its first request.
        self.server.add_notification_handler(
            "notifications/initialized", NotificationParams, self._on_initialized
        )

    @property
    def top_k(self) -> int:
        """The most tools one search returns."""
        return self._top_k or self.router.top_k or self.router.router.config.top_k

    async def wait_ready(self) -> None:
        """Return once the router is connected (at once without ``ready``). A ``ready`` that
        failed with toolgate's error (the model cannot be loaded, a listing) is an
        ``INTERNAL_ERROR`` saying why: the client is told, and the SDK, which logs any other
        exception's traceback, has nothing to log."""
        if self._ready is None:
            return
        try:
            await self._ready()
        except ToolgateError as exc:
            raise MCPError(INTERNAL_ERROR, f"the toolgate proxy cannot serve: {exc}") from None

    def list_tools(self) -> list[dict[str, Any]]:
        """What the proxy lists: the two meta tools, then the pinned upstream tools."""
        catalog = self.router.router.catalog
        search, call = meta_names(catalog)
        pinned = [self._pinned_listing(catalog[i]) for i in catalog.pinned_ids]
        return [search_tool_listing(search), call_tool_listing(call, search), *pinned]

    def _pinned_listing(self, tool: Tool) -> dict[str, Any]:
        """A pinned tool as its server lists it: with the fields the catalog does not keep
        (``outputSchema``, ``icons``, ``_meta``), unless they are not MCP's shape, which
        would fail the whole listing."""
        listed = export(tool)
        passed_on = self.router.passed_on(tool)
        if not passed_on:
            return listed
        whole = {**listed, **passed_on}
        try:
            McpTool.model_validate(whole)
        except ValidationError as exc:
            if tool.id not in self._misshapen:  # listed again on every tools/list
                self._misshapen.add(tool.id)
                logger.warning(
                    "MCP server %r: tool %r listed without its %s, not of MCP's shape: %s",
                    tool.server,
                    tool.name,
                    ", ".join(passed_on),
                    exc,
                )
            return listed
        return whole

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None, relay: RequestRelay | None = None
    ) -> CallToolResult | InputRequiredResult:
        """Answer one ``tools/call``: a search, a call through ``call_tool``, or a pinned
        tool called by its own name. Every failure is a tool error, for the model, but an
        upstream's ``URLElicitationRequiredError`` (a page the user must open first), raised
        as it is for a client that takes URL-mode elicitations.

        ``relay`` passes the upstream's progress and requests for input on to the client
        (:mod:`~toolgate.integrations.mcp.relay`): the answer is then an
        ``InputRequiredResult`` when a client on the 2026-07-28 protocol is to answer them.
        """
        await self.wait_ready()
        search, call = meta_names(self.router.router.catalog)
        arguments = dict(arguments or {})
        if name == call:
            unwrapped = unwrap_call(arguments)
            if unwrapped is None:
                return invalid_arguments(
                    f"{call} takes 'name' (a tool's name, as {search} gave it) and "
                    "'arguments' (an object)"
                )
            name, arguments = unwrapped
        if name == search:  # asked for directly, or through call_tool
            return await self._search(arguments)
        shadowed = shadowed_tool(self.router.router.catalog, search)
        if shadowed is not None and name == shadowed[0]:
            name = shadowed[1]  # its id: its exposed name would search
        start = time.perf_counter()
        result, server, how = await self._forwarder.forward(name, arguments, relay, search)
        if self.metrics is not None:
            self.metrics.called(server, how, time.perf_counter() - start)
        if isinstance(result, MCPError):
            raise result
        return result

    async def heard(self, server: str, notice: Any) -> None:
        """Pass on an upstream's notice that its tools, prompts or resources changed, or
        that the user is done with a page it asked a client to open: a message its client
        received (give ``partial(proxy.heard, name)`` as ``then`` to
        :meth:`McpRouter.message_handler`; on the 2026-07-28 protocol the SDK passes the
        events of :meth:`McpRouter.watch` with ``prompts`` / ``resources`` on to it too).
        Other messages are ignored.

        A tools change is passed on too, though the proxy lists its own two tools: pinned
        tools are listed as well, and the client's next ``tools/list`` lists them afresh.
        It waits until every client has been sent the notice: called from a message
        handler, which runs in the upstream connection's receive loop, it is better started
        in a task of its own (as ``toolgate mcp-proxy`` does).
        """
        message = getattr(notice, "root", notice)
        if isinstance(message, ElicitCompleteNotification):  # to the client sent the page
            await self.requests.page_done(server, message.params.elicitation_id)
            return
        method = getattr(message, "method", None)
        for kind, (notification, _event) in _CHANGES.items():
            if method == notification:
                await self.announce(kind)

    async def announce(self, *kinds: str) -> None:
        """Tell every client that the proxy's ``tools``, ``prompts`` and / or ``resources``
        changed (a server joined, or one changed its own).

        Changes that come while a notice of their kind is on its way are told in one more
        notice after it: a server sending thousands does not make the proxy send thousands
        to each client."""
        if unknown := [kind for kind in kinds if kind not in _CHANGES]:
            raise InvalidInputError(f"unknown kinds {unknown}; expected {sorted(_CHANGES)}")
        for kind in kinds:
            if kind in self._announcing:
                self._changed_again.add(kind)
                continue
            self._announcing.add(kind)
            try:
                await self._tell_changed(kind)
                while kind in self._changed_again:
                    self._changed_again.discard(kind)
                    await self._tell_changed(kind)
            finally:
                self._announcing.discard(kind)

    async def _tell_changed(self, kind: str) -> None:
        """One notice that ``kind`` changed, to every client."""
        await self.events.publish(_CHANGES[kind][1])
        send = f"send_{kind.rstrip('s')}_list_changed"
        for client in list(self._legacy_clients):
            try:
                await getattr(client, send)()
            except Exception:  # that client is gone
                self._legacy_clients.discard(client)

    def end_event_streams(self) -> None:
        """End every client's ``subscriptions/listen`` stream, gracefully (the proxy is
        stopping: the streams would otherwise hold their connections open)."""
        self._listen.close()

    async def _search(self, arguments: Mapping[str, Any]) -> CallToolResult:
        start = time.perf_counter()
        result = await self._found(arguments)
        if self.metrics is not None:
            self.metrics.searched(not result.is_error, time.perf_counter() - start)
        return result

    async def _found(self, arguments: Mapping[str, Any]) -> CallToolResult:
        """The answer to a search, or the error for a query it refuses."""
        query = arguments.get("query")
        search, call = meta_names(self.router.router.catalog)
        if not isinstance(query, str) or not trimmed(query):
            return self._refused_search(search, f"{search} takes 'query', a non-empty string")
        if len(query) > MAX_QUERY_CHARS:  # a client's, on a server others share
            return self._refused_search(
                search,
                f"{search}'s query has {len(query):,} characters, more than {MAX_QUERY_CHARS:,}: "
                "describe the task in fewer words",
            )
        try:
            found = await self.router.search(
                query, allow=self.allow, deny=self.deny, top_k=self.top_k
            )
        except ToolgateError as exc:  # "select:" naming nothing, and the like
            why = f"{exc}; describe the task in words, or use 'select:name1,name2'"
            return self._refused_search(search, why)
        self._log_search(search, ok=True)
        # The tools as they are now, which calls are checked against: a refresh may have
        # come while the search routed, so a tool it found may be gone from them.
        catalog = self.router.router.catalog
        # Pinned tools are listed already: a search shows the others.
        ids = [i for i in found.ids if i in catalog and not catalog[i].pinned]
        down = self.unavailable()
        # On the first line, which the tools found (a JSON list) follow.
        notes = (
            f" {not_answering(down, start='Server')} now: tools of theirs may be missing here, "
            "and calls to them fail until they are back."
            if down
            else ""
        )
        if found.unknown:
            notes += f"\n{unknown_names_note(found.unknown, catalog)}"
        if not ids:
            # A pinned tool asked for by name is listed already: never "no tool matched".
            asked = [catalog[i] for i in asked_for(found) if i in catalog]
            pinned = [tool.exposed_name for tool in asked if tool.pinned]
            text = (
                f"Already listed (call {'it' if len(pinned) == 1 else 'them'} directly): "
                f"{', '.join(pinned)}.{notes}"
                if pinned
                else f"No tool matched. Try other words, or 'select:name'.{notes}"
            )
            return search_result(text, [], found.unknown, down)
        tools = [{**export(catalog[i], compact=True), "server": catalog[i].server} for i in ids]
        if shadowed := shadowed_tool(catalog, search):
            for tool, tool_id in zip(tools, ids, strict=True):
                if tool_id == shadowed[1]:
                    tool["name"] = shadowed[0]
        header = f"Tools found, best first. Call one with {call}(name, arguments).{notes}\n"
        text = header + json.dumps(tools, ensure_ascii=False, separators=(",", ":"))
        return search_result(text, tools, found.unknown, down)

    def _refused_search(self, name: str, why: str) -> CallToolResult:
        """The error for a search refused for its query, logged as such."""
        self._log_search(name, ok=False)
        return invalid_arguments(why)

    def _log_search(self, name: str, *, ok: bool) -> None:
        """Log a ``search_tools`` call as what it is, a search (as a host's checked
        ``tool_search`` call is logged): its route alone would pass for a turn's."""
        telemetry = self.router.router.telemetry
        if telemetry is not None:
            error = None if ok else "invalid_arguments"
            event = VerifyEvent(name=name, tool_id=TOOL_SEARCH_ID, ok=ok, error=error)
            telemetry.emit(event)

    async def _on_initialized(self, ctx: Any, _params: NotificationParams) -> None:
        """Note the connection of a client on an earlier protocol, to tell it of changes."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return
        # ``ctx.session`` is made for each message and dropped after it; the SDK's
        # connection behind it lasts as long as the client, and can notify it any time.
        connection = getattr(getattr(ctx, "session", None), "_connection", None)
        if connection is not None:
            self._legacy_clients.add(connection)

    async def _on_list_tools(self, _ctx: Any, _params: PaginatedRequestParams | None) -> Any:
        await self.wait_ready()
        await self.router.update()  # pinned tools may have changed upstream
        return ListToolsResult.model_validate({"tools": self.list_tools()})

    async def _on_call_tool(self, ctx: Any, params: CallToolRequestParams) -> Any:
        relay = RequestRelay(ctx, self.requests, params)
        return await self.call_tool(params.name, params.arguments, relay)

    async def _on_list_prompts(self, _ctx: Any, _params: PaginatedRequestParams | None) -> Any:
        await self.wait_ready()
        prompts = await self.passthrough.list_prompts()
        return ListPromptsResult.model_validate({"prompts": prompts})

    async def _on_get_prompt(self, ctx: Any, params: GetPromptRequestParams) -> GetPromptResult:
        await self.wait_ready()
        relay = RequestRelay(ctx, self.requests)
        return await self.passthrough.get_prompt(params.name, params.arguments, relay)

    async def _on_list_resources(self, _ctx: Any, _params: PaginatedRequestParams | None) -> Any:
        await self.wait_ready()
        resources = await self.passthrough.list_resources()
        return ListResourcesResult.model_validate({"resources": resources})

    async def _on_list_resource_templates(
        self, _ctx: Any, _params: PaginatedRequestParams | None
    ) -> Any:
        await self.wait_ready()
        templates = await self.passthrough.list_resource_templates()
        return ListResourceTemplatesResult.model_validate({"resourceTemplates": templates})

    async def _on_read_resource(
        self, ctx: Any, params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        await self.wait_ready()
        relay = RequestRelay(ctx, self.requests)
        return await self.passthrough.read_resource(str(params.uri), relay)

    async def _on_completion(self, ctx: Any, params: CompleteRequestParams) -> CompleteResult:
        await self.wait_ready()
        context = params.context.arguments if params.context else None
        relay = RequestRelay(ctx, self.requests)
        argument = params.argument.model_dump()
        return await self.passthrough.complete(params.ref, argument, context, relay)


def _result_limits(limits: int | Mapping[str, int]) -> Callable[[str], int]:
    """``limit(server)``: the most bytes of JSON an answer of ``server``'s may take."""
    if isinstance(limits, Mapping):
        for server, limit in limits.items():
            check_count(f"max_result_bytes[{server!r}]", limit, minimum=MIN_RESULT_BYTES)
        per_server = dict(limits)
        return lambda server: per_server.get(server, MAX_RESULT_BYTES)
    check_count("max_result_bytes", limits, minimum=MIN_RESULT_BYTES)
    return lambda _server: limits


class _ProxyServer(Server[Any]):
    """The proxy's MCP server, which says in its handshake that it tells of changes to its
    tools, prompts and resources (it passes the upstreams' on), and that it takes no
    subscriptions to a resource's updates (it passes none on)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        tells = NotificationOptions(
            prompts_changed=True, resources_changed=True, tools_changed=True
        )
        return super().create_initialization_options(
            notification_options or tells, experimental_capabilities, extensions
        )

    def get_capabilities(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
        *,
        protocol_version: str | None = None,
    ) -> ServerCapabilities:
        """The SDK's, without ``resources.subscribe``: on 2026-07-28 (``server/discover``,
        which asks this and not :meth:`create_initialization_options`) the SDK offers it
        because the proxy serves ``subscriptions/listen``, which the proxy uses for list
        changes only; a client would subscribe to updates that never come."""
        capabilities = super().get_capabilities(
            notification_options,
            experimental_capabilities,
            extensions,
            protocol_version=protocol_version,
        )
        if capabilities.resources is not None:
            capabilities.resources.subscribe = False  # as on the handshake era
        return capabilities
