"""``allOf`` parts merged into one JSON Schema, for a dialect that has no ``allOf`` (Gemini's).

A value must match every part, so what the parts share is intersected: a property named in
two parts is the merge of both schemas, ``required`` is the union, a bound is the tighter of
the two, an ``enum`` keeps the values in both and ``type`` the types in both (``integer``
being a ``number``). A keyword the merge cannot intersect (``pattern``, ``anyOf``...) keeps
the last part's value, and so does an annotation (``description``, ``default``...): each
part alone is looser than all of them, so the merge never refuses a value the schema takes
for those keywords. A contradiction (no type, or no value, in common) also keeps the last
part's, since nothing matches the schema anyway.
"""

from __future__ import annotations

import json
from typing import Any, TypeGuard

from toolgate.formats.raw import JsonDict

__all__ = ["INTERSECTED", "is_number", "merge_all_of", "merge_schemas"]

_LOWER_BOUNDS = frozenset(
    {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"}
)
_UPPER_BOUNDS = frozenset(
    {"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"}
)

#: The keywords two schemas merge by intersecting; for every other one the second wins.
INTERSECTED = _LOWER_BOUNDS | _UPPER_BOUNDS | {"properties", "items", "required", "enum", "type"}


def merge_all_of(node: JsonDict) -> JsonDict:
    """``node`` with its ``allOf`` parts, and its own keywords last, merged into one schema
    (see the module docstring); a node without ``allOf`` is returned as it is. Boolean parts
    are skipped: ``true`` constrains nothing, and a ``false`` part is left to verification."""
    if not isinstance(node.get("allOf"), list):
        return node
    rest = {k: v for k, v in node.items() if k != "allOf"}
    merged: JsonDict = {}
    for part in [*(p for p in node["allOf"] if isinstance(p, dict)), rest]:
        merged = merge_schemas(merged, part)
    return merged


def merge_schemas(first: JsonDict, second: JsonDict) -> JsonDict:
    """One schema that takes what both ``first`` and ``second`` take, as far as the merge can
    say it; ``second`` wins where it cannot (see the module docstring)."""
    merged = dict(first)
    for key, value in second.items():
        merged[key] = _merge_keyword(key, merged[key], value) if key in merged else value
    return merged


def _merge_keyword(key: str, first: Any, second: Any) -> Any:
    if key == "properties" and isinstance(first, dict) and isinstance(second, dict):
        names = dict(first)
        for name, schema in second.items():
            names[name] = _merge_subschema(names[name], schema) if name in names else schema
        return names
    if key == "items" and isinstance(first, (dict, bool)) and isinstance(second, (dict, bool)):
        return _merge_subschema(first, second)
    if key == "required" and isinstance(first, list) and isinstance(second, list):
        return [*first, *(name for name in second if name not in first)]
    if key in _LOWER_BOUNDS | _UPPER_BOUNDS and is_number(first) and is_number(second):
        return max(first, second) if key in _LOWER_BOUNDS else min(first, second)
    if key == "enum" and isinstance(first, list) and isinstance(second, list):
        kept = {_json_key(v) for v in second}
        common = [v for v in first if _json_key(v) in kept]
        return common or second
    if key == "type":
        return _common_type(first, second)
    return second


def _merge_subschema(first: Any, second: Any) -> Any:
    """The merge of two subschemas, either of which may be a boolean schema."""
    if first is True or second is False:
        return second
    if second is True or first is False:
        return first
    if isinstance(first, dict) and isinstance(second, dict):
        return merge_schemas(first, second)
    return second


def _common_type(first: Any, second: Any) -> Any:
    """The types both ``type`` values allow (``integer`` is a ``number``), else ``second``."""
    a, b = _types(first), _types(second)
    if a is None or b is None:
        return second
    common = [t for t in a if t in b or (t == "integer" and "number" in b)]
    common += [t for t in b if t == "integer" and "number" in a and t not in common]
    if not common:
        return second
    return common[0] if len(common) == 1 else common


def _types(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(t, str) for t in value):
        return value
    return None


def is_number(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is a JSON number (a bool is not one, though Python says so)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_key(value: Any) -> str:
    # JSON text, not Python equality: 1 and true are different enum values.
    return json.dumps(value, sort_keys=True, default=str)
