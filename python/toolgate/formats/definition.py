"""The input schema of one tool definition in any provider's shape, or in a JSON-RPC answer."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from toolgate.errors import CatalogError
from toolgate.formats.gemini_fields import DECLARATIONS, SCHEMA_FIELDS, spellings
from toolgate.formats.raw import EMPTY_SCHEMA, RawTool
from toolgate.formats.tool_dict import parse_tool_dict

__all__ = ["schema_of"]


# Top-level keys that make a dict a tool definition (MCP, Anthropic, OpenAI Chat and
# Responses, Gemini) rather than a bare schema; none of them is a JSON Schema keyword.
_TOOL_KEYS = frozenset(
    {
        "name",
        "function",
        "inputSchema",
        "input_schema",
        *(key for field in (*SCHEMA_FIELDS, DECLARATIONS) for key in spellings(field)),
    }
)


def _is_tool_definition(fetched: Mapping[str, Any]) -> bool:
    return fetched.get("type") == "function" or not _TOOL_KEYS.isdisjoint(fetched)


def _names_tool(tool_id: str, name: str, aliases: Collection[str]) -> bool:
    # A name may hold a '/', and so may a server, so any tail of the id after a '/' counts.
    return name == tool_id or name in aliases or tool_id.endswith(f"/{name}")


def _the_definition(tool_id: str, raws: Sequence[RawTool], aliases: Collection[str]) -> RawTool:
    """The one tool of ``raws`` (several for a Gemini wrapper) that is ``tool_id``."""
    if len(raws) == 1:
        return raws[0]
    named = [r for r in raws if isinstance(r.name, str) and _names_tool(tool_id, r.name, aliases)]
    if len(named) != 1:
        listed = ", ".join(repr(r.name) for r in raws) or "none"
        raise CatalogError(
            f"schema source returned {len(raws)} tool definitions for {tool_id!r} "
            f"({listed}), expected the one named after it"
        )
    return named[0]


def _definition_schema(
    tool_id: str, fetched: Mapping[str, Any], aliases: Collection[str]
) -> dict[str, Any]:
    # Read it exactly as the catalog reads a tool, so a source that serves the catalog's own
    # tool dicts gets the catalog's schemas.
    raw = _the_definition(tool_id, parse_tool_dict(fetched, "", None), aliases)
    if raw.problem:
        raise CatalogError(
            f"schema source returned an unusable tool for {tool_id!r}: {raw.problem}"
        )
    if raw.name is not None and not (
        isinstance(raw.name, str) and _names_tool(tool_id, raw.name, aliases)
    ):
        raise CatalogError(
            f"schema source returned the tool {raw.name!r} when asked for {tool_id!r}"
        )
    if raw.input_schema is None:
        # A missing or null schema is legal in every format and means "no arguments".
        return dict(EMPTY_SCHEMA)
    if not isinstance(raw.input_schema, Mapping):
        raise CatalogError(
            f"schema source returned a tool for {tool_id!r} whose schema is a "
            f"{type(raw.input_schema).__name__}, expected a JSON object"
        )
    return dict(raw.input_schema)


def schema_of(tool_id: str, fetched: Any, *, aliases: Collection[str] = ()) -> dict[str, Any]:
    """The input schema inside what a source returned, or a :class:`CatalogError` saying why not.

    ``fetched`` is a bare schema, or a tool definition in any shape the catalog reads (it has a
    ``name``, a ``function`` wrapper, an ``inputSchema`` key...). A definition without a schema
    takes no arguments; one whose name is not ``tool_id``, a tail of it after a ``/``, or one
    of ``aliases`` (such as the tool's exposed name) is refused.

    >>> schema_of("s/a", {"name": "a", "description": "Do A"})
    {'type': 'object', 'properties': {}}
    """
    if not isinstance(fetched, Mapping):
        raise CatalogError(
            f"schema source returned a {type(fetched).__name__} for {tool_id!r}, "
            "expected a JSON object"
        )
    if _is_tool_definition(fetched):
        return _definition_schema(tool_id, fetched, aliases)
    return dict(fetched)
