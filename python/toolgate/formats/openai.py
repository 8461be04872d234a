"""OpenAI tools: Chat Completions function wrappers and Responses API function tools.

Chat: ``{"type": "function", "function": {"name", "description", "parameters", "strict"}}``.
Responses: ``{"type": "function", "name", "description", "parameters", "strict"}``.
A ``parameters`` omitted means a function without arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgate.formats.compact import definition_parts, omits_parameters
from toolgate.formats.raw import RawTool, ToolView, extract_meta

__all__ = ["export_chat", "export_responses", "is_openai_tool", "parse_tool"]


def is_openai_tool(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is an OpenAI function tool in either API's shape."""
    return obj.get("type") == "function" and ("function" in obj or "name" in obj)


def parse_tool(obj: Mapping[str, Any], where: str, server: str | None) -> RawTool:
    """Read one OpenAI function tool (Chat wrapper or Responses shape)."""
    inner = obj.get("function", obj)
    if not isinstance(inner, Mapping):
        return RawTool(where=where, problem="'function' must be a JSON object")
    return RawTool(
        where=where,
        name=inner.get("name"),
        description=inner.get("description"),
        input_schema=inner.get("parameters"),
        server=inner.get("server", obj.get("server", server)),
        meta=extract_meta(inner) if extract_meta(inner) is not None else extract_meta(obj),
    )


def export_chat(tool: ToolView, *, compact: bool = False) -> dict[str, Any]:
    """The tool as a Chat Completions function tool, named by its exposed name (``compact``:
    see :mod:`toolgate.formats.compact`)."""
    return {"type": "function", "function": export_responses(tool, compact=compact, typed=False)}


def export_responses(
    tool: ToolView, *, compact: bool = False, typed: bool = True
) -> dict[str, Any]:
    """The tool as a Responses API function tool, named by its exposed name; without its
    ``type`` key (``typed=False``) it is the inside of a Chat wrapper."""
    schema, description = definition_parts(tool, "openai", compact=compact)
    head = {"type": "function"} if typed else {}
    out = {**head, "name": tool.exposed_name, "description": description, "parameters": schema}
    if compact and omits_parameters(tool.input_schema):
        del out["parameters"]
    return out
