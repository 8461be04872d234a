"""The proxy's two meta tools, ``search_tools`` and ``call_tool``: their names, their listings,
reading a ``call_tool`` call's arguments, and the shape of a search's answer."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mcp.types import CallToolResult

from toolgate.catalog.catalog import Catalog
from toolgate.catalog.names import qualified_name
from toolgate.integrations.mcp.answers import text_result
from toolgate.json_limits import loads

__all__ = [
    "CALL",
    "SEARCH",
    "SEARCH_OUTPUT",
    "call_tool_listing",
    "invalid_arguments",
    "meta_names",
    "search_result",
    "search_tool_listing",
    "shadowed_tool",
    "unwrap_call",
]

#: The meta tools' names, unless a pinned upstream tool has one (:func:`meta_names`).
SEARCH = "search_tools"
CALL = "call_tool"


def meta_names(catalog: Catalog) -> tuple[str, str]:
    """The meta tools' names: ``search_tools`` and ``call_tool``, or ``toolgate_``-prefixed
    when a pinned upstream tool is listed under the same name."""
    taken = {catalog[i].exposed_name.casefold() for i in catalog.pinned_ids}
    search, call = (f"toolgate_{name}" if name in taken else name for name in (SEARCH, CALL))
    return search, call


def shadowed_tool(catalog: Catalog, search: str) -> tuple[str, str] | None:
    """The name an upstream tool exposed as ``search``, the search tool's name, is found and
    called by instead (a call of ``search`` searches), and its id; ``None`` when no tool is.

    It is ``<server>__<name>``, as when two servers' names meet, or its id if another tool
    has that name. A pinned tool is not shadowed: the search tool steps aside for it
    (:func:`meta_names`).
    """
    tool = catalog.get_exposed(search)
    if tool is None or tool.pinned:
        return None
    alias = qualified_name(tool.server, tool.name)
    taken = catalog.get_exposed(alias, ignore_case=True) is not None
    return (tool.id if taken else alias), tool.id


def unwrap_call(arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """``call_tool``'s ``name`` and ``arguments``, the latter also as models send it: a
    JSON string, or null for none; ``None`` when they are not that."""
    name, inner = arguments.get("name"), arguments.get("arguments")
    if isinstance(inner, str):
        try:
            inner = loads(inner) if inner.strip() else {}
        except ValueError:  # not JSON, nested past the parser, a 5,000-digit number
            return None
    if inner is None:
        inner = {}
    if not isinstance(name, str) or not isinstance(inner, Mapping):
        return None
    return name, dict(inner)


#: The search tool's ``outputSchema``: what its answer holds as ``structuredContent``.
SEARCH_OUTPUT = {
    "type": "object",
    "properties": {
        "tools": {
            "type": "array",
            "description": "The tools found, best first, each as tools/list gives it",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "description": {"type": "string"},
                    "inputSchema": {"type": "object"},
                    "server": {"type": "string", "description": "The upstream server"},
                },
                "required": ["name", "inputSchema", "server"],
            },
        },
        "unknown": {
            "type": "array",
            "description": "Names a 'select:' asked for that no tool has",
            "items": {"type": "string"},
        },
        "unavailable": {
            "type": "array",
            "description": "Upstream servers not answering now, whose tools may be missing",
            "items": {"type": "string"},
        },
    },
    "required": ["tools"],
}


def search_result(
    text: str, tools: list[dict[str, Any]], unknown: Sequence[str], down: Sequence[str]
) -> CallToolResult:
    """A search's answer: ``text`` for the model, and the tools found as ``structuredContent``
    (:data:`SEARCH_OUTPUT`) for a client that reads them rather than parse the text."""
    structured: dict[str, Any] = {"tools": tools}
    if unknown:
        structured["unknown"] = list(unknown)
    if down:
        structured["unavailable"] = list(down)
    return CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "structuredContent": structured}
    )


def search_tool_listing(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": (
            "Find the tools for a task among every connected server's tools. Describe the "
            "task in words, or use 'select:name1,name2' for tools you know by name, or "
            "'+word' to require a word in the tool's name. Returns each tool's name, "
            "description and input schema."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What you need to do"}},
            "required": ["query"],
        },
        "outputSchema": SEARCH_OUTPUT,
    }


def call_tool_listing(name: str, search: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": (
            f"Call a tool found with {search}: its name, and arguments that match its input schema."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name, as found"},
                "arguments": {"type": "object", "description": "The tool's arguments"},
            },
            "required": ["name"],
        },
    }


def invalid_arguments(message: str) -> CallToolResult:
    body = {"error": "invalid_arguments", "message": message}
    return text_result(json.dumps(body), is_error=True)
