"""JSON Schema converted to Gemini's OpenAPI subset, for :mod:`toolgate.formats.gemini`.

:func:`to_openapi` writes the ``parameters`` of :func:`~toolgate.formats.gemini.export`, which
every Gemini endpoint takes, because it rejects much of JSON Schema. What that conversion
changes, and what it loses:

- a local ``$ref`` (any JSON pointer into the schema: ``#/$defs/x``, nested ``$defs``,
  ``#/properties/a/properties/b``, with ``~0``/``~1`` and percent escapes decoded), one to an
  ``$anchor`` and one relative to the ``$id`` of the root or of a subschema are inlined (a
  reference written inside a subschema with its own ``$id`` is still read against the root's);
  a recursive reference, a chain deeper than 32, a reference that would nest the output
  deeper than ``MAX_DEPTH`` (64) levels, or one past the budget of inlined text (which keeps
  definitions that fan out from growing the output exponentially) becomes a free-form
  object (below) whose description says so; ``$defs``, ``$schema``, ``$id`` are
  dropped; keywords beside a ``$ref`` apply with its target's, merged as ``allOf`` (below);
- a ``type`` list becomes one type plus ``nullable``, or ``anyOf`` of the types, each branch
  taking the keywords of its type (``items`` go to the ``ARRAY`` branch, ``properties`` and
  ``required`` to the ``OBJECT`` one, ``enum`` and ``pattern`` to the ``STRING`` one...);
- ``oneOf`` becomes ``anyOf``; ``allOf`` parts are merged into one schema
  (:mod:`toolgate.formats.schema_merge`: a property in two parts merges both, bounds take
  the tighter, enums and types keep what is common);
- ``const`` becomes a one-value ``enum``; a ``null`` in an enum of strings makes the node
  ``nullable``; other non-string enums (Gemini only has string enums) are dropped and their
  values listed in the description instead;
- ``examples`` becomes ``example`` (the first one); ``exclusiveMinimum``/``exclusiveMaximum``
  become ``minimum``/``maximum`` (inclusive: the bound itself is no longer excluded), unless
  an inclusive bound beside them is tighter;
- formats Gemini does not know are dropped, and so are keywords outside the subset
  (``additionalProperties``, ``patternProperties``, ``not``, ``if``/``then``/``else``...);
- a ``true`` subschema becomes an untyped node (any value); a ``false`` property or
  alternative, which nothing matches, is dropped, and ``false`` items bound ``maxItems`` at the
  length of the tuple before them (``0`` without one);
- ``required`` keeps only names that are in ``properties``;
- a tool without parameters gets no ``parameters`` field (Gemini rejects an empty ``OBJECT``);
  for the same reason a nested object without properties (a free-form map) loses its
  ``OBJECT`` type and so accepts any value, its description saying a JSON object is expected;
- a tool whose arguments are keys of any name (a root of ``patternProperties`` or
  ``additionalProperties`` without ``properties``) or alternatives (a root ``anyOf`` or
  ``oneOf`` without ``properties``) has no form in the subset, since the top level must be
  an ``OBJECT`` with properties: rather than be declared as taking no argument, it is
  written with ``parametersJsonSchema``, as
  :func:`~toolgate.formats.gemini.export_json_schema` writes it;
- a tuple (``prefixItems``, or a draft 7 ``items`` list) has one ``items``: the ``anyOf``
  of its positions and of what may follow them (``items``, ``additionalItems``, or any
  value when left out), so no item it accepts is refused;
- an ``ARRAY`` without ``items`` (or with ``items: {}``) gets ``STRING`` items.

The model therefore sees slightly looser constraints than the real schema; :mod:`toolgate.verify`
still checks calls against the full JSON Schema.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from toolgate.formats.pointer import resolve_pointer
from toolgate.formats.schema_merge import INTERSECTED, is_number, merge_all_of
from toolgate.formats.schema_walk import map_subschemas, subschema_slots
from toolgate.json_limits import MAX_DEPTH, nesting

__all__ = ["RefInliner", "to_openapi"]

JsonDict = dict[str, Any]

_KEPT = {
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
}
_FORMATS = {
    "STRING": {"enum", "date-time"},
    "INTEGER": {"int32", "int64"},
    "NUMBER": {"float", "double"},
}
_MAX_REF_DEPTH = 32
# JSON text a schema's references may inline in all: far past what real tools inline (a few
# kilobytes), and small enough that a definition fanning out to the next stays a small request.
_MAX_INLINED_CHARS = 32_000
# Keywords that only mean something for one Gemini type. Gemini rejects them on a node of
# another type or of none, so a type list split into anyOf hands each to its own branch.
_TYPE_KEYWORDS = {
    "STRING": ("enum", "format", "minLength", "maxLength", "pattern"),
    "INTEGER": ("format", "minimum", "maximum"),
    "NUMBER": ("format", "minimum", "maximum"),
    "ARRAY": ("items", "minItems", "maxItems"),
    "OBJECT": ("properties", "required", "minProperties", "maxProperties", "propertyOrdering"),
}
# Items for an array whose schema leaves them open: Gemini requires a typed ``items``, and a
# string is a value the open schema accepts, so no call the model makes under it fails
# verification. (Leaving the type out instead would invite any value but risk a 400.)
_OPEN_ITEMS: JsonDict = {"type": "STRING", "description": "(the tool does not type the items)"}
_FREE_FORM_NOTE = "(a JSON object with any keys)"
_ANY_VALUE_NOTE = "(any JSON value)"


class RefInliner:
    """Inlines the local references of one schema, within a budget of inlined JSON text.

    The depth limit bounds a chain of references but not its breadth: definitions that each
    refer twice to the next would double the output at every level. Each inlining is charged
    the size of its target, so the output stays within the schema's size plus the budget; a
    reference past the budget becomes a free-form object whose description says so. The
    schema is walked breadth first, so the budget goes to the outer levels, which every
    branch has, before the depths of the first branch.
    """

    def __init__(self, root: JsonDict) -> None:
        self.root = root
        self.budget = _MAX_INLINED_CHARS
        self._sizes: dict[str, int] = {}
        self._nestings: dict[str, int] = {}
        self._resolver: Any = None  # built at the first reference a JSON pointer misses
        self.has_all_of = False  # whether the inlined schema has an allOf left to merge

    def inline(self) -> Any:
        """The schema with its references inlined and its definitions dropped."""
        box: list[Any] = [self.root]
        # Each entry is a slot to fill (a container and its key) and the references being
        # inlined around it, which tell a cycle. Only schema positions are slots: a property
        # called "definitions", or a "$ref" inside a default or an enum, is data.
        # The depth of a slot (the root's is 0) bounds what may be inlined into it.
        pending: deque[tuple[Any, Any, tuple[str, ...], int]] = deque([(box, 0, (), 0)])
        while pending:
            container, key, stack, depth = pending.popleft()
            node, stack = self._follow(container[key], stack, depth)
            node = {k: v for k, v in node.items() if k not in ("$defs", "definitions")}
            container[key] = node
            self.has_all_of = self.has_all_of or "allOf" in node
            pending.extend(
                (sub, k, stack, depth + levels) for sub, k, levels in subschema_slots(node)
            )
        return box[0]

    def _follow(self, node: Any, stack: tuple[str, ...], depth: int) -> tuple[Any, tuple[str, ...]]:
        """``node`` with the chain of references it starts inlined, and the stack grown by it;
        ``depth`` is how deep ``node`` sits in the output."""
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            target = resolve_pointer(self.root, ref)
            if target is None:
                target = self._lookup(ref)
            if not isinstance(target, dict):
                return _note_node(node, f"(unresolved reference {ref})"), stack
            if ref in stack or len(stack) >= _MAX_REF_DEPTH:
                # Past the depth limit the chain is treated as the cycle it almost always is.
                return _note_node(node, f"(recursive reference {ref})"), stack
            siblings = {k: v for k, v in node.items() if k not in ("$ref", "$defs", "definitions")}
            # Both apply (2019-09 on): keywords they share that merge by intersecting go
            # through the allOf merge, as {"allOf": [target, siblings]}, two levels deeper.
            merge = not INTERSECTED.isdisjoint(siblings.keys() & target.keys())
            if depth + 2 * merge + self._nesting(ref, target) > MAX_DEPTH:
                # Each definition is within the limit, but a chain of them inlined is not,
                # and every walk of the output after this one recurses.
                return _note_node(
                    node, f"(reference {ref} left out: the schema nests too deeply)"
                ), stack
            cost = self._size(ref, target)
            if cost > self.budget:
                return _note_node(
                    node, f"(reference {ref} left out: the schema is too large)"
                ), stack
            self.budget -= cost
            stack = (*stack, ref)
            if merge:
                return {"allOf": [target, siblings]}, stack
            node = {**target, **siblings}
        return node, stack

    def _lookup(self, ref: str) -> Any:
        """What ``ref`` names when it is no JSON pointer: an ``$anchor``, or a reference
        relative to the ``$id`` of the root or of a subschema. ``None`` if it names nothing
        within the schema: the registry holds only the schema and never fetches a URL."""
        from referencing import Registry
        from referencing.exceptions import Unresolvable
        from referencing.jsonschema import DRAFT202012, specification_with

        if self._resolver is None:
            draft = specification_with(str(self.root.get("$schema", "")), default=DRAFT202012)
            self._resolver = Registry().resolver_with_root(draft.create_resource(self.root))
        try:
            return self._resolver.lookup(ref).contents
        except (Unresolvable, ValueError):  # ValueError: a malformed URL
            return None

    def _size(self, ref: str, target: JsonDict) -> int:
        # Cached: a fan-out refers to the same few targets many times.
        if ref not in self._sizes:
            self._sizes[ref] = len(json.dumps(target, default=str))
        return self._sizes[ref]

    def _nesting(self, ref: str, target: JsonDict) -> int:
        if ref not in self._nestings:
            self._nestings[ref] = nesting(target)
        return self._nestings[ref]


def _note_node(node: JsonDict, note: str) -> JsonDict:
    """The free-form object a reference that is not inlined becomes, ``note`` saying why."""
    return {"type": "object", "description": f"{node.get('description', '')} {note}".strip()}


def _describe_values(node: JsonDict, values: list[Any]) -> None:
    listed = ", ".join(json.dumps(v) for v in values)
    node["description"] = f"{node.get('description', '')} Allowed values: {listed}.".strip()


def _convert_enum(node: JsonDict) -> None:
    """``node``'s enum as Gemini's, which lists strings only: a ``null`` value makes the node
    nullable (where its type allows null), other values are listed in the description."""
    values = [v for v in node["enum"] if v is not None]
    if not all(isinstance(v, str) for v in values):
        _describe_values(node, node.pop("enum"))
        return
    if len(values) < len(node["enum"]):
        kind = node.get("type", "null")
        if kind == "null" or (isinstance(kind, list) and "null" in kind):
            node["nullable"] = True
    if values:
        node["enum"] = values
    else:  # null alone, or nothing: no string enum to give
        del node["enum"]


def _branch(node: JsonDict, kind: str) -> JsonDict:
    """The anyOf branch of type ``kind`` split from ``node``, with the keywords of that type."""
    branch: JsonDict = {"type": kind}
    branch.update({k: node[k] for k in _TYPE_KEYWORDS.get(kind, ()) if k in node})
    _finish(branch)
    return branch


def _convert_type(node: JsonDict) -> None:
    kind = node.get("type")
    if isinstance(kind, list):
        real = [k for k in kind if k != "null"]
        if len(real) < len(kind):
            node["nullable"] = True
        if len(real) == 1:
            node["type"] = real[0]
        else:
            del node["type"]
            if real:
                node["anyOf"] = [_branch(node, str(k).upper()) for k in real]
            for keywords in _TYPE_KEYWORDS.values():
                for key in keywords:
                    node.pop(key, None)
    if node.get("type") == "null":
        # Gemini has no null type: a null-only schema is just "nullable".
        del node["type"]
        node["nullable"] = True
    if isinstance(node.get("type"), str):
        node["type"] = node["type"].upper()
    elif "type" not in node and "anyOf" not in node:
        if "properties" in node:
            node["type"] = "OBJECT"
        elif "items" in node:
            node["type"] = "ARRAY"
        elif "enum" in node:
            node["type"] = "STRING"


def _fold_null_alternatives(node: JsonDict) -> JsonDict:
    # anyOf [X, null] (already converted, so null is {"nullable": True}) is X made nullable.
    alternatives = [a for a in node["anyOf"] if a != {"nullable": True}]
    if len(alternatives) == len(node["anyOf"]):
        return node
    node["nullable"] = True
    del node["anyOf"]
    if len(alternatives) == 1 and isinstance(alternatives[0], dict):
        return {**alternatives[0], **node}
    if alternatives:
        node["anyOf"] = alternatives
    return node


def _without_booleans(node: JsonDict) -> JsonDict:
    """``node`` with the boolean subschemas Gemini would take to ``parameters`` replaced.

    Gemini's schema has no boolean form. ``true`` accepts any value, as an untyped node does
    (items stay open, and so get the open items' type later); a ``false`` property or
    alternative can never match, so it goes, and ``false`` items (or a ``false`` tuple
    position) bound the array's length.
    """
    length = _closed_length(node)
    if isinstance(node.get("properties"), dict):
        node["properties"] = {
            k: _any_value(v) for k, v in node["properties"].items() if v is not False
        }
    for key in ("anyOf", "oneOf", "prefixItems", "items"):
        if isinstance(node.get(key), list):
            node[key] = [_any_value(v) for v in node[key] if v is not False]
            if not node[key] and key != "items":  # an empty "items" list already means open
                del node[key]
    if node.get("items") is True:
        node["items"] = {}
    elif node.get("items") is False:
        del node["items"]
    if length is not None:
        most = node.get("maxItems")
        node["maxItems"] = min(most, length) if type(most) is int and most >= 0 else length
    return node


def _closed_length(node: JsonDict) -> int | None:
    """The most items an array of ``node`` may hold by its tuple form, if it is closed: up to
    the first ``false`` position, or the tuple's length when the items past it are ``false``
    (``items`` after ``prefixItems``; ``additionalItems`` after an ``items`` list)."""
    prefix, rest = node.get("prefixItems"), node.get("items")
    if not isinstance(prefix, list):
        prefix, rest = (rest, node.get("additionalItems")) if isinstance(rest, list) else ([], rest)
    cut = next((i for i, sub in enumerate(prefix) if sub is False), None)
    if cut is not None:
        return cut
    return len(prefix) if rest is False else None


def _tuple_items(node: JsonDict) -> Any:
    """The one ``items`` schema of a tuple (``prefixItems``, or a draft 7 ``items`` list),
    taking every position's schema and what may follow them (``items`` after
    ``prefixItems``, ``additionalItems`` after a list; any value when left out), up to a
    ``false`` position, past which nothing may follow; ``None`` for no tuple."""
    prefix, rest = node.get("prefixItems"), node.get("items", True)
    if not isinstance(prefix, list):
        if not isinstance(rest, list):
            return None
        prefix, rest = rest, node.get("additionalItems", True)
    cut = next((i for i, sub in enumerate(prefix) if sub is False), None)
    if cut is not None:
        prefix, rest = prefix[:cut], False
    if not prefix:  # an empty tuple is its rest: open ones get the open items' type later
        return rest if isinstance(rest, dict) else {}
    branches = [*prefix] if rest is False else [*prefix, rest]
    return {"anyOf": [_any_value(True if b == {} else b) for b in branches]}


def _any_value(schema: Any) -> Any:
    return {"description": _ANY_VALUE_NOTE} if schema is True else schema


def _to_openapi_node(node: JsonDict) -> JsonDict:
    items = _tuple_items(node)  # read before the boolean positions go
    node = _without_booleans(node)
    if "oneOf" in node:
        node["anyOf"] = [*node.get("anyOf", []), *node.pop("oneOf")]
    if "const" in node:
        node.setdefault("enum", [node.pop("const")])
    if items is not None:
        node["items"] = items
    if isinstance(node.get("examples"), list) and node["examples"]:
        node.setdefault("example", node["examples"][0])
    for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        bound = node.get(exclusive)
        if is_number(bound):  # not a draft 4 boolean
            current = node.get(inclusive)
            if is_number(current):  # the tighter of the two
                bound = max(bound, current) if inclusive == "minimum" else min(bound, current)
            node[inclusive] = bound
    if isinstance(node.get("anyOf"), list):
        node = _fold_null_alternatives(node)
    if isinstance(node.get("enum"), list):
        _convert_enum(node)
    _convert_type(node)
    _finish(node)
    return {k: v for k, v in node.items() if k in _KEPT}


def _finish(node: JsonDict) -> None:
    """The clean-up that depends on ``node``'s final Gemini type, and on its children's."""
    if node.get("format") not in _FORMATS.get(node.get("type", ""), set()):
        node.pop("format", None)
    if isinstance(node.get("required"), list):
        names = node.get("properties", {})
        node["required"] = [r for r in node["required"] if r in names]
        if not node["required"]:
            del node["required"]
    if node.get("type") == "ARRAY" and not node.get("items"):
        node["items"] = dict(_OPEN_ITEMS)
    if isinstance(node.get("properties"), dict):
        node["properties"] = {k: _open_free_form(v) for k, v in node["properties"].items()}
    if isinstance(node.get("items"), dict):
        node["items"] = _open_free_form(node["items"])
    if isinstance(node.get("anyOf"), list):
        node["anyOf"] = [_open_free_form(branch) for branch in node["anyOf"]]


def _open_free_form(node: Any) -> Any:
    """A nested ``OBJECT`` without properties as an untyped node that says it wants an object.

    Gemini rejects an ``OBJECT`` without properties, as it does at the top level, where
    :func:`~toolgate.formats.gemini.export` drops the empty ``parameters``. The nested analogue
    drops the type: the model may then send the object it is told to, and that call passes
    verification against the real schema, which a ``STRING`` holding encoded JSON would fail.
    """
    if not isinstance(node, dict) or node.get("type") != "OBJECT" or node.get("properties"):
        return node
    out = {k: v for k, v in node.items() if k != "type" and k not in _TYPE_KEYWORDS["OBJECT"]}
    if "anyOf" not in out:  # alternatives already say what the object holds
        out["description"] = f"{out.get('description', '')} {_FREE_FORM_NOTE}".strip()
    return out


def to_openapi(schema: Any) -> Any:
    """JSON Schema converted to Gemini's OpenAPI subset (see the module docstring)."""
    if not isinstance(schema, dict):
        return schema
    inliner = RefInliner(schema)
    inlined = inliner.inline()
    if inliner.has_all_of:
        # Before the conversion, which keeps no allOf: the parts are still JSON Schema, and
        # a part's required names are still there when another part has the properties.
        inlined = map_subschemas(inlined, merge_all_of)
    return map_subschemas(inlined, _to_openapi_node)
