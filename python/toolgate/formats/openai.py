"""OpenAI tools: Chat Completions function wrappers and Responses API function tools.

Chat: ``{"type": "function", "function": {"name", "description", "parameters", "strict"}}``.
Responses: ``{"type": "function", "name", "description", "parameters", "strict"}``.

In Chat an omitted ``parameters`` means a function without arguments, and an omitted
``strict`` means false. Responses exports write both: the API reads an omitted ``strict`` as
true and makes every property required, so the model would invent values for the optional
ones; the SDK's ``FunctionToolParam`` declares both fields required.
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
        strict=inner.get("strict"),
    )


def export_chat(tool: ToolView, *, compact: bool = False) -> dict[str, Any]:
    """The tool as a Chat Completions function tool, named by its exposed name (``compact``:
    see :mod:`toolgate.formats.compact`; it leaves out the ``parameters`` of a tool without
    arguments)."""
    out = _function(tool, compact=compact)
    if compact and not tool.strict and omits_parameters(tool.input_schema):
        del out["parameters"]
    if tool.strict:
        out["strict"] = True
    return {"type": "function", "function": out}


def export_responses(tool: ToolView, *, compact: bool = False) -> dict[str, Any]:
    """The tool as a Responses API function tool, named by its exposed name, always with
    ``parameters`` and ``strict`` (``compact``: see :mod:`toolgate.formats.compact`)."""
    # Strict only for a tool given as strict: a closed schema alone may still use keywords
    # strict mode refuses.
    return {"type": "function", **_function(tool, compact=compact), "strict": tool.strict}


def _function(tool: ToolView, *, compact: bool) -> dict[str, Any]:
    schema, description = definition_parts(tool, "openai", compact=compact)
    return {"name": tool.exposed_name, "description": description, "parameters": schema}
