"""One tool given as a dict in any provider's shape, read by the shape's own reader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgate.formats import anthropic, gemini, mcp, openai
from toolgate.formats.raw import RawTool
from toolgate.json_limits import json_problem

__all__ = ["parse_tool_dict"]


def parse_tool_dict(obj: Any, where: str, server: str | None) -> list[RawTool]:
    """Read one tool given as a dict in any supported shape.

    A Gemini ``{"functionDeclarations": [...]}`` wrapper yields several tools, hence the list.
    """
    if not isinstance(obj, Mapping):
        return [RawTool(where=where, problem=f"expected a JSON object, got {type(obj).__name__}")]
    # Given as objects, a tool can hold what no JSON text does, and what no repr survives.
    problem = json_problem(obj, strict=False)
    if problem:
        return [RawTool(where=where, name=obj.get("name"), problem=f"the tool holds {problem}")]
    if gemini.is_wrapper(obj):
        return gemini.parse_wrapper(obj, where, server)
    builtin = gemini.parse_builtin(obj, where)
    if builtin is not None:
        return [builtin]
    if openai.is_openai_tool(obj):
        return [openai.parse_tool(obj, where, server)]
    if "inputSchema" in obj:
        return [mcp.parse_tool(obj, where, server)]
    if "input_schema" in obj:
        return [anthropic.parse_tool(obj, where, server)]
    if gemini.is_declaration(obj):
        return [gemini.parse_declaration(obj, where, server)]
    if "type" in obj:
        # Provider built-ins (web_search, code_interpreter...) run on the provider's side.
        problem = f"built-in tool of type {obj['type']!r}: only function tools can be routed"
        return [RawTool(where=where, name=obj.get("name"), problem=problem)]
    return [mcp.parse_tool(obj, where, server)]
