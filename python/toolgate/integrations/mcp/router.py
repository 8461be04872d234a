"""MCP hosts: route each turn over the tools of live MCP servers and forward checked calls.

An agent host connected to a few MCP servers (through the ``mcp`` SDK) sends every server's
tools to the model on every turn. :class:`McpRouter` lists them once, from every server, and
then per turn hands the model only the routed tools (:meth:`McpRouter.tools`, a
:class:`~toolgate.promotion.promote.Promotion` for the provider the host talks to); it checks each
call
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
    from toolgate.integrations.mcp.router import McpRouter

    router = McpRouter(top_k=5)
    async with Client(github_url, message_handler=router.message_handler("github")) as github:
        await router.connect({"github": github})
        promotion = await router.tools(user_text, format="anthropic")
        reply = await model.create(tools=promotion.request_tools(), ...)    # the host's call
        outcome = await router.call(reply.content[-1].model_dump(), promotion)  # tool_use
        # outcome.result: the CallToolResult to send back as the tool result
"""

from __future__ import annotations

import os
import time
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.abc import TaskStatus
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.subscriptions import ToolsListChanged
from mcp.types import CallToolResult

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.tool import Tool
from toolgate.embedding.cache import EmbeddingCache
from toolgate.embedding.embedder import Embedder
from toolgate.errors import CatalogError, CatalogWarning, InvalidInputError
from toolgate.formats.calls import parse_tool_call
from toolgate.integrations.mcp.answers import error_result, text_result, unknown_names_note
from toolgate.integrations.mcp.listing import McpClient, list_server_tools, plain
from toolgate.promotion.active_set import tools_in_scope
from toolgate.promotion.budget import Budget
from toolgate.promotion.discovery import TOOL_SEARCH_ID
from toolgate.promotion.promote import Promotion
from toolgate.routing.config import RouterConfig, check_count
from toolgate.routing.history import HistoryTurn
from toolgate.routing.result import RouteResult
from toolgate.routing.router import Router, default_embedder
from toolgate.routing.scopes import pattern_list
from toolgate.routing.state import State
from toolgate.telemetry.recorder import Telemetry
from toolgate.verify import Verdict

__all__ = ["CallOutcome", "McpClient", "McpRouter", "UpstreamCall"]


#: Routers kept for checking calls against the promotion that offered them, after refreshes
#: replaced the current one; an older promotion is checked against the current tools.
_ROUTERS_KEPT = 8


_LIST_CHANGED = "notifications/tools/list_changed"


_NOT_CONNECTED = "not connected: await connect({name: client, ...}) first"


StateLike = State | Mapping[str, Iterable[str]] | None


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

    @property
    def forwarded(self) -> bool:
        """Whether the call reached a server."""
        return self.server is not None


