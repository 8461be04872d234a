"""The answer to the model's ``tool_search`` call, made in band: the tools it finds that
the turn did not offer, by the names the model will call them by, promised for its next
turn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from mcp.types import CallToolResult

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.tool import Tool
from toolgate.errors import InvalidInputError
from toolgate.integrations.mcp.answers import error_result, text_result, unknown_names_note
from toolgate.integrations.mcp.calls import CallOutcome
from toolgate.integrations.mcp.turns import route_search
from toolgate.promotion.promote import Promotion
from toolgate.routing.router import Router
from toolgate.verify import Verdict

__all__ = ["answer_tool_search"]


async def answer_tool_search(
    router: Router,
    verdict: Verdict,
    offered: Promotion,
    scope: Mapping[str, Any],
    *,
    top_k: int | None,
    turn_id: str,
) -> CallOutcome:
    """The answer to a verified ``tool_search`` call, routed by ``router`` (the current one)
    under the host's ``scope``: the tools found that ``offered`` did not offer."""
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
    result = _search_result([router.catalog[i] for i in new], found.unknown, router.catalog)
    return CallOutcome(result, verdict, found=new)


def _search_result(
    found: Sequence[Tool], unknown: Sequence[str], catalog: Catalog
) -> CallToolResult:
    """Each tool found, by the name the model will call it by, with its summary; and the
    names ``select:`` asked for that no tool has."""
    lines = [f"- {tool.exposed_name}: {tool.summary}" for tool in found]
    if lines:
        lines.append("These tools are available on your next turn.")
    else:
        lines.append("No other tool matched. Try other words, or 'select:name' for a tool.")
    if unknown:
        lines.append(unknown_names_note(unknown, catalog))
    return text_result("\n".join(lines), is_error=False)
