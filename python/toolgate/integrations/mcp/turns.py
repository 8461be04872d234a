"""Routing the host's turns and searches over the current router, in a worker thread (off
the event loop), and promoting a turn's tools for the provider the host talks to."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import anyio.to_thread

from toolgate.arguments import tool_list
from toolgate.catalog.scopes import pattern_list
from toolgate.errors import InvalidInputError
from toolgate.promotion.budget import Budget
from toolgate.promotion.promote import Promotion
from toolgate.routing.history import HistoryTurn
from toolgate.routing.result import RouteResult
from toolgate.routing.router import Router
from toolgate.routing.state import State
from toolgate.unicode import trimmed

__all__ = ["StateLike", "host_scope", "included_ids", "promote_turn", "route_search"]

StateLike = State | Mapping[str, Iterable[str]] | None


def host_scope(state: StateLike, allow: Any, deny: Any) -> dict[str, Any]:
    """The host's state and allow / deny lists for :meth:`Router.route`, checked now: an
    error in them is the host's, never the model's to fix."""
    return {
        "state": State.coerce(state),
        "allow": pattern_list(allow),
        "deny": pattern_list(deny),
    }


def included_ids(include: Iterable[str] | None) -> tuple[str, ...] | None:
    """The tool ids or names a turn must include, checked: a turn with no text reads them
    without :meth:`Router.route`'s check."""
    if include is None:
        return None
    if isinstance(include, str) or not isinstance(include, Iterable):
        raise InvalidInputError(f"include must be a list of tool ids or names, got {include!r}")
    return tuple(tool_list(include, "include", "tool ids or names"))


async def promote_turn(
    router: Router,
    query: str,
    scope: Mapping[str, Any],
    *,
    top_k: int | None,
    format: str,
    history: Sequence[HistoryTurn] | None,
    include: tuple[str, ...] | None,
    budget: Budget | None,
    pool: str,
    turn_id: str,
) -> Promotion:
    """The promotion of one turn for the user's message ``query``, read as a person's words;
    a turn with no text routes nothing but the pinned and included tools."""

    def work() -> Promotion:
        if isinstance(query, str) and not trimmed(query):
            result = _unrouted(router, include, scope, turn_id)
        else:
            result = router.route(
                query, history=history, top_k=top_k, include=include, forms=False,
                turn_id=turn_id, **scope,
            )  # fmt: skip
        return router.promote(result, format=format, budget=budget, pool=pool, turn_id=turn_id)

    return await anyio.to_thread.run_sync(work)


async def route_search(
    router: Router, query: str, scope: Mapping[str, Any], *, top_k: int | None, turn_id: str
) -> RouteResult:
    """The tools ``router`` routes for a search ``query`` (words, ``select:a,b`` or
    ``+term``); never "no tool needed": the model asked for tools, so it gets the best."""
    route = partial(router.route, query, top_k=top_k, turn_id=turn_id, decide=False, **scope)
    return await anyio.to_thread.run_sync(route)


def _unrouted(
    router: Router, include: Sequence[str] | None, scope: Mapping[str, Any], turn_id: str
) -> RouteResult:
    """A turn with nothing to route on: the pinned and included tools, under the gate."""
    catalog = router.catalog
    # A tool is selected by its exposed name, which names it alone and holds no comma (an
    # id may: "s/a,b" would select s/a and s/b); anything else is routed as given, and
    # reported unknown when it names no tool.
    wanted = [
        catalog[i].exposed_name if i in catalog else i
        for i in [*catalog.pinned_ids, *(include or ())]
    ]
    if wanted:
        return router.route("select:" + ",".join(wanted), turn_id=turn_id, **scope)
    allow, deny = scope["allow"], scope["deny"]
    return RouteResult(
        query="", form="none", tools=(), catalog_version=router.catalog.version,
        allow=allow, deny=deny,
    )  # fmt: skip
