"""Walking a JSON Schema: its subschemas, and the type names other dialects use."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from toolgate.formats.raw import JsonDict

__all__ = [
    "SCHEMA_KEYWORDS",
    "child_schemas",
    "map_named_subschemas",
    "map_subschemas",
    "normalize_type_aliases",
    "subschema_slots",
]


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


# What a keyword's value holds, as bits: one schema, a list of them, a map of name -> schema
# (``items`` is one schema or a list).
_ONE, _LIST, _MAP = 1, 2, 4
_KINDS: dict[str, int] = {}
for _keys, _kind in ((_SCHEMA_KEYS, _ONE), (_SCHEMA_LIST_KEYS, _LIST), (_SCHEMA_MAP_KEYS, _MAP)):
    for _key in _keys:
        _KINDS[_key] = _KINDS.get(_key, 0) | _kind


#: Every keyword :func:`child_schemas` looks under: a node with none of them has no child.
SCHEMA_KEYWORDS = frozenset(_KINDS)


def map_subschemas(schema: Any, fn: Callable[[JsonDict], JsonDict]) -> Any:
    """Rebuild ``schema`` bottom-up, applying ``fn`` to every (sub)schema dict.

    Only schema positions are visited, so a property that happens to be called ``type`` or a
    ``default`` value that looks like a schema is left alone. ``schema`` is not modified.
    """
    return map_named_subschemas(schema, lambda node, _name: fn(node))


def map_named_subschemas(
    schema: Any, fn: Callable[[JsonDict, str | None], JsonDict], name: str | None = None
) -> Any:
    """:func:`map_subschemas`, with ``fn`` also given the name a subschema is filed under in
    a map (a property's name, a ``$defs`` entry's), else ``None`` (the root: ``name``)."""
    if not isinstance(schema, dict):
        return schema
    out: JsonDict = dict(schema)
    # A node's own keys are few and the schema keywords many: looking each key up is what
    # keeps compacting a gateway request's schemas cheap.
    for key, value in schema.items():
        kind = _KINDS.get(key, 0)
        if not kind:
            continue
        if isinstance(value, dict):
            if kind & _MAP:
                out[key] = {k: map_named_subschemas(s, fn, k) for k, s in value.items()}
            elif kind & _ONE:
                out[key] = map_named_subschemas(value, fn)
        elif isinstance(value, list) and kind & _LIST:
            out[key] = [map_named_subschemas(s, fn) for s in value]
    return fn(out, name)


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


def subschema_slots(node: JsonDict) -> list[tuple[Any, Any, int]]:
    """The slots of ``node``'s direct subschema objects, for a walk that fills them in place:
    each a container, the key in it, and how many levels below ``node`` it is (1 for
    ``items``, 2 for ``properties/city``).

    Only schema positions are listed, as in :func:`map_subschemas`. The maps and lists that
    hold them are first copied into ``node``, so filling a slot changes neither the schema
    ``node`` was copied from nor another copy of it.
    """
    slots: list[tuple[Any, Any, int]] = []
    for key, value in list(node.items()):
        kind = _KINDS.get(key, 0)
        if isinstance(value, dict) and kind & _MAP:
            node[key] = names = dict(value)
            slots.extend((names, name, 2) for name, sub in names.items() if isinstance(sub, dict))
        elif isinstance(value, dict) and kind & _ONE:
            slots.append((node, key, 1))
        elif isinstance(value, list) and kind & _LIST:
            node[key] = subs = list(value)
            slots.extend((subs, i, 2) for i, sub in enumerate(subs) if isinstance(sub, dict))
    return slots


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
