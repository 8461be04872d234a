"""MCP hosts: route each turn over the tools of live MCP servers and forward checked calls.

An agent host connected to a few MCP servers (through the ``mcp`` SDK) sends every server's
tools to the model on every turn. :class:`McpRouter` lists them once, from every server, and
then per turn hands the model only the routed tools (:meth:`McpRouter.tools`, a
:class:`~toolgate.promote.Promotion` for the provider the host talks to); it checks each call
the model makes against that turn's tools and forwards it, under the tool's own name, to the
server that has it (:meth:`McpRouter.call`). A call that fails the check never reaches a
server: it comes back as an error result the model can act on.

When a server's tools change, the next turn lists that server again and re-embeds only the
tools that changed. A server tells of it with ``notifications/tools/list_changed``, which
:meth:`McpRouter.message_handler` hears, or on the 2026-07-28 protocol with an event on a
``subscriptions/listen`` stream, which :meth:`McpRouter.watch` follows.

The host keeps its connections: ``servers`` maps a server name (the ``server`` of each tool
id, ``server/name``) to a connected client, an ``mcp.Client`` or ``mcp.ClientSession``::

    from mcp import Client
    from toolgate.integrations.mcp import McpRouter

    router = McpRouter(top_k=5)
    async with Client(github_url, message_handler=router.message_handler("github")) as github:
        await router.connect({"github": github})
        promotion = await router.tools(user_text, format="anthropic")
        reply = await model.create(tools=promotion.request_tools(), ...)    # the host's call
        outcome = await router.call(reply.content[-1], promotion)          # a tool_use block
        # outcome.result: the CallToolResult to send back as the tool result
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import TaskStatus
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.types import CallToolResult, PaginatedRequestParams

from toolgate.budget import Budget
from toolgate.catalog import Catalog, CatalogWarning
from toolgate.config import RouterConfig
from toolgate.embed import Embedder
from toolgate.embed_cache import EmbeddingCache
from toolgate.errors import CatalogError, InvalidInputError
from toolgate.history import HistoryTurn
from toolgate.promote import TOOL_SEARCH_ID, Promotion
from toolgate.route_result import RouteResult
from toolgate.router import Router
from toolgate.state import State
from toolgate.telemetry import Telemetry
from toolgate.verify import Verdict

__all__ = ["CallOutcome", "McpClient", "McpRouter"]

#: Pages of ``tools/list`` read from one server before its listing is taken to never end.
MAX_PAGES = 1000
#: Routers kept for checking calls against the promotion that offered them, after a refresh
#: replaced the current one (a turn in flight during a refresh still verifies).
_ROUTERS_KEPT = 4
_LIST_CHANGED = "notifications/tools/list_changed"
_NOT_CONNECTED = "not connected: await connect({name: client, ...}) first"


class McpClient(Protocol):
    """What :class:`McpRouter` needs of a connected client (``mcp.Client``,
    ``mcp.ClientSession``): ``tools/list`` and ``tools/call``. Later pages are asked for with
    ``cursor=`` (``mcp.Client``) or ``params=`` (``ClientSession``), as the method takes."""

    async def list_tools(self) -> Any:
        """The first page of the server's tools (a ``ListToolsResult`` or its JSON form)."""

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = ...) -> Any:
        """Call the server's tool ``name`` with ``arguments``."""


@dataclass(frozen=True)
class CallOutcome:
    """What became of one tool call.

    Attributes:
        result: the ``CallToolResult`` to hand back to the model: the server's, or an error
            (``is_error``) saying why the call was refused, or the tools a ``tool_search``
            call found.
        verdict: the check of the call against the turn's tools.
        server: the server the call went to; ``None`` when it went to none.
        found: the tool ids a ``tool_search`` call found, which its description promises the
            model on its next turn: pass them as ``include=`` to the next :meth:`McpRouter.tools`.
    """

    result: CallToolResult
    verdict: Verdict
    server: str | None = None
    found: tuple[str, ...] = ()

    @property
    def forwarded(self) -> bool:
        """Whether the call reached a server."""
        return self.server is not None


