"""Anthropic Messages API ``tools``: ``{"name", "description", "input_schema"}``.

Server tools (``{"type": "web_search_20250305", ...}``) run on Anthropic's side and are not
routable; the reader reports them as offenders rather than dropping them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgate.formats.compact import definition_parts
from toolgate.formats.raw import RawTool, ToolView, extract_meta

__all__ = ["export", "parse_tool"]


def parse_tool(obj: Mapping[str, Any], where: str, server: str | None) -> RawTool:
    """Read one Anthropic custom tool."""
    return RawTool(
        where=where,
        name=obj.get("name"),
        description=obj.get("description"),
        input_schema=obj.get("input_schema"),
        server=obj.get("server", server),
        meta=extract_meta(obj),
    )


def export(tool: ToolView, *, compact: bool = False) -> dict[str, Any]:
    """The tool as an Anthropic custom tool, named by its exposed name (``compact``: see
    :mod:`toolgate.formats.compact`)."""
    schema, description = definition_parts(tool, "anthropic", compact=compact)
    return {"name": tool.exposed_name, "description": description, "input_schema": schema}
