"""The ``tool_search`` tool: how a model asks for tools the route did not show."""

from __future__ import annotations

import itertools

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.tool import Tool
from toolgate.memo import Memo

__all__ = ["TOOL_SEARCH_ID", "search_tool"]


#: The id the synthetic search tool goes by in budget decisions and verdicts. Every tool id is
#: ``server/name``, so an id without a ``/`` can never clash with a catalog tool's.
TOOL_SEARCH_ID = "toolgate:tool_search"


# Short: it is sent every turn. '+word' (a word the name must hold) works too, unadvertised.
_SEARCH_DESCRIPTION = "Load more tools for the next turn: describe the task, or select:name1,name2."


_SEARCH_TOOLS: Memo[str, Tool] = Memo(32)


def search_tool(catalog: Catalog) -> Tool:
    """The synthetic ``tool_search`` tool a digest pool sends with ``catalog``'s tools.

    One per catalog version, so its token counts are cached like any other tool's.
    """
    return _SEARCH_TOOLS.get(catalog.version, lambda: _make_search_tool(catalog))


def _search_tool_name(catalog: Catalog) -> str:
    """``tool_search``, else the first of ``toolgate_tool_search``, ``..._2``, ... that is free.

    Compared ignoring case, like the catalog's exposed names, since some clients fold case.
    """
    taken = {t.exposed_name.casefold() for t in catalog}
    numbered = (f"toolgate_tool_search_{n}" for n in itertools.count(2))
    names = itertools.chain(("tool_search", "toolgate_tool_search"), numbered)
    return next(n for n in names if n not in taken)


def _make_search_tool(catalog: Catalog) -> Tool:
    name = _search_tool_name(catalog)
    schema = {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    }
    return Tool(
        "toolgate",
        "tool_search",
        _SEARCH_DESCRIPTION,
        schema,
        summary="Find tools that are not loaded yet.",
        exposed_name=name,
        pinned=True,
    )
