"""MCP hosts: route each turn over the tools of live MCP servers and forward checked calls.

An agent host connected to a few MCP servers (through the ``mcp`` SDK) sends every server's
tools to the model on every turn. :class:`McpRouter` lists them once, from every server, and
then per turn hands the model only the routed tools (:meth:`McpRouter.tools`, a
:class:`~toolgate.promotion.promote.Promotion` for the provider the host talks to); it checks
each call the model makes against that turn's tools and forwards it, under the tool's own
name, to the server that has it (:meth:`McpRouter.call`). A call that fails the check never
reaches a server: it comes back as an error result the model can act on.

:class:`McpRouter` is a facade over its parts: the servers and the routers over their tools
(:mod:`~toolgate.integrations.mcp.catalogs`), hearing of changes
(:mod:`~toolgate.integrations.mcp.changes`), turns (:mod:`~toolgate.integrations.mcp.turns`),
calls (:mod:`~toolgate.integrations.mcp.calls`) and the answers to ``tool_search``
(:mod:`~toolgate.integrations.mcp.tool_search`).

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

import logging
import os
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import anyio
from anyio.abc import TaskStatus
from mcp.client.session import MessageHandlerFnT

from toolgate.arguments import check_count
from toolgate.catalog.tool import Tool
from toolgate.embedding.cache import EmbeddingCache
from toolgate.embedding.embedder import Embedder
from toolgate.errors import InvalidInputError
from toolgate.forks import BoundToProcess
from toolgate.integrations.mcp.calls import CallForwarder, CallOutcome, UpstreamCall, verified
from toolgate.integrations.mcp.catalogs import ServerCatalogs
from toolgate.integrations.mcp.changes import change_handler, follow_changes
from toolgate.integrations.mcp.listing import McpClient
from toolgate.integrations.mcp.tool_search import answer_tool_search
from toolgate.integrations.mcp.turns import (
    StateLike,
    host_scope,
    included_ids,
    promote_turn,
    route_search,
)
from toolgate.promotion.budget import Budget
from toolgate.promotion.discovery import TOOL_SEARCH_ID
from toolgate.promotion.promote import Promotion
from toolgate.routing.config import RouterConfig
from toolgate.routing.history import HistoryTurn
from toolgate.routing.learned_store import LearnedStore, open_store
from toolgate.routing.learning_queue import LearningQueue, Lesson
from toolgate.routing.learning_starter import LearningStarter
from toolgate.routing.result import RouteResult
from toolgate.routing.router import Router
from toolgate.telemetry.recorder import Telemetry
from toolgate.unicode import trimmed

__all__ = ["LEARN_CLOSE_S", "CallOutcome", "McpClient", "McpRouter", "UpstreamCall"]

_log = logging.getLogger(__name__)

#: Seconds :meth:`McpRouter.aclose` waits by default for the lessons queued to be learned:
#: the proxy stops within the two seconds an MCP client waits for it.
LEARN_CLOSE_S = 1.0


class McpRouter(BoundToProcess):
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
    seconds later, so the turns in between do not wait for it. A tool a server pins itself
    (``_meta.toolgate.pinned``) is no bad tool: the pin is ignored, with a warning naming
    the server and tool, in either mode (only ``overrides`` pin).

    One router serves many conversations at once: per-conversation state (``state``,
    ``history``, the ids promised for the next turn) is the caller's, passed on each call.
    """

    _elsewhere = "make one there and connect it to the servers"

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
        learn: LearnedStore | str | os.PathLike[str] | None = None,
    ) -> None:
        """See the class docstring. ``learn`` (a store, as :meth:`Router.learn` takes) makes
        the router learn from use: a call that passes is feedback for its turn's query, the
        tool used, or missed by the route when last turn's ``tool_search`` found it. That
        lesson is queued and learned by a worker thread (:meth:`drain` waits for it,
        :meth:`aclose` ends it), so the call's result never waits for the store; one that
        fails is logged, not raised: the call ran, and its result is returned. One
        that fails as a router's memory is read (its database down) leaves that router
        routing without it, with one warning, and is tried again by a turn once 30 s have
        passed (:class:`~toolgate.routing.learning_starter.LearningStarter`)."""
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
        self._catalogs = ServerCatalogs(
            self, config=config, embedder=embedder, telemetry=telemetry, overrides=overrides,
            cache=cache,
        )  # fmt: skip
        self._calls = CallForwarder(self._catalogs)
        if learn is not None:
            self._catalogs.learning = LearningStarter(open_store(learn), log=_log)
        # The query and included ids of recent turns, by the id of their promotion, for
        # learning from calls; with a weak reference to it, since CPython gives a freed
        # promotion's id to a new one (a turn with no text, which records nothing), whose
        # calls were learned as answers to the old turn's query.
        self._turns: OrderedDict[int, _Turn] = OrderedDict()
        # The last tool_search: a call of a tool it found is its feedback.
        self._last_search: RouteResult | None = None
        # A forwarded call's lesson is learned by a worker thread: its result never waits
        # for the store (locked by another process for seconds, or a database not answering).
        self._lessons = LearningQueue(log=_log)
        # Stopped with the router, once it has learned what waits: a host dropping a router
        # per session without aclose kept its thread, and the last lesson's router, for ever.
        weakref.finalize(self, self._lessons.finish).atexit = False

    # -- connections ---------------------------------------------------------------------

    async def prepare(self) -> None:
        """Load the embedding model now (in a worker thread), rather than at :meth:`connect`:
        a host that starts its servers meanwhile has the model ready when they are. Loading
        it is the slow part of a first connect; a model given as ``embedder`` is loaded
        already."""
        await self._catalogs.prepare()

    async def connect(self, servers: Mapping[str, McpClient]) -> Router:
        """List every server's tools (all at once, following pagination) and index them."""
        return await self._catalogs.connect(servers)

    async def add_server(self, name: str, client: McpClient) -> Router:
        """Connect one more server: list its tools and index them next to the others."""
        return await self._catalogs.add_server(name, client)

    async def remove_server(self, name: str) -> Router:
        """Drop a server and its tools (the host disconnected it)."""
        return await self._catalogs.remove_server(name)

    async def replace_client(self, name: str, client: McpClient) -> None:
        """Give server ``name`` a new connection (the host restarted or reconnected it); the
        next turn lists it again, since a restarted server may list other tools."""
        await self._catalogs.replace_client(name, client)
        self.mark_changed(name)

    def client(self, server: str) -> McpClient:
        """The connected client of ``server``."""
        return self._catalogs.client(server)

    @property
    def servers(self) -> list[str]:
        """The connected servers' names."""
        return list(self._catalogs.clients)

    @property
    def router(self) -> Router:
        """The current router (replaced by each refresh)."""
        return self._catalogs.router

    def passed_on(self, tool: Tool) -> dict[str, Any]:
        """The fields of ``tool``'s listing by its server that its catalog entry does not
        keep (``outputSchema``, ``icons``, ``_meta``), as the server gave them."""
        return dict(self._catalogs.passed_on.get(tool.server, {}).get(tool.name, {}))

    # -- changes ---------------------------------------------------------------------------

    def message_handler(
        self, server: str, then: MessageHandlerFnT | None = None
    ) -> MessageHandlerFnT:
        """A ``message_handler`` for the client of ``server``: on
        ``notifications/tools/list_changed`` it marks the server changed, so the next turn
        lists it again; every message then goes on to ``then``, if given. It never calls
        the server itself (the SDK runs it in the connection's receive loop)."""
        return change_handler(server, self.mark_changed, then)

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
        client = self.client(server)
        await follow_changes(
            server, client, self.mark_changed,
            prompts=prompts, resources=resources, task_status=task_status,
        )  # fmt: skip

    def mark_changed(self, server: str) -> None:
        """Note that ``server``'s tools changed (a host that hears of it its own way): the
        next turn lists it again. A name not connected (any more) is ignored then."""
        self._catalogs.mark_changed(server)

    @property
    def changed(self) -> frozenset[str]:
        """Servers marked changed and not listed again yet."""
        return self._catalogs.changed

    async def refresh(self, servers: Iterable[str] | None = None) -> Router:
        """List ``servers`` again (default: those marked changed and due) and re-index the
        tools that changed; a listing identical to the last keeps the current router."""
        if isinstance(servers, str):
            raise InvalidInputError(
                f"servers must be a list of server names, not the string {servers!r}"
            )
        names = None if servers is None else set(servers)
        return await self._catalogs.refresh(names, self.lenient)

    async def update(self) -> Router:
        """List the servers marked changed and due, as each turn does first: leniently, so
        it never fails for them (see the class docstring); and with ``learn``, try the store
        again for a router left without its memory when it failed."""
        router = self.router
        if self._catalogs.changed:
            router = await self._catalogs.refresh(None, lenient=True)
        await self._catalogs.start_learning(router)
        return router

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
        include = included_ids(include)
        scope = host_scope(state, allow, deny)
        await self.update()
        promotion = await promote_turn(
            self.router, query, scope, top_k=self.top_k, format=format, history=history,
            include=include, budget=budget, pool=pool, turn_id=turn_id,
        )  # fmt: skip
        if self._catalogs.learning is not None and trimmed(query):
            self._turns[id(promotion)] = _Turn(
                weakref.ref(promotion), query, frozenset(include or ())
            )
            while len(self._turns) > _TURNS_KEPT:
                self._turns.popitem(last=False)
        return promotion

    async def call(
        self,
        tool_call: object,
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
        scope = host_scope(state, allow, deny)  # the host's: checked before the model's call
        router, offered = self._catalogs.for_promotion(promotion)
        verdict, report = await verified(router, tool_call, offered, turn_id)
        if verdict.ok and verdict.tool_id == TOOL_SEARCH_ID:
            await self.update()  # found among the tools as they are now
            answer = await answer_tool_search(
                self.router, verdict, offered, scope, top_k=self.top_k, turn_id=turn_id,
                shown=router.catalog,
            )  # fmt: skip
            report(answer.verdict)  # a search its query fails is no search made
            return answer
        outcome = await self._calls.turn_call(router, verdict, scope, report)
        turn = self._turns.get(id(promotion))
        if turn is not None and turn.promotion() is not promotion:
            turn = None  # another turn's, whose promotion was freed
        tool = verdict.tool_id or ""
        # Into the tools as they are now, which routes read: a server's change since the turn
        # began left its router a version no route reads again.
        learner = self.router if tool in self.router.catalog else router
        if turn is not None and outcome.forwarded and learner.memory is not None:
            # A tool last turn's search found is one the route missed; any other was used.
            missed = tool in turn.found or verdict.name in turn.found
            self._lessons.submit(Lesson(learner, turn.query, tool, missed=missed))
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
        scope = host_scope(state, allow, deny)
        await self.update()
        k = self.top_k if top_k is None else top_k
        result = await route_search(self.router, query, scope, top_k=k, turn_id=turn_id)
        if self._catalogs.learning is not None and result.form == "text":
            # A call of a tool this search found will say the search's words needed it,
            # whatever the servers changed meanwhile (only the last search is kept).
            self._last_search = result
        return result

    async def call_any(
        self,
        tool_call: object,
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
        outcome = await self._calls.any_call(
            tool_call, allow=allow, deny=deny, turn_id=turn_id, upstream_call=upstream_call
        )
        router = self.router
        search = self._last_search
        tool = outcome.verdict.tool_id
        if (
            search is not None
            and outcome.forwarded
            and tool in search
            and tool in router.catalog
            and router.memory is not None
        ):
            self._lessons.submit(Lesson(router, search.query, str(tool)))
        return outcome

    # -- learning --------------------------------------------------------------------------

    @property
    def lessons_dropped(self) -> int:
        """Calls not learned from: the learning queue was full (a stalled store), or closed."""
        return self._lessons.dropped

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait (in a thread) until the calls forwarded so far are learned from, at most
        ``timeout`` seconds; whether they were."""
        return await anyio.to_thread.run_sync(self._lessons.join, timeout, abandon_on_cancel=True)

    async def aclose(self, timeout: float | None = LEARN_CLOSE_S) -> bool:
        """Learn from no more calls: learn those queued, waiting for them (in a thread) at
        most ``timeout`` seconds, past which those still queued are dropped and counted in
        :attr:`lessons_dropped`. Whether every one was learned. A host stopping calls it
        last; a router let go without it learns those queued, then stops its thread, and
        one still alive at exit loses the lessons still queued."""
        dropped = self._lessons.dropped
        closed = await anyio.to_thread.run_sync(
            self._lessons.close, timeout, abandon_on_cancel=True
        )
        if not closed:
            _log.warning(
                "stopping before the last calls were learned from (%d dropped): the learned "
                "store took more than %g s", self._lessons.dropped - dropped, timeout,
            )  # fmt: skip
        return closed


#: Turns remembered for learning from their calls (a host calls within a turn or two).
_TURNS_KEPT = 256


class _Turn(NamedTuple):
    """A turn remembered for learning from its calls: its promotion (weakly), its query and
    the ids it included (found by last turn's ``tool_search``)."""

    promotion: weakref.ref[Promotion]
    query: str
    found: frozenset[str]


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
