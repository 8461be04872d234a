"""Whole tool documents: which format one is in, and reading all of its tools.

A document is a file's or a caller's whole input: an MCP ``tools/list`` result (or its JSON-RPC
envelope, or ``{server: result}`` for several servers), a list of tool dicts in any provider's
shape, Gemini function declarations, JSONL, or ``<toolname>`` text tags.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgate.formats import gemini, jsonl, text_tags
from toolgate.formats.mcp import is_jsonrpc_response, jsonrpc_error
from toolgate.formats.raw import FORMATS, RawTool
from toolgate.formats.tool_dict import parse_tool_dict

__all__ = ["detect_format", "parse_document", "parse_tools_list"]


def is_tools_list(obj: Any) -> bool:
    """Whether ``obj`` is one server's ``tools/list`` result or the JSON-RPC response around it."""
    return isinstance(obj, Mapping) and ("tools" in obj or is_jsonrpc_response(obj))


def _check_one_document(obj: Any) -> None:
    """Refuse a single server's tools beside keys that hold other servers' tools.

    ``{"result": {...}, "slack": {"tools": [...]}}`` is neither one response nor a
    ``{server: response}`` map; reading either part would silently drop the other.
    """
    if not isinstance(obj, Mapping) or not (is_jsonrpc_response(obj) or "tools" in obj):
        return
    own = "result" if is_jsonrpc_response(obj) else "tools"
    others = [str(k) for k, v in obj.items() if k not in ("result", "tools") and is_tools_list(v)]
    if others:
        raise ValueError(
            f"ambiguous catalog: top-level {own!r} holds one server's tools, but "
            f"{', '.join(repr(k) for k in others)} look(s) like other servers' tools/list "
            "results; give one result, or a {server: result} map with every server named"
        )


_TEXT_FORMATS = ("jsonl", "text_tags")


def detect_format(obj: Any) -> str:
    """Guess which format a parsed JSON document (or a text) is in.

    Returns one of :data:`FORMATS`; ``"tools"`` means a list (or ``{"tools": [...]}``) whose
    items are recognised one by one. Raises ``ValueError`` for anything else.
    """
    if isinstance(obj, str):
        first = next((line.strip() for line in obj.splitlines() if line.strip()), "")
        # A JSONL registry may mention <toolname> inside a description; its lines are objects.
        if "<toolname>" in obj and not first.startswith("{"):
            return "text_tags"
        return "jsonl"
    if isinstance(obj, list):
        return "tools"
    if not isinstance(obj, Mapping):
        raise ValueError(
            f"a tool catalog is a JSON object, a list or a text, not {type(obj).__name__}"
        )
    if gemini.is_wrapper(obj):
        return "gemini"
    if is_jsonrpc_response(obj):
        return "mcp"
    if "tools" in obj:
        return "tools"
    if obj and all(is_tools_list(v) for v in obj.values()):
        return "mcp"
    if "name" in obj:
        return "tools"
    raise ValueError(
        "cannot tell the catalog format: expected {'tools': [...]}, {server: {'tools': [...]}}, "
        "a list of tools, Gemini function_declarations, JSONL or <toolname> text tags"
    )


def parse_document(obj: Any, fmt: str, server: str | None) -> list[RawTool]:
    """Read a whole document in format ``fmt`` (see :func:`detect_format`) into raw tools."""
    if fmt in _TEXT_FORMATS and not isinstance(obj, str):
        raise ValueError(
            f"format {fmt!r} reads text (a file path or the text itself), not {type(obj).__name__}"
        )
    _check_one_document(obj)
    if fmt == "text_tags":
        return text_tags.parse(obj, server)
    if fmt == "jsonl":
        return jsonl.parse(obj, server)
    if fmt == "gemini":
        return gemini.parse(obj, server)
    if fmt == "mcp":
        return parse_tools_list(obj, server)
    if fmt in ("tools", "openai", "anthropic"):
        items = obj.get("tools") if isinstance(obj, Mapping) and "tools" in obj else obj
        if isinstance(items, Mapping):
            items = [items]
        if not isinstance(items, list):
            return [RawTool(where="tools", problem="'tools' must be a list")]
        out: list[RawTool] = []
        for i, item in enumerate(items):
            out.extend(parse_tool_dict(item, f"tools[{i}]", server))
        return out
    raise ValueError(f"unknown catalog format {fmt!r}; expected one of {', '.join(FORMATS)}")


def parse_tools_list(obj: Any, server: str | None) -> list[RawTool]:
    """Read a ``tools/list`` result, its JSON-RPC envelope, or a ``{server: result}`` map."""
    if not isinstance(obj, Mapping):
        return [RawTool(where="$", problem="an MCP tools/list result is a JSON object")]
    if is_jsonrpc_response(obj) or "tools" in obj:
        return _parse_tools_list_result(obj, "", server)
    out: list[RawTool] = []
    for name, result in obj.items():
        out.extend(_parse_tools_list_result(result, f"{name}.", str(name)))
    return out


def _parse_tools_list_result(result: Any, where: str, server: str | None) -> list[RawTool]:
    if is_jsonrpc_response(result):
        if not isinstance(result.get("result"), Mapping):
            return [
                RawTool(
                    where=f"{where}error",
                    server=server,
                    problem=f"the tools/list response is a JSON-RPC error: {jsonrpc_error(result)}",
                )
            ]
        return _parse_tools_list_result(result["result"], f"{where}result.", server)
    tools = result.get("tools") if isinstance(result, Mapping) else None
    if not isinstance(tools, list):
        return [RawTool(where=where, problem="a tools/list result needs a 'tools' list")]
    out: list[RawTool] = []
    for i, item in enumerate(tools):
        out.extend(parse_tool_dict(item, f"{where}tools[{i}]", server))
    return out
