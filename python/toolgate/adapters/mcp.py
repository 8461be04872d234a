"""MCP ``tools/list`` results: ``{"tools": [...]}``, one per server or several at once.

Accepted shapes: a ``tools/list`` result, the JSON-RPC response around it
(``{"jsonrpc": "2.0", "id": 1, "result": {"tools": [...]}}``), and a map of several servers'
results or responses (``{"github": {"tools": [...]}, "slack": {"jsonrpc": "2.0", ...}}``). A
JSON-RPC error response is reported as a bad entry naming the server. Tool annotations, the
title and ``outputSchema`` are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from toolgate.adapters import RawTool, extract_meta, is_jsonrpc_response, parse_tool_dict

if TYPE_CHECKING:
    from toolgate.tool import Tool

__all__ = ["export", "jsonrpc_error", "parse", "parse_tool"]


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


def jsonrpc_error(response: Mapping[str, Any]) -> str:
    """The server's message (and code) from a JSON-RPC error response."""
    error = response.get("error")
    if not isinstance(error, Mapping):
        return repr(error)
    code = f" (code {error['code']})" if "code" in error else ""
    return f"{error.get('message')!r}{code}"


def _parse_result(result: Any, where: str, server: str | None) -> list[RawTool]:
    if is_jsonrpc_response(result):
        if not isinstance(result.get("result"), Mapping):
            return [
                RawTool(
                    where=f"{where}error",
                    server=server,
                    problem=f"the tools/list response is a JSON-RPC error: {jsonrpc_error(result)}",
                )
            ]
        return _parse_result(result["result"], f"{where}result.", server)
    tools = result.get("tools") if isinstance(result, Mapping) else None
    if not isinstance(tools, list):
        return [RawTool(where=where, problem="a tools/list result needs a 'tools' list")]
    out: list[RawTool] = []
    for i, item in enumerate(tools):
        out.extend(parse_tool_dict(item, f"{where}tools[{i}]", server))
    return out


def parse(obj: Any, server: str | None) -> list[RawTool]:
    """Read a ``tools/list`` result, its JSON-RPC envelope, or a ``{server: result}`` map."""
    if not isinstance(obj, Mapping):
        return [RawTool(where="$", problem="an MCP tools/list result is a JSON object")]
    if is_jsonrpc_response(obj) or "tools" in obj:
        return _parse_result(obj, "", server)
    out: list[RawTool] = []
    for name, result in obj.items():
        out.extend(_parse_result(result, f"{name}.", str(name)))
    return out


def export(tool: Tool) -> dict[str, Any]:
    """The tool as an MCP ``Tool`` object, named by its exposed name."""
    out: dict[str, Any] = {"name": tool.exposed_name}
    if tool.title:
        out["title"] = tool.title
    out["description"] = tool.description
    out["inputSchema"] = tool.input_schema
    if tool.annotations:
        out["annotations"] = tool.annotations
    return out
