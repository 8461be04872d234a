"""The ``CallToolResult`` texts toolgate answers a model with, instead of a server."""

from __future__ import annotations

from collections.abc import Sequence

from mcp.types import CallToolResult

from toolgate.catalog import Catalog
from toolgate.verify import Verdict, closest_name

__all__ = ["error_result", "text_result", "unknown_names_note"]


def text_result(text: str, *, is_error: bool = False) -> CallToolResult:
    """A result holding ``text`` alone."""
    return CallToolResult.model_validate(
        {"content": [{"type": "text", "text": text}], "isError": is_error}
    )


def error_result(verdict: Verdict) -> CallToolResult:
    """A refused call's verdict as the error result the model reads."""
    return CallToolResult.model_validate(verdict.to_tool_result("mcp"))


def unknown_names_note(unknown: Sequence[str], catalog: Catalog) -> str:
    """``No tool is named: x (did you mean 'y'?).`` for names a ``select:`` asked for that
    no tool of ``catalog`` has, each with the closest exposed name if one is close."""
    names = [tool.exposed_name for tool in catalog]
    parts = []
    for name in unknown:
        close = closest_name(name, names)
        parts.append(f"{name} (did you mean {close!r}?)" if close else name)
    return f"No tool is named: {', '.join(parts)}."
