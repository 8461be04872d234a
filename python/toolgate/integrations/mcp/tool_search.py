"""The answer to the model's ``tool_search`` call, made in band: the tools it finds that
the turn did not offer, by the names the model will call them by, promised for its next
turn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from mcp.types import CallToolResult

from toolgate.catalog.catalog import Catalog
from toolgate.errors import InvalidInputError
from toolgate.integrations.mcp.answers import error_result, text_result, unknown_names_note
from toolgate.integrations.mcp.calls import CallOutcome
from toolgate.integrations.mcp.turns import route_search
from toolgate.promotion.promote import Promotion
from toolgate.routing.result import RouteResult
from toolgate.routing.router import Router
from toolgate.verify import Verdict

__all__ = ["answer_tool_search", "asked_for"]


async def answer_tool_search(
    router: Router,
    verdict: Verdict,
    offered: Promotion,
    scope: Mapping[str, Any],
    *,
    top_k: int | None,
    turn_id: str,
    shown: Catalog | None = None,
) -> CallOutcome:
    """The answer to a verified ``tool_search`` call, routed by ``router`` (the current one)
    under the host's ``scope``: the tools found that ``offered`` did not offer. ``shown`` is
    the catalog the turn's tools were shown from (default: ``router``'s), whose names the
    tools found that the turn offers already go by: after a server's change they may differ
    from the current ones, and the turn's calls are checked by the names it showed."""
    query = str((verdict.arguments or {}).get("query", ""))
    try:
        found = await route_search(router, query, scope, top_k=top_k, turn_id=turn_id)
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
    catalog = router.catalog
    result = _search_result(catalog, shown or catalog, found, new, offered.active_ids)
    return CallOutcome(result, verdict, found=new)


def _search_result(
    catalog: Catalog,
    shown: Catalog,
    found: RouteResult,
    new: Sequence[str],
    offered: Sequence[str],
) -> CallToolResult:
    """Each tool found that ``offered`` lacks (``new``), by the name the model will call it
    by, with its summary; the tools it asked for by name that it may call already (by the
    names the turn ``shown`` them under) or that its state keeps out; and the names
    ``select:`` asked for that no tool has."""
    lines = [f"- {catalog[i].exposed_name}: {catalog[i].summary}" for i in new]
    if lines:
        lines.append("These tools are available on your next turn.")
    # A tool asked for by name is never "no match": told so, the model searches again for
    # what it holds already, or for what only a change of state lets it call.
    asked = [i for i in asked_for(found) if i in offered]
    if asked:
        them = "it" if len(asked) == 1 else "them"
        names = ", ".join(shown[i].exposed_name for i in asked)
        lines.append(f"Already available this turn (call {them} directly): {names}.")
    gated = [
        f"{catalog[g.id].exposed_name} ({g.reason})"
        for g in found.gated_out
        if found.form == "select" and g.missing and g.id in catalog and not catalog[g.id].pinned
    ]
    if gated:
        lines.append(f"Not available in the current state: {'; '.join(gated)}.")
    if not lines:
        lines.append("No other tool matched. Try other words, or 'select:name' for a tool.")
    if found.unknown:
        lines.append(unknown_names_note(found.unknown, catalog))
    return text_result("\n".join(lines), is_error=False)


def asked_for(found: RouteResult) -> list[str]:
    """The ids of the tools ``found`` holds because its query asked for them by name
    (``select:``, or the name verbatim)."""
    return [t.id for t in found.tools if t.reason in ("selected", "named")]