class McpRouter:
    """A :class:`~toolgate.Router` over the tools of live MCP servers.

    ``top_k`` is the most tools routed per turn. ``config``, ``embedder``, ``telemetry`` and
    ``cache`` are :meth:`Router.from_catalog`'s; ``overrides`` are :meth:`Catalog.load`'s (pins
    and preconditions by tool id), kept across refreshes. A server whose listing fails or holds
    bad tools is an error (:class:`~toolgate.errors.CatalogError` naming it), or with
    ``lenient=True`` a :class:`~toolgate.catalog.CatalogWarning`: the bad tools are skipped,
    and a server that could not be listed keeps its previous tools and is listed again on the
    next turn.

    One router serves many conversations at once: per-conversation state (``state``,
    ``history``, the ids a search found) is the caller's, passed on each call.
    """

    def __init__(
        self,
        *,
        top_k: int | None = None,
        config: RouterConfig | None = None,
        embedder: Embedder | None = None,
        telemetry: Telemetry | None = None,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        lenient: bool = False,
        cache: EmbeddingCache | str | os.PathLike[str] | bool | None = True,
    ) -> None:
        """See the class docstring."""
        if top_k is not None and (
            isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1
        ):
            raise InvalidInputError(f"top_k must be an integer >= 1, got {top_k!r}")
        self.top_k = top_k
        self.lenient = lenient
        self._options: dict[str, Any] = {
            "config": config,
            "embedder": embedder,
            "telemetry": telemetry,
            "cache": cache,
        }
        self._overrides = overrides
        self._clients: dict[str, McpClient] = {}
        self._routers: OrderedDict[str, Router] = OrderedDict()
        self._changed: set[str] = set()
        self._lock = anyio.Lock()

    # -- connections ---------------------------------------------------------------------

    async def connect(self, servers: Mapping[str, McpClient]) -> Router:
        """List every server's tools (all at once, following pagination) and index them."""
        if self._routers:
            raise InvalidInputError("already connected; use add_server to add a server")
        clients = _checked_servers(servers)
        async with self._lock:
            listed = await self._list_servers(clients)
            # A server that could not be listed (lenient mode) starts with no tools.
            catalog = Catalog.from_mcp(
                {name: {"tools": listed.get(name, [])} for name in clients},
                lenient=self.lenient,
                overrides=self._overrides,
            )
            router = await anyio.to_thread.run_sync(
                partial(Router.from_catalog, catalog, **self._options)
            )
            self._clients = clients
            self._changed = set(clients) - set(listed)
            self._keep(router)
        return router

    async def add_server(self, name: str, client: McpClient) -> Router:
        """Connect one more server: list its tools and index them next to the others."""
        _checked_servers({name: client})
        async with self._lock:
            if not self._routers:
                raise InvalidInputError(_NOT_CONNECTED)
            if name in self._clients:
                raise InvalidInputError(f"server {name!r} is already connected")
            listed = await self._list_servers({name: client})
            router = await self._replace(listed)
            self._clients[name] = client
            if name not in listed:  # lenient: listed again on the next turn
                self._changed.add(name)
            return router

    async def remove_server(self, name: str) -> Router:
        """Drop a server and its tools (the host disconnected it)."""
        async with self._lock:
            self._client(name)
            del self._clients[name]
            self._changed.discard(name)
            return await self._replace({name: []})

    @property
    def servers(self) -> list[str]:
        """The connected servers' names."""
        return list(self._clients)

    @property
    def router(self) -> Router:
        """The current router (replaced by each refresh)."""
        if not self._routers:
            raise InvalidInputError(_NOT_CONNECTED)
        return next(reversed(self._routers.values()))

    # -- changes ---------------------------------------------------------------------------

    def message_handler(
        self, server: str, then: MessageHandlerFnT | None = None
    ) -> MessageHandlerFnT:
        """A ``message_handler`` for the client of ``server``: on
        ``notifications/tools/list_changed`` it marks the server changed, so the next turn
        lists it again; every message then goes on to ``then``, if given.

        It never calls the server itself: the SDK runs message handlers inside the
        connection's receive loop, where waiting for a response would deadlock.
        """

        async def handle(message: IncomingMessage) -> None:
            if getattr(getattr(message, "root", message), "method", None) == _LIST_CHANGED:
                self.mark_changed(server)
            if then is not None:
                await then(message)
            else:
                await anyio.lowlevel.checkpoint()

        return handle

    async def watch(
        self, server: str, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Mark ``server`` changed on each tools-changed event of its ``subscriptions/listen``
        stream, until cancelled or the stream ends: run it in the host's task group
        (``await group.start(router.watch, "github")`` returns once the server has
        acknowledged the subscription).

        That stream is how a server tells of changes on the 2026-07-28 protocol; on earlier
        ones it sends ``notifications/tools/list_changed``, which :meth:`message_handler`
        hears, and watching is an :class:`~toolgate.errors.InvalidInputError`.
        """
        client = self._client(server)
        listen = getattr(client, "listen", None)
        if listen is None:
            raise InvalidInputError(
                f"server {server!r}: {type(client).__name__} has no listen(); hear changes "
                "through message_handler instead"
            )
        try:
            async with listen(tools_list_changed=True) as events:
                task_status.started()
                async for _event in events:
                    self.mark_changed(server)
        except ListenNotSupportedError as exc:
            raise InvalidInputError(
                f"server {server!r}: {exc.args[0] if exc.args else exc}; hear changes through "
                "message_handler instead"
            ) from None

    def mark_changed(self, server: str) -> None:
        """Note that ``server``'s tools changed (a host that hears of it its own way): the
        next turn lists it again."""
        self._changed.add(server)

    @property
    def changed(self) -> frozenset[str]:
        """Servers marked changed and not listed again yet."""
        return frozenset(self._changed)

    async def refresh(self, servers: Iterable[str] | None = None) -> Router:
        """List ``servers`` (default: those marked changed) again and re-index the tools that
        changed; a listing identical to the last keeps the current router."""
        async with self._lock:
            names = set(self._changed if servers is None else servers)
            clients = {name: self._client(name) for name in names}
            # Cleared before listing, so a change heard meanwhile is listed next time.
            self._changed -= names
            try:
                listed = await self._list_servers(clients)
                router = await self._replace(listed)
            except BaseException:
                self._changed |= names  # still to be listed: the next turn tries again
                raise
            self._changed |= names - set(listed)
            return router

    # -- turns -----------------------------------------------------------------------------

    async def tools(
        self,
        query: str,
        *,
        format: str = "openai",
        state: State | Mapping[str, Iterable[str]] | None = None,
        history: Sequence[HistoryTurn] | None = None,
        include: Iterable[str] | None = None,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        budget: Budget | None = None,
        pool: str = "auto",
        turn_id: str = "",
    ) -> Promotion:
        """The tools to send the model this turn, for the user's latest message ``query``.

        Servers marked changed are listed again first. ``query`` is read as a person's words
        (never a ``select:`` form); ``include`` holds the ids a ``tool_search`` call found
        last turn (:attr:`CallOutcome.found`). The rest are :meth:`Router.route`'s and
        :meth:`Router.promote`'s. Routing runs in a worker thread, off the event loop.
        """
        if self._changed:
            await self.refresh()
        router = self.router
        route = partial(
            router.route, query, state=state, history=history, top_k=self.top_k,
            include=include, allow=allow, deny=deny, forms=False, turn_id=turn_id,
        )  # fmt: skip

        def work() -> Promotion:
            return router.promote(route(), format=format, budget=budget, pool=pool, turn_id=turn_id)

        return await anyio.to_thread.run_sync(work)

    async def call(
        self,
        tool_call: Mapping[str, Any],
        promotion: Promotion,
        *,
        state: State | Mapping[str, Iterable[str]] | None = None,
        turn_id: str = "",
    ) -> CallOutcome:
        """Check ``tool_call`` (in any form :meth:`Router.verify` reads) against the turn's
        ``promotion`` and forward it to its server under the tool's own name.

        A call to a tool the turn did not offer, or with arguments its schema refuses, is
        not forwarded: the result is the error for the model. A ``tool_search`` call is
        answered here: the tools it finds (routed under ``state``) are listed in the result
        and in :attr:`CallOutcome.found`. Errors the server or the connection raise are the
        host's, and propagate.
        """
        router = self._router_for(promotion)
        verdict = router.verify(tool_call, promotion, turn_id=turn_id)
        if verdict.ok and verdict.tool_id == TOOL_SEARCH_ID:
            query = str((verdict.arguments or {})["query"])
            found = await self._route(router, query, state=state, turn_id=turn_id)
            return CallOutcome(
                _search_result(found, router.catalog), verdict, found=tuple(found.ids)
            )
        return await self._forward(router, verdict)

    async def search(
        self,
        query: str,
        *,
        state: State | Mapping[str, Iterable[str]] | None = None,
        top_k: int | None = None,
        turn_id: str = "",
    ) -> RouteResult:
        """The tools routed for a search ``query`` (words, ``select:a,b`` or ``+term``), as
        a ``tool_search`` call asks, after listing the servers marked changed."""
        if self._changed:
            await self.refresh()
        return await self._route(self.router, query, state=state, top_k=top_k, turn_id=turn_id)

    async def call_any(self, tool_call: Mapping[str, Any], *, turn_id: str = "") -> CallOutcome:
        """Like :meth:`call`, but any tool of the current catalog may be called, as when the
        model learnt of it from a search rather than from a turn's tools (see
        :mod:`toolgate.integrations.mcp_proxy`). The name and the arguments are still
        checked: an unknown name gets the closest one, bad arguments the failing path."""
        if self._changed:
            await self.refresh()
        router = self.router
        verdict = router.verify(tool_call, router.catalog.ids, turn_id=turn_id)
        return await self._forward(router, verdict)

    # -- internals -------------------------------------------------------------------------

    async def _route(
        self,
        router: Router,
        query: str,
        *,
        state: State | Mapping[str, Iterable[str]] | None,
        top_k: int | None = None,
        turn_id: str,
    ) -> RouteResult:
        """``router.route`` in a worker thread, with the router's ``top_k`` by default."""
        k = self.top_k if top_k is None else top_k
        route = partial(router.route, query, state=state, top_k=k, turn_id=turn_id)
        return await anyio.to_thread.run_sync(route)

    async def _forward(self, router: Router, verdict: Verdict) -> CallOutcome:
        """The server's answer to a verified call, or the error when the check failed."""
        if not verdict.ok:
            return CallOutcome(_error_result(verdict), verdict)
        tool = router.catalog[str(verdict.tool_id)]
        client = self._clients.get(tool.server)
        if client is None:
            gone = replace(
                verdict,
                ok=False,
                error="tool_not_available",
                message=f"Tool {tool.exposed_name!r} is gone: its server {tool.server!r} was "
                "disconnected. Use one of the available tools.",
                available=tuple(n for n in verdict.available if n != tool.exposed_name),
            )
            return CallOutcome(_error_result(gone), gone)
        result = await client.call_tool(tool.name, dict(verdict.arguments or {}))
        return CallOutcome(_as_call_result(result, tool.server), verdict, server=tool.server)

    def _client(self, server: str) -> McpClient:
        client = self._clients.get(server)
        if client is None:
            raise InvalidInputError(f"no server {server!r}; connected: {sorted(self._clients)}")
        return client

    async def _list_servers(self, clients: Mapping[str, McpClient]) -> dict[str, list[Any]]:
        """Each server's tools, listed concurrently. A server that fails is an error, or in
        lenient mode left out, with a warning."""
        listed: dict[str, list[Any]] = {}
        failed: dict[str, str] = {}

        async def list_one(name: str, client: McpClient) -> None:
            try:
                listed[name] = await _list_tools(name, client)
            except CatalogError as exc:
                failed[name] = str(exc)
            except Exception as exc:  # the SDK's and the transport's errors alike
                failed[name] = f"MCP server {name!r}: tools/list failed: {exc!r}"

        async with anyio.create_task_group() as group:
            for name, client in clients.items():
                group.start_soon(list_one, name, client)
        if failed:
            problems = "; ".join(failed[name] for name in sorted(failed))
            if not self.lenient:
                raise CatalogError(problems)
            warnings.warn(
                f"{problems} (listed again on the next turn)", CatalogWarning, stacklevel=3
            )
        return listed

    async def _replace(self, listed: Mapping[str, list[Any]]) -> Router:
        """The current router with each server's tools replaced by ``listed[server]``."""
        current = self.router
        catalog = current.catalog
        for name, tools in listed.items():
            catalog = catalog.replace_server(name, {"tools": tools}, lenient=self.lenient)
        if not catalog.diff(current.catalog):
            return current
        router = await anyio.to_thread.run_sync(current.refresh, catalog)
        self._keep(router)
        return router

    def _keep(self, router: Router) -> None:
        self._routers[router.catalog.version] = router
        self._routers.move_to_end(router.catalog.version)
        while len(self._routers) > _ROUTERS_KEPT:
            self._routers.popitem(last=False)

    def _router_for(self, promotion: Promotion) -> Router:
        if not isinstance(promotion, Promotion):
            raise InvalidInputError(
                f"call takes the turn's Promotion (from tools()), got {type(promotion).__name__}"
            )
        router = self._routers.get(promotion.catalog_version)
        if router is None:
            raise InvalidInputError(
                "the promotion comes from tools that are no longer loaded (several refreshes "
                "ago, or another McpRouter): get this turn's tools again"
            )
        return router


