"""MCP ``tools/list`` results: ``{"tools": [...]}``, one per server or several at once.

Accepted shapes: a ``tools/list`` result, the JSON-RPC response around it
(``{"jsonrpc": "2.0", "id": 1, "result": {"tools": [...]}}``), and a map of several servers'
results or responses (``{"github": {"tools": [...]}, "slack": {"jsonrpc": "2.0", ...}}``). A
JSON-RPC error response is reported as a bad entry naming the server. Tool annotations, the
title and ``outputSchema`` are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgate.formats.compact import definition_parts, repeats_name
from toolgate.formats.raw import RawTool, ToolView, extract_meta

__all__ = ["export", "is_jsonrpc_response", "jsonrpc_error", "parse_tool"]


def parse_tool(obj: Mapping[str, Any], where: str, server: str | None) -> RawTool:
    """Read one MCP tool (``name``, ``description``, ``inputSchema``, ``annotations``...)."""
    extra = {"outputSchema": obj["outputSchema"]} if "outputSchema" in obj else {}
    return RawTool(
        where=where,
        name=obj.get("name"),
        description=obj.get("description"),
        input_schema=obj.get("inputSchema"),
        server=obj.get("server", server),
        annotations=obj.get("annotations"),
        meta=extract_meta(obj),
        title=obj.get("title"),
        extra=extra,
    )


def is_jsonrpc_response(obj: Any) -> bool:
    """Whether ``obj`` is a JSON-RPC response around a ``tools/list`` result (or its error)."""
    if not isinstance(obj, Mapping):
        return False
    if isinstance(obj.get("result"), Mapping) and "tools" in obj["result"]:
        return True
    return obj.get("jsonrpc") == "2.0" and ("result" in obj or "error" in obj)


def jsonrpc_error(response: Mapping[str, Any]) -> str:
    """The server's message (and code) from a JSON-RPC error response."""
    error = response.get("error")
    if not isinstance(error, Mapping):
        return repr(error)
    code = f" (code {error['code']})" if "code" in error else ""
    return f"{error.get('message')!r}{code}"


def export(tool: ToolView, *, compact: bool = False) -> dict[str, Any]:
    """The tool as an MCP ``Tool`` object, named by its exposed name (``compact``: see
    :mod:`toolgate.formats.compact`; a title that repeats the name is left out too)."""
    schema, description = definition_parts(tool, "mcp", compact=compact)
    out: dict[str, Any] = {"name": tool.exposed_name}
    if tool.title and not (compact and repeats_name(tool.title, tool.name)):
        out["title"] = tool.title
    out["description"] = description
    out["inputSchema"] = schema
    if tool.annotations:
        out["annotations"] = tool.annotations
    return out
