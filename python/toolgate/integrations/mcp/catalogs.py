"""The connected MCP servers and the routers built over their tools.

:class:`ServerCatalogs` keeps each server's client, lists the servers at connect and again
when they changed, and re-indexes only what changed. It keeps the last few routers too, so a
call is checked against the tools of the turn that offered them.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

import anyio
import anyio.to_thread

from toolgate.catalog.catalog import Catalog
from toolgate.embedding.cache import EmbeddingCache
from toolgate.embedding.embedder import Embedder
from toolgate.errors import CatalogError, CatalogWarning, InvalidInputError
from toolgate.integrations.mcp.builds import Builds
from toolgate.integrations.mcp.listing import McpClient, list_servers_tools
from toolgate.promotion.promote import Promotion
from toolgate.routing.config import RouterConfig
from toolgate.routing.learning_starter import LearningStarter
from toolgate.routing.router import Router, default_embedder
from toolgate.telemetry.recorder import Telemetry

__all__ = ["PASSED_ON", "ListingPolicy", "ServerCatalogs"]

#: The fields of an upstream's tool that the catalog does not keep, and that a listing of
#: the tool passes on as the server gave them.
PASSED_ON = ("outputSchema", "icons", "_meta")

#: What becomes of a pin a server gives its own tool (``_meta.toolgate.pinned``): ignored,
#: with a warning naming the server and tool, in strict and lenient mode, at connect and at
#: every later listing alike. The tool itself is sound, only the claim is not the server's
#: to make, and refusing it would make one server's listing (which the host cannot fix) an
#: error that stops the host, or a proxy in front of every other server.
UPSTREAM_SELF_PINS = "ignore"

#: Routers kept for checking calls against the promotion that offered them, after refreshes
#: replaced the current one; an older promotion is checked against the current tools.
_ROUTERS_KEPT = 8

_NOT_CONNECTED = "not connected: await connect({name: client, ...}) first"


class ListingPolicy(Protocol):
    """How listings are read and their failures handled: the settings of
    :class:`~toolgate.integrations.mcp.McpRouter`, whose docstring says what each does."""

    lenient: bool
    list_timeout: float | None
    retry_after: float


class ServerCatalogs:
    """Each connected server's client and the routers over their tools, listed as
    ``policy`` says (read at each listing). The other options are
    :meth:`Router.from_catalog`'s and :meth:`Catalog.load`'s ``overrides``."""

    def __init__(
        self,
        policy: ListingPolicy,
        *,
        config: RouterConfig | None,
        embedder: Embedder | None,
        telemetry: Telemetry | None,
        overrides: Mapping[str, Mapping[str, Any]] | None,
        cache: EmbeddingCache | str | os.PathLike[str] | bool | None,
    ) -> None:
        """See the class docstring."""
        self.policy = policy
        self._config = config
        self._options: dict[str, Any] = {
            "config": config,
            "embedder": embedder,
            "telemetry": telemetry,
            "cache": cache,
        }
        self._overrides = overrides
        #: What starts the routers learning from the calls of each turn, into McpRouter's
        #: ``learn`` store, or None. A store that fails leaves them routing without it.
        self.learning: LearningStarter | None = None
        # Held while the default embedder is made: by a prepare() and a first connect() at once.
        self._embedder_lock = threading.Lock()
        #: The connected servers' clients, by server name.
        self.clients: dict[str, McpClient] = {}
        #: Each server's tools' :data:`PASSED_ON` fields, by tool name, from the listing
        #: the current tools come from.
        self.passed_on: dict[str, dict[str, dict[str, Any]]] = {}
        self._routers: OrderedDict[str, Router] = OrderedDict()
        self._changed: set[str] = set()
        self._retry_at: dict[str, float] = {}
        self._listing: set[str] = set()
        self._lock = anyio.Lock()
        # A build whose caller was cancelled runs on: the call asking again joins it.
        self._builds: Builds[Router] = Builds()

    @property
    def router(self) -> Router:
        """The current router (replaced by each refresh)."""
        if not self._routers:
            raise InvalidInputError(_NOT_CONNECTED)
        return next(reversed(self._routers.values()))

    @property
    def changed(self) -> frozenset[str]:
        """Servers marked changed and not listed again yet."""
        return frozenset(self._changed)

    def client(self, server: str) -> McpClient:
        """The connected client of ``server``."""
        client = self.clients.get(server)
        if client is None:
            raise InvalidInputError(f"no server {server!r}; connected: {sorted(self.clients)}")
        return client

    async def connect(self, servers: Mapping[str, McpClient]) -> Router:
        """List every server's tools and index them: the first router."""
        clients = _checked_servers(servers)
        async with self._lock:
            if self._routers:
                raise InvalidInputError("already connected; use add_server to add a server")
            listed = await self._list(clients)

            def build() -> Router:
                # A server that could not be listed (lenient mode) starts with no tools.
                catalog = Catalog.from_mcp(
                    {name: {"tools": listed.get(name, [])} for name in clients},
                    lenient=self.policy.lenient,
                    overrides=self._overrides,
                    self_pins=UPSTREAM_SELF_PINS,
                )
                options = self._router_options()
                built = self._builds.get(
                    ("connect", catalog.version), lambda: Router.from_catalog(catalog, **options)
                )
                if self.learning is not None:  # refresh() carries the memory over
                    self.learning.start(built)
                return built

            router = await anyio.to_thread.run_sync(build)
            self.clients = clients
            self.passed_on = {name: _passed_on(listed.get(name, [])) for name in clients}
            # Kept: a change heard while listing is listed again next turn.
            self._changed |= set(clients) - set(listed)
            self._keep(router)
        return router

    async def add_server(self, name: str, client: McpClient) -> Router:
        """List one more server's tools and index them next to the others."""
        _checked_servers({name: client})
        async with self._lock:
            if not self._routers:
                raise InvalidInputError(_NOT_CONNECTED)
            if name in self.clients:
                raise InvalidInputError(f"server {name!r} is already connected")
            listed = await self._list({name: client})
            router = await self._replace(listed)
            self.clients[name] = client
            if name not in listed:  # lenient: listed again later
                self._changed.add(name)
            return router

    async def remove_server(self, name: str) -> Router:
        """Drop a server and its tools."""
        async with self._lock:
            self.client(name)
            # The tools go first: cancelled before this, nothing has changed.
            router = await self._replace({name: []})
            del self.clients[name]
            self.passed_on.pop(name, None)
            self._changed.discard(name)
            self._retry_at.pop(name, None)
            return router

    async def replace_client(self, name: str, client: McpClient) -> None:
        """Give server ``name`` a new client; the caller marks it changed."""
        _checked_servers({name: client})
        async with self._lock:
            self.client(name)
            self.clients[name] = client

    def mark_changed(self, server: str) -> None:
        """List ``server`` again on the next turn, without waiting out a failed listing."""
        self._changed.add(server)
        self._retry_at.pop(server, None)

    async def refresh(self, servers: set[str] | None, lenient: bool) -> Router:
        """List ``servers`` again (``None``: the changed ones that are due and not being
        listed already) and re-index. Listing runs outside the lock, so a turn that lists
        one server does not wait for another's listing."""
        async with self._lock:
            names = self._due() - self._listing if servers is None else servers
            if not names:
                return self.router
            clients = {name: self.client(name) for name in names}
            # Cleared before listing, so a change heard meanwhile is listed next time.
            self._changed -= names
            self._listing |= names
        try:
            listed = await self._list(clients, lenient)
            async with self._lock:
                # Only listings of connections still in place: a server removed (or given
                # another client) while it was listed would otherwise have its tools put
                # back, routed on every turn with no client to call them through.
                listed = {
                    name: tools
                    for name, tools in listed.items()
                    if self.clients.get(name) is clients[name]
                }
                router = await self._replace(listed, lenient)
        except BaseException:
            self._changed |= names  # still to be listed: the next turn tries again
            raise
        finally:
            self._listing -= names
        self._changed |= (names - set(listed)) & set(self.clients)  # not a server removed since
        return router

    def for_promotion(self, promotion: Promotion) -> tuple[Router, Promotion]:
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

    async def start_learning(self, router: Router) -> None:
        """Start ``router`` learning if it does not (the learned store failed when it was
        built) and the store is due to be tried again; in a worker thread, since the store
        may be slow to answer."""
        if self.learning is not None and self.learning.due(router):
            await anyio.to_thread.run_sync(self.learning.start, router)

    async def prepare(self) -> None:
        """Load the embedding model now, in a worker thread, unless it is loaded."""
        await anyio.to_thread.run_sync(self._router_options)

    def _router_options(self) -> dict[str, Any]:
        """``Router.from_catalog``'s options; the default embedder is made here (in a worker
        thread: loading the model takes a while) without progress bars, which would end up
        in a server's logs."""
        with self._embedder_lock:
            if self._options["embedder"] is None:
                precision = (self._config or RouterConfig()).precision
                self._options["embedder"] = default_embedder(precision, progress=False)
        return self._options

    def _due(self) -> set[str]:
        """The changed servers a turn lists now: connected ones (a late notice about a server
        removed since is dropped) not waiting out a failed listing."""
        self._changed &= set(self.clients)
        now = time.monotonic()
        return {name for name in self._changed if self._retry_at.get(name, 0.0) <= now}

    async def _list(
        self, clients: Mapping[str, McpClient], lenient: bool | None = None
    ) -> dict[str, list[Any]]:
        """Each server's tools. A server that fails is an error, or when ``lenient``
        (default: the policy's) left out with a warning, and not listed again by a turn
        until ``retry_after`` has passed."""
        policy = self.policy
        lenient = policy.lenient if lenient is None else lenient
        listed, failed = await list_servers_tools(clients, policy.list_timeout)
        for name in listed:
            self._retry_at.pop(name, None)
        if failed:
            problems = "; ".join(failed[name] for name in sorted(failed))
            if not lenient:
                raise CatalogError(problems)
            retry_at = time.monotonic() + policy.retry_after
            self._retry_at.update(dict.fromkeys(failed, retry_at))
            warnings.warn(
                f"{problems} (its tools stay as last listed, if it ever was; listed again "
                f"after {policy.retry_after} s)",
                CatalogWarning,
                stacklevel=4,
            )
        return listed

    async def _replace(
        self, listed: Mapping[str, list[Any]], lenient: bool | None = None
    ) -> Router:
        """The current router with each server's tools replaced by ``listed[server]``; the
        catalog work and the re-embedding run in a worker thread."""
        current = self.router
        lenient = self.policy.lenient if lenient is None else lenient

        # The servers keep the host's order (a server new to the catalog, say one whose
        # first listing failed, goes to its place), not the order their listings came back
        # in: the order sets the catalog's version, the promoted tools' order and ties.
        order = list(dict.fromkeys([*self.clients, *listed]))

        def rebuild() -> Router:
            catalog = current.catalog
            for name, tools in listed.items():
                catalog = catalog.replace_server(
                    name,
                    {"tools": tools},
                    lenient=lenient,
                    self_pins=UPSTREAM_SELF_PINS,
                    order=order,
                )
            if not catalog.diff(current.catalog):
                return current
            key = ("refresh", current.catalog.version, catalog.version)
            refreshed = self._builds.get(key, lambda: current.refresh(catalog))
            if self.learning is not None:  # built while the store failed, it may learn now
                self.learning.start(refreshed)
            return refreshed

        router = await anyio.to_thread.run_sync(rebuild)
        self.passed_on.update({name: _passed_on(tools) for name, tools in listed.items()})
        if router is not current:
            self._keep(router)
        return router

    def _keep(self, router: Router) -> None:
        self._routers[router.catalog.version] = router
        self._routers.move_to_end(router.catalog.version)
        while len(self._routers) > _ROUTERS_KEPT:
            self._routers.popitem(last=False)


def _passed_on(tools: list[Any]) -> dict[str, dict[str, Any]]:
    """The :data:`PASSED_ON` fields of each of ``tools`` (a server's listing) that has any,
    by tool name."""
    return {
        tool["name"]: {key: tool[key] for key in PASSED_ON if key in tool}
        for tool in tools
        if isinstance(tool, dict)
        and isinstance(tool.get("name"), str)
        and any(key in tool for key in PASSED_ON)
    }


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