def _checked_servers(servers: Mapping[str, McpClient]) -> dict[str, McpClient]:
    if not isinstance(servers, Mapping):
        raise InvalidInputError(
            f"servers must map server names to connected clients, got {type(servers).__name__}"
        )
    for name, client in servers.items():
        if not isinstance(name, str) or not name.strip():
            raise InvalidInputError(f"server names must be non-empty strings, got {name!r}")
        for method in ("list_tools", "call_tool"):
            if not callable(getattr(client, method, None)):
                raise InvalidInputError(
                    f"server {name!r}: expected a connected MCP client (mcp.Client or "
                    f"ClientSession) with {method}, got {type(client).__name__}"
                )
    return dict(servers)


async def _list_tools(server: str, client: McpClient) -> list[Any]:
    """Every tool ``server`` lists, page after page."""
    tools: list[Any] = []
    cursor: str | None = None
    cursors: set[str] = set()
    for page_number in range(1, MAX_PAGES + 1):
        page = _plain(await _list_page(client, cursor), server)
        page_tools = page.get("tools")
        if not isinstance(page_tools, list):
            raise CatalogError(
                f"MCP server {server!r}: tools/list page {page_number} has no 'tools' list"
            )
        tools.extend(page_tools)
        cursor = page.get("nextCursor")
        if cursor is None:
            return tools
        if cursor in cursors:
            raise CatalogError(
                f"MCP server {server!r}: tools/list page {page_number} repeats cursor "
                f"{cursor!r}, so the listing never ends"
            )
        cursors.add(cursor)
    raise CatalogError(f"MCP server {server!r}: tools/list goes on past {MAX_PAGES} pages")


