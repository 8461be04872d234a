"""One request's filtering as the gateway does it, on a worker thread: the route's options,
the request's headers, the filter, and the tokens the filter saved."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolgate.errors import InvalidInputError
from toolgate.formats.raw import base_provider
from toolgate.gateway.config import RouteConfig
from toolgate.gateway.filter import FilteredRequest, ToolFilter
from toolgate.gateway.query import query_at, state_from_headers
from toolgate.routing.config import DEFAULT

__all__ = ["Filtered", "filter_request"]

TOP_K_HEADER = "x-toolgate-top-k"


@dataclass(frozen=True)
class Filtered:
    """A request filtered: the result, the function tools before and after, the schema
    tokens of those left out, and the seconds filtering took."""

    filtered: FilteredRequest
    tools_in: int
    tools_out: int
    tokens_saved: int
    seconds: float


def filter_request(
    tool_filter: ToolFilter,
    body: Mapping[str, Any],
    route: RouteConfig,
    headers: Mapping[str, str],
    *,
    wait: bool = True,
    previous: frozenset[str] | None = None,
    shape: str | None = None,
) -> Filtered:
    """``body`` filtered under ``route``, with the state and top-k its ``headers`` ask for;
    ``wait``, ``previous`` and ``shape`` as :meth:`ToolFilter.filter`'s."""
    started = time.perf_counter()
    query = None
    if route.query is not None:
        query = query_at(body, route.query)
        if query is None:
            raise InvalidInputError(f"the route's query {route.query!r} finds no text in the body")
    filtered = tool_filter.filter(
        body,
        # Unset on the route, the ceiling is the routers' own top_k (`[router] top_k`): the
        # header asks for fewer tools, never for more than the operator allows.
        top_k=_top_k(route.top_k or tool_filter.config.top_k, headers.get(TOP_K_HEADER)),
        # A route without a threshold of its own keeps the router's (`[router] threshold`,
        # a calibrated one): None would lift every floor.
        threshold=DEFAULT if route.threshold is None else route.threshold,
        state=state_from_headers(headers, route.state_headers),
        allow=route.allow,
        deny=route.deny,
        pinned=route.pinned or None,
        budget=route.budget(),
        query=query,
        wait=wait,
        previous=previous,
        shape=shape,
    )
    tools_in = len(filtered.kept) + filtered.dropped_count
    saved = _tokens_saved(filtered)
    seconds = time.perf_counter() - started
    return Filtered(filtered, tools_in, len(filtered.kept), saved, seconds)


def _top_k(ceiling: int, asked: str | None) -> int:
    """The route's top-k, or fewer when the request's header asks for fewer."""
    if asked is None:
        return ceiling
    try:
        value = int(asked)
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidInputError(f"{TOP_K_HEADER} must be an integer >= 1, got {asked!r}")
    return min(value, ceiling)


def _tokens_saved(filtered: FilteredRequest) -> int:
    """Schema tokens of the tools filtered out, as the request's provider counts them: all
    the tools' (counted once per tools array) less the kept ones'."""
    routed = filtered._routed
    if routed is None or not filtered.dropped_count:
        return 0
    provider = "openai" if filtered.provider == "text_tags" else base_provider(filtered.provider)
    kept = sum(routed.catalog[tool_id].token_count(provider) for tool_id in filtered._active)
    return routed.tokens_of_all(provider) - kept
