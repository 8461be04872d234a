"""Readers and writers for every tool format toolgate speaks.

Each module handles one format: :mod:`~toolgate.adapters.mcp` (``tools/list`` results),
:mod:`~toolgate.adapters.openai` (Chat function wrappers and Responses tools),
:mod:`~toolgate.adapters.anthropic`, :mod:`~toolgate.adapters.gemini` (function declarations),
:mod:`~toolgate.adapters.jsonl` and :mod:`~toolgate.adapters.text_tags`.

Readers turn their input into :class:`RawTool` records and never raise on a bad tool: a record
carries a ``problem`` instead, so the catalog can report every offender at once. This module
also holds what the readers share: recognising one tool dict in any shape
(:func:`parse_tool_dict`), guessing the format of a whole document (:func:`detect_format`), and
the schema walk used to normalise JSON Schema dialects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FORMATS",
    "PROVIDERS",
    "RawTool",
    "base_provider",
    "child_schemas",
    "detect_format",
    "extract_meta",
    "map_subschemas",
    "normalize_type_aliases",
    "parse_document",
    "parse_tool_dict",
]

#: Output formats of :meth:`toolgate.tool.Tool.to_provider`.
PROVIDERS = ("openai", "openai-responses", "anthropic", "gemini", "gemini-json-schema", "mcp")
# Output formats that are a variant of another provider's: their definitions go into that
# provider's request, so they are wrapped and their tokens counted as its are.
_VARIANT_OF = {"openai-responses": "openai", "gemini-json-schema": "gemini"}
#: Input formats :func:`parse_document` accepts.
FORMATS = ("mcp", "openai", "anthropic", "gemini", "jsonl", "text_tags", "tools")

JsonDict = dict[str, Any]


def base_provider(fmt: str) -> str:
    """The provider whose request an output format of :data:`PROVIDERS` belongs to
    (``"openai-responses"`` -> ``"openai"``, ``"gemini-json-schema"`` -> ``"gemini"``)."""
    return _VARIANT_OF.get(fmt, fmt)


@dataclass(frozen=True)
class RawTool:
    """One tool as read from a source, before validation.

    ``where`` locates it in the input (``tools[3]``, ``line 17``) for error messages;
    ``problem`` is set when the input could not even be read as a tool.
    """

    where: str
    name: Any = None
    description: Any = None
    input_schema: Any = None
    server: Any = None
    annotations: Any = None
    meta: Any = None
    title: Any = None
    problem: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


# Keywords whose value is a schema, a list of schemas, or a map of name -> schema.
_SCHEMA_KEYS = (
    "additionalProperties",
    "contentSchema",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "items",
)
_SCHEMA_LIST_KEYS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SCHEMA_MAP_KEYS = (
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
)


def map_subschemas(schema: Any, fn: Callable[[JsonDict], JsonDict]) -> Any:
    """Rebuild ``schema`` bottom-up, applying ``fn`` to every (sub)schema dict.

    Only schema positions are visited, so a property that happens to be called ``type`` or a
    ``default`` value that looks like a schema is left alone. ``schema`` is not modified.
    """
    if not isinstance(schema, dict):
        return schema
    out: JsonDict = dict(schema)
    for key in _SCHEMA_KEYS:
        if isinstance(out.get(key), dict):
            out[key] = map_subschemas(out[key], fn)
    for key in _SCHEMA_LIST_KEYS:
        if isinstance(out.get(key), list):
            out[key] = [map_subschemas(s, fn) for s in out[key]]
    for key in _SCHEMA_MAP_KEYS:
        if isinstance(out.get(key), dict):
            out[key] = {k: map_subschemas(s, fn) for k, s in out[key].items()}
    return fn(out)


def child_schemas(schema: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """The direct subschemas of ``schema`` with their paths (``properties/city``, ``anyOf/0``).

    Only schema positions are visited, as in :func:`map_subschemas`; a child may be a boolean
    schema. ``dependencies`` entries that are lists of names rather than schemas are skipped.
    """
    for key in _SCHEMA_KEYS:
        if isinstance(schema.get(key), (dict, bool)):
            yield key, schema[key]
    for key in _SCHEMA_LIST_KEYS:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                yield f"{key}/{i}", sub
    for key in _SCHEMA_MAP_KEYS:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                if isinstance(sub, (dict, bool)):
                    yield f"{key}/{name}", sub


# Python-, Java- and JavaScript-flavoured type names (BFCL/Gorilla specs, whose Java and
# JavaScript sets type parameters as the language does), and OpenAPI's upper-case ones (Gemini).
_TYPE_ALIASES = {
    "dict": "object",
    "hashmap": "object",
    "float": "number",
    "double": "number",
    "int": "integer",
    "long": "integer",
    "short": "integer",
    "byte": "integer",
    "bigint": "integer",
    "str": "string",
    "char": "string",
    "bool": "boolean",
    "list": "array",
    "arraylist": "array",
    "tuple": "array",
}
_JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}


def _alias_type(name: Any) -> Any:
    if not isinstance(name, str) or name in _JSON_TYPES:
        return name
    lowered = name.lower()
    if lowered in _JSON_TYPES:
        return lowered
    return _TYPE_ALIASES.get(lowered, name)


def _fix_types(node: JsonDict) -> JsonDict:
    kind = node.get("type")
    if isinstance(kind, str) and kind.lower() == "any":
        # "any" means unconstrained, which in JSON Schema is the absence of "type".
        node = {k: v for k, v in node.items() if k != "type"}
    elif isinstance(kind, str):
        node["type"] = _alias_type(kind)
    elif isinstance(kind, list):
        node["type"] = [_alias_type(k) for k in kind]
    return node


def normalize_type_aliases(schema: Any) -> Any:
    """Map non-standard type names onto JSON Schema's.

    Covers the Python-, Java- and JavaScript-flavoured names of BFCL/Gorilla specs (``dict``,
    ``float``, ``tuple``, ``any``, ``HashMap``, ``ArrayList``, ``char``...) and OpenAPI's
    upper-case ones (``STRING``). Everything else is kept, so a schema
    that is still invalid afterwards is reported by the catalog, not silently repaired.

    >>> normalize_type_aliases({"type": "dict", "properties": {"x": {"type": "float"}}})
    {'type': 'object', 'properties': {'x': {'type': 'number'}}}
    """
    return map_subschemas(schema, _fix_types)


def extract_meta(obj: Mapping[str, Any]) -> Any:
    """The toolgate block of a tool: ``x-toolgate``, ``_meta.toolgate`` or ``_meta.x-toolgate``.

    Returns ``None`` when the tool has none. Its shape is checked by the catalog.
    """
    if "x-toolgate" in obj:
        return obj["x-toolgate"]
    meta = obj.get("_meta")
    if isinstance(meta, Mapping):
        for key in ("toolgate", "x-toolgate"):
            if key in meta:
                return meta[key]
    return None


def parse_tool_dict(obj: Any, where: str, server: str | None) -> list[RawTool]:
    """Read one tool given as a dict in any supported shape.

    A Gemini ``{"functionDeclarations": [...]}`` wrapper yields several tools, hence the list.
    """
    from toolgate.adapters import anthropic, gemini, mcp, openai

    if not isinstance(obj, Mapping):
        return [RawTool(where=where, problem=f"expected a JSON object, got {type(obj).__name__}")]
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
    if "parameters" in obj or "parametersJsonSchema" in obj:
        return [gemini.parse_declaration(obj, where, server)]
    if "type" in obj:
        # Provider built-ins (web_search, code_interpreter...) run on the provider's side.
        problem = f"built-in tool of type {obj['type']!r}: only function tools can be routed"
        return [RawTool(where=where, name=obj.get("name"), problem=problem)]
    return [mcp.parse_tool(obj, where, server)]


def is_jsonrpc_response(obj: Any) -> bool:
    """Whether ``obj`` is a JSON-RPC response around a ``tools/list`` result (or its error)."""
    if not isinstance(obj, Mapping):
        return False
    if isinstance(obj.get("result"), Mapping) and "tools" in obj["result"]:
        return True
    return obj.get("jsonrpc") == "2.0" and ("result" in obj or "error" in obj)


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
    if "function_declarations" in obj or "functionDeclarations" in obj:
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
    from toolgate.adapters import gemini, jsonl, mcp, text_tags

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
        return mcp.parse(obj, server)
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