class McpRouter:
    """A :class:`~toolgate.Router` over the tools of live MCP servers.

    ``top_k`` is the most tools routed per turn. ``config``, ``embedder``, ``telemetry`` and
    ``cache`` are :meth:`Router.from_catalog`'s; ``overrides`` are :meth:`Catalog.load`'s (pins
    and preconditions by tool id), kept across refreshes.

    At :meth:`connect`, :meth:`add_server` and an explicit :meth:`refresh`, a server whose
    listing fails, takes longer than ``list_timeout`` seconds or holds bad tools is an error
    (:class:`~toolgate.errors.CatalogError` naming it), or with ``lenient=True`` a
    :class:`~toolgate.catalog.CatalogWarning`: bad tools are skipped, and a server that
    could not be listed has no tools until it is. A turn that lists a changed server never
    fails for it, in either mode: the server keeps its previous tools (bad new ones are
    skipped), a warning says why, and it is listed again no sooner than ``retry_after``
    seconds later, so the turns in between do not wait for it.

    One router serves many conversations at once: per-conversation state (``state``,
    ``history``, the ids promised for the next turn) is the caller's, passed on each call.
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
        list_timeout: float | None = 10.0,
        retry_after: float = 30.0,
    ) -> None:
        """See the class docstring."""
        if top_k is not None:
            check_count("top_k", top_k, minimum=1)
        if list_timeout is not None and not (_is_number(list_timeout) and list_timeout > 0):
            raise InvalidInputError(
                f"list_timeout must be seconds > 0 or None, got {list_timeout!r}"
            )
        if not (_is_number(retry_after) and retry_after >= 0):
            raise InvalidInputError(f"retry_after must be seconds >= 0, got {retry_after!r}")
        self.top_k = top_k
        self.lenient = lenient
        self.list_timeout = list_timeout
        self.retry_after = retry_after
        self._config = config
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
        self._retry_at: dict[str, float] = {}
        self._listing: set[str] = set()
        self._scope_ids: tuple[Any, frozenset[str]] | None = None
        self._lock = anyio.Lock()

    # -- connections ---------------------------------------------------------------------

    async def connect(self, servers: Mapping[str, McpClient]) -> Router:
        """List every server's tools (all at once, following pagination) and index them."""
        clients = _checked_servers(servers)
        async with self._lock:
            if self._routers:
                raise InvalidInputError("already connected; use add_server to add a server")
            listed = await self._list_servers(clients)

            def build() -> Router:
                # A server that could not be listed (lenient mode) starts with no tools.
                catalog = Catalog.from_mcp(
                    {name: {"tools": listed.get(name, [])} for name in clients},
                    lenient=self.lenient,
                    overrides=self._overrides,
                )
                return Router.from_catalog(catalog, **self._router_options())

            router = await anyio.to_thread.run_sync(build)
            self._clients = clients
            # Kept: a change heard while listing is listed again next turn.
            self._changed |= set(clients) - set(listed)
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
            if name not in listed:  # lenient: listed again later
                self._changed.add(name)
            return router

    async def remove_server(self, name: str) -> Router:
        """Drop a server and its tools (the host disconnected it)."""
        async with self._lock:
            self._client(name)
            # The tools go first: cancelled before this, nothing has changed.
            router = await self._replace({name: []})
            del self._clients[name]
            self._changed.discard(name)
            self._retry_at.pop(name, None)
            return router

    async def replace_client(self, name: str, client: McpClient) -> None:
        """Give server ``name`` a new connection (the host restarted or reconnected it); the
        next turn lists it again, since a restarted server may list other tools."""
        _checked_servers({name: client})
        async with self._lock:
            self._client(name)
            self._clients[name] = client
        self.mark_changed(name)

    def client(self, server: str) -> McpClient:
        """The connected client of ``server``."""
        return self._client(server)

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
        self,
        server: str,
        *,
        prompts: bool = False,
        resources: bool = False,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Mark ``server`` changed on each tools-changed event of its ``subscriptions/listen``
        stream, until cancelled or the stream ends: run it in the host's task group
        (``await group.start(router.watch, "github")`` returns once the server has
        acknowledged the subscription). ``prompts`` / ``resources`` also subscribe to those
        lists' changes, for the host: the SDK passes every event on to the client's
        ``message_handler`` (where a proxy hears them), and the router ignores them.

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
        kinds = {"prompts_list_changed": prompts, "resources_list_changed": resources}
        try:
            async with listen(tools_list_changed=True, **kinds) as events:
                task_status.started()
                # The stream does not replay: a change made before it was acknowledged
                # would go unheard, so the next turn lists the server once more.
                self.mark_changed(server)
                async for event in events:
                    if isinstance(event, ToolsListChanged):
                        self.mark_changed(server)
        except ListenNotSupportedError as exc:
            raise InvalidInputError(
                f"server {server!r}: {exc.args[0] if exc.args else exc}; hear changes through "
                "message_handler instead"
            ) from None

    def mark_changed(self, server: str) -> None:
        """Note that ``server``'s tools changed (a host that hears of it its own way): the
        next turn lists it again. A name not connected (any more) is ignored then."""
        self._changed.add(server)
        self._retry_at.pop(server, None)

    @property
    def changed(self) -> frozenset[str]:
        """Servers marked changed and not listed again yet."""
        return frozenset(self._changed)

    async def refresh(self, servers: Iterable[str] | None = None) -> Router:
        """List ``servers`` again (default: those marked changed and due) and re-index the
        tools that changed; a listing identical to the last keeps the current router."""
        if isinstance(servers, str):
            raise InvalidInputError(
                f"servers must be a list of server names, not the string {servers!r}"
            )
        return await self._refresh(None if servers is None else set(servers), self.lenient)

    async def update(self) -> Router:
        """List the servers marked changed and due, as each turn does first: leniently, so
        it never fails for them (see the class docstring)."""
        if not self._changed:
            return self.router
        return await self._refresh(None, lenient=True)

    # -- turns -----------------------------------------------------------------------------

    async def tools(
        self,
        query: str,
        *,
        format: str = "openai",
        state: StateLike = None,
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
        (never a ``select:`` form); ``include`` holds the ids promised last turn
        (:attr:`CallOutcome.found`). A turn with no text (an image alone) routes nothing:
        the model gets the pinned and included tools and the summary pool. The rest are
        :meth:`Router.route`'s and :meth:`Router.promote`'s. Routing runs in a worker
        thread, off the event loop.
        """
        include = _id_list(include)
        scope = _scope(state, allow, deny)
        await self.update()
        router = self.router

        def work() -> Promotion:
            if isinstance(query, str) and not query.strip():
                result = _unrouted(router, include, scope, turn_id)
            else:
                result = router.route(
                    query, history=history, top_k=self.top_k, include=include, forms=False,
                    turn_id=turn_id, **scope,
                )  # fmt: skip
            return router.promote(result, format=format, budget=budget, pool=pool, turn_id=turn_id)

        return await anyio.to_thread.run_sync(work)

    async def call(
        self,
        tool_call: Mapping[str, Any],
        promotion: Promotion,
        *,
        state: StateLike = None,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        turn_id: str = "",
    ) -> CallOutcome:
        """Check ``tool_call`` (in any form :meth:`Router.verify` reads) against the turn's
        ``promotion`` and forward it to its server under the tool's own name.

        A call to a tool the turn did not offer, or with arguments its schema refuses, is
        not forwarded: the result is the error for the model. A ``tool_search`` call is
        answered here: the tools it finds (routed under ``state``, ``allow`` and ``deny``,
        which should be the turn's) that the turn did not offer are listed in the result and
        in :attr:`CallOutcome.found`. A tool its server removed or changed since the turn
        began (as last listed) is refused, or checked against its new schema. ``state``,
        ``allow`` and ``deny`` are checked first: an error in them is raised, since it is the
        host's. Errors the server or the connection raise are the host's too, and propagate.
        """
        scope = _scope(state, allow, deny)  # the host's: checked before the model's call
        router, offered = self._checked_against(promotion)
        verdict = router.verify(tool_call, offered, turn_id=turn_id)
        if verdict.ok and verdict.tool_id == TOOL_SEARCH_ID:
            return await self._answer_search(verdict, offered, scope, turn_id)
        outcome = await self._forward(router, verdict)
        if outcome.found and not await self._admitted(outcome.found[0], scope):
            # Shut out by the state or the allow / deny lists: asking again would not help.
            shut = replace(
                outcome.verdict,
                message=f"Tool {verdict.name!r} is not available. Use one of the available tools.",
            )
            return CallOutcome(error_result(shut), shut)
        return outcome

    async def search(
        self,
        query: str,
        *,
        state: StateLike = None,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        top_k: int | None = None,
        turn_id: str = "",
    ) -> RouteResult:
        """The tools routed for a search ``query`` (words, ``select:a,b`` or ``+term``), as
        a ``tool_search`` call asks, after listing the servers marked changed."""
        scope = _scope(state, allow, deny)
        await self.update()
        return await self._route(self.router, query, scope, top_k=top_k, turn_id=turn_id)

    async def call_any(
        self,
        tool_call: Mapping[str, Any],
        *,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
        turn_id: str = "",
        upstream_call: UpstreamCall | None = None,
    ) -> CallOutcome:
        """Like :meth:`call`, but any tool of the current catalog that ``allow`` / ``deny``
        admit may be called, as when the model learnt of it from a search rather than from a
        turn's tools (see :mod:`toolgate.integrations.mcp.proxy`). The name and the arguments
        are still checked: an unknown name gets the closest one, bad arguments the failing
        path. No server is listed again first: a call waits for no server but its own.

        ``upstream_call(server, client, name, arguments)``, when given, makes the checked
        call in place of ``client.call_tool(name, arguments)`` (the proxy's passes progress
        and requests for input on, :class:`~toolgate.integrations.mcp.relay.RequestRelay`)."""
        router = self.router
        catalog = router.catalog
        allow, deny = pattern_list(allow), pattern_list(deny)
        # Checked against the tools the name can mean, not the whole catalog, whose list of
        # names a verdict would build on every call; only a name no admitted tool has (an
        # error, and its closest name) is looked for among them all.
        name = parse_tool_call(tool_call).name
        meant = {catalog.get(name), catalog.get_exposed(name, ignore_case=True)}
        scope = None if allow is None and deny is None else self._in_scope(catalog, allow, deny)
        offered = [
            tool.id
            for tool in (*meant, *catalog.with_name(name))
            if tool is not None and (scope is None or tool.id in scope)
        ]
        if not offered:
            offered = list(catalog.ids if scope is None else sorted(scope))
        verdict = router.verify(tool_call, offered, turn_id=turn_id)
        return await self._forward(router, verdict, upstream_call)

    # -- internals -------------------------------------------------------------------------

    def _router_options(self) -> dict[str, Any]:
        """``Router.from_catalog``'s options; the default embedder is made here (in a worker
        thread: loading the model takes a while) without progress bars, which would end up
        in a server's logs."""
        if self._options["embedder"] is None:
            precision = (self._config or RouterConfig()).precision
            self._options["embedder"] = default_embedder(precision, progress=False)
        return self._options

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

    def _client(self, server: str) -> McpClient:
        client = self._clients.get(server)
        if client is None:
            raise InvalidInputError(f"no server {server!r}; connected: {sorted(self._clients)}")
        return client

    def _due(self) -> set[str]:
        """The changed servers a turn lists now: connected ones (a late notice about a server
        removed since is dropped) not waiting out a failed listing."""
        self._changed &= set(self._clients)
        now = time.monotonic()
        return {name for name in self._changed if self._retry_at.get(name, 0.0) <= now}

    async def _refresh(self, servers: set[str] | None, lenient: bool) -> Router:
        """List ``servers`` (``None``: the changed ones that are due and not being listed
        already) again and re-index; ``lenient`` for listing failures and bad tools, as the
        class docstring says. Listing runs outside the lock, so a turn that lists one server
        does not wait for another's listing."""
        async with self._lock:
            names = self._due() - self._listing if servers is None else servers
            if not names:
                return self.router
            clients = {name: self._client(name) for name in names}
            # Cleared before listing, so a change heard meanwhile is listed next time.
            self._changed -= names
            self._listing |= names
        try:
            listed = await self._list_servers(clients, lenient)
            async with self._lock:
                router = await self._replace(listed, lenient)
        except BaseException:
            self._changed |= names  # still to be listed: the next turn tries again
            raise
        finally:
            self._listing -= names
        self._changed |= names - set(listed)
        return router

    async def _list_servers(
        self, clients: Mapping[str, McpClient], lenient: bool | None = None
    ) -> dict[str, list[Any]]:
        """Each server's tools, listed concurrently. A server that fails is an error, or when
        ``lenient`` (default: the router's) left out, with a warning, and not listed again
        by a turn until ``retry_after`` has passed."""
        lenient = self.lenient if lenient is None else lenient
        listed: dict[str, list[Any]] = {}
        failed: dict[str, str] = {}

        async def list_one(name: str, client: McpClient) -> None:
            try:
                with anyio.fail_after(self.list_timeout):
                    listed[name] = await list_server_tools(name, client)
            except TimeoutError:
                failed[name] = f"MCP server {name!r}: tools/list took over {self.list_timeout} s"
            except CatalogError as exc:
                failed[name] = str(exc)
            except Exception as exc:  # the SDK's and the transport's errors alike
                failed[name] = f"MCP server {name!r}: tools/list failed: {exc!r}"

        async with anyio.create_task_group() as group:
            for name, client in clients.items():
                group.start_soon(list_one, name, client)
        for name in listed:
            self._retry_at.pop(name, None)
        if failed:
            problems = "; ".join(failed[name] for name in sorted(failed))
            if not lenient:
                raise CatalogError(problems)
            retry_at = time.monotonic() + self.retry_after
            self._retry_at.update(dict.fromkeys(failed, retry_at))
            warnings.warn(
                f"{problems} (its tools stay as last listed, if it ever was; listed again "
                f"after {self.retry_after} s)",
                CatalogWarning,
                stacklevel=3,
            )
        return listed

    async def _replace(
        self, listed: Mapping[str, list[Any]], lenient: bool | None = None
    ) -> Router:
        """The current router with each server's tools replaced by ``listed[server]``; the
        catalog work and the re-embedding run in a worker thread."""
        current = self.router
        lenient = self.lenient if lenient is None else lenient

        def rebuild() -> Router:
            catalog = current.catalog
            for name, tools in listed.items():
                catalog = catalog.replace_server(name, {"tools": tools}, lenient=lenient)
            return current.refresh(catalog) if catalog.diff(current.catalog) else current

        router = await anyio.to_thread.run_sync(rebuild)
        if router is not current:
            self._keep(router)
        return router

    def _keep(self, router: Router) -> None:
        self._routers[router.catalog.version] = router
        self._routers.move_to_end(router.catalog.version)
        while len(self._routers) > _ROUTERS_KEPT:
            self._routers.popitem(last=False)

    def _checked_against(self, promotion: Promotion) -> tuple[Router, Promotion]:
        """The router that made ``promotion`` and the promotion itself, so a call resolves
        names as the model was shown them; for a promotion older than the routers kept, the
        current router and the promotion's tools that it still has."""
        if not isinstance(promotion, Promotion):
            raise InvalidInputError(
                f"call takes the turn's Promotion (from tools()), got {type(promotion).__name__}"
            )
        router = self._routers.get(promotion.catalog_version)
        if router is not None:
            return router, promotion
        current = self.router
        kept = tuple(i for i in promotion.active_ids if i in current.catalog)
        return current, replace(promotion, active_ids=kept, catalog_version=current.catalog.version)

    async def _route(
        self,
        router: Router,
        query: str,
        scope: Mapping[str, Any],
        *,
        top_k: int | None = None,
        turn_id: str,
    ) -> RouteResult:
        """``router.route`` in a worker thread, with this router's ``top_k`` by default."""
        k = self.top_k if top_k is None else top_k
        route = partial(router.route, query, top_k=k, turn_id=turn_id, **scope)
        return await anyio.to_thread.run_sync(route)

    async def _answer_search(
        self, verdict: Verdict, offered: Promotion, scope: Mapping[str, Any], turn_id: str
    ) -> CallOutcome:
        """A ``tool_search`` call's answer, from the tools as they are now: those found that
        the turn did not offer."""
        query = str((verdict.arguments or {}).get("query", ""))
        await self.update()
        router = self.router
        try:
            found = await self._route(router, query, scope, turn_id=turn_id)
        except InvalidInputError as exc:  # the query's (the scope was checked before)
            refused = replace(
                verdict,
                ok=False,
                error="invalid_arguments",
                path="query",
                message=f"{exc}. Describe the tool you need in words, or use "
                "'select:name1,name2' for tools you know by name.",
            )
            return CallOutcome(error_result(refused), refused)
        new = tuple(i for i in found.ids if i not in offered.active_ids)
        result = _search_result([router.catalog[i] for i in new], found.unknown, router.catalog)
        return CallOutcome(result, verdict, found=new)

    async def _admitted(self, tool_id: str, scope: Mapping[str, Any]) -> bool:
        """Whether the state and the allow / deny lists of ``scope`` let ``tool_id`` in."""
        router = self.router
        if tool_id not in router.catalog:
            return False
        check = partial(router.route, f"select:{tool_id}", **scope)
        return tool_id in (await anyio.to_thread.run_sync(check)).ids

    async def _forward(
        self, router: Router, verdict: Verdict, upstream_call: UpstreamCall | None = None
    ) -> CallOutcome:
        """The server's answer to a verified call (made by ``upstream_call`` if given), or
        the error when the check failed.

        ``router`` resolved the call; the current router decides whether the tool is still
        there and what its schema is now.
        """
        if not verdict.ok:
            # A real tool the turn did not offer: promised for the next turn, as the
            # refusal tells the model to ask again.
            asked = verdict.error == "tool_not_available" and verdict.tool_id is not None
            found = (str(verdict.tool_id),) if asked else ()
            return CallOutcome(error_result(verdict), verdict, found=found)
        tool = router.catalog[str(verdict.tool_id)]
        client = self._clients.get(tool.server)
        if client is None:
            return _refused(verdict, tool, f"its server {tool.server!r} was disconnected")
        current = self.router
        if current is not router:
            now = current.catalog.get(tool.id)
            if now is None:
                return _refused(verdict, tool, f"its server {tool.server!r} removed it")
            if now.fingerprint != tool.fingerprint:
                call = {"name": now.exposed_name, "arguments": verdict.arguments or {}}
                recheck = current.verify(call, [now.id])
                if not recheck.ok:
                    recheck = replace(recheck, call_id=verdict.call_id, name=verdict.name)
                    return CallOutcome(error_result(recheck), recheck)
                tool = now
        arguments = dict(verdict.arguments or {})
        if upstream_call is None:
            result = await client.call_tool(tool.name, arguments)
        else:
            result = await upstream_call(tool.server, client, tool.name, arguments)
        return CallOutcome(_as_call_result(result, tool.server), verdict, server=tool.server)


def _unrouted(
    router: Router, include: Sequence[str] | None, scope: Mapping[str, Any], turn_id: str
) -> RouteResult:
    """A turn with nothing to route on: the pinned and included tools, under the gate."""
    wanted = [*router.catalog.pinned_ids, *(include or ())]
    if wanted:
        return router.route("select:" + ",".join(wanted), turn_id=turn_id, **scope)
    allow, deny = scope["allow"], scope["deny"]
    return RouteResult(
        query="", form="none", tools=(), catalog_version=router.catalog.version,
        allow=allow, deny=deny,
    )  # fmt: skip


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


def _scope(state: StateLike, allow: Any, deny: Any) -> dict[str, Any]:
    """The host's state and allow / deny lists for :meth:`Router.route`, checked now: an
    error in them is the host's, never the model's to fix."""
    return {
        "state": State.coerce(state),
        "allow": pattern_list(allow),
        "deny": pattern_list(deny),
    }


def _id_list(include: Iterable[str] | None) -> tuple[str, ...] | None:
    if include is None:
        return None
    if isinstance(include, str) or not isinstance(include, Iterable):
        raise InvalidInputError(f"include must be a list of tool ids or names, got {include!r}")
    return tuple(include)


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


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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


def _search_result(
    found: Sequence[Tool], unknown: Sequence[str], catalog: Catalog
) -> CallToolResult:
    """The answer to a ``tool_search`` call: each tool found, by the name the model will call
    it by, with its summary; and the names ``select:`` asked for that no tool has."""
    lines = [f"- {tool.exposed_name}: {tool.summary}" for tool in found]
    if lines:
        lines.append("These tools are available on your next turn.")
    else:
        lines.append("No other tool matched. Try other words, or 'select:name' for a tool.")
    if unknown:
        lines.append(unknown_names_note(unknown, catalog))
    return text_result("\n".join(lines), is_error=False)