async def _list_page(client: McpClient, cursor: str | None) -> Any:
    if cursor is None:
        return await client.list_tools()
    # mcp.Client and the 1.x ClientSession take the cursor itself, the 2.x ClientSession a
    # PaginatedRequestParams.
    list_tools: Callable[..., Awaitable[Any]] = client.list_tools
    if "cursor" in inspect.signature(list_tools).parameters:
        return await list_tools(cursor=cursor)
    return await list_tools(params=PaginatedRequestParams(cursor=cursor))


def _plain(page: Any, server: str) -> dict[str, Any]:
    """A ``tools/list`` page as its JSON form (wire names: ``inputSchema``, ``nextCursor``)."""
    if hasattr(page, "model_dump"):
        dumped = page.model_dump(mode="json", by_alias=True, exclude_none=True)
        if isinstance(dumped, dict):
            return dumped
    if isinstance(page, Mapping):
        return dict(page)
    raise CatalogError(
        f"MCP server {server!r}: tools/list returned {type(page).__name__}, not a result"
    )


def _as_call_result(result: Any, server: str) -> CallToolResult:
    if isinstance(result, CallToolResult):
        return result
    try:
        return CallToolResult.model_validate(_plain(result, server))
    except (CatalogError, ValueError) as exc:
        raise InvalidInputError(
            f"MCP server {server!r}: tools/call returned {type(result).__name__}, "
            f"not a CallToolResult: {exc}"
        ) from None


def _text_result(text: str, *, is_error: bool) -> CallToolResult:
    return CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "isError": is_error}
    )


def _error_result(verdict: Verdict) -> CallToolResult:
    return CallToolResult.model_validate(verdict.to_tool_result("mcp"))


def _search_result(found: RouteResult, catalog: Catalog) -> CallToolResult:
    """The answer to a ``tool_search`` call: each tool found, by the name the model will call
    it by, with its summary."""
    if not found.ids:
        return _text_result(
            "No tool matched. Try other words, or 'select:name' for a tool you know.",
            is_error=False,
        )
    lines = [f"- {catalog[i].exposed_name}: {catalog[i].summary}" for i in found.ids]
    lines.append("These tools are available on your next turn.")
    return _text_result("\n".join(lines), is_error=False)
