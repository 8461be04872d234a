"""Gemini function declarations, and the conversion between JSON Schema and Gemini's subset.

Reading accepts ``{"function_declarations": [...]}``, ``{"functionDeclarations": [...]}``, a
request's ``tools: [{"functionDeclarations": [...]}]`` and single declarations
(``{"name", "description", "parameters"}`` or ``parametersJsonSchema``), every field in either
spelling (:mod:`toolgate.formats.gemini_fields`; a declaration giving its schema twice, under
both spellings or as both ``parameters`` and a JSON Schema, is a bad entry). Gemini's
``parameters`` are an OpenAPI 3.0 subset; they are read back into JSON Schema (upper-case types
lowered, ``nullable: true`` adds null to the type, the ``anyOf`` and the ``enum``, ``example``
becomes ``examples``).
Built-in tools (``{"googleSearch": {}}``, ``codeExecution``...) run on Google's side and
declare no function, so the reader reports them as bad entries, as it does OpenAI's and
Anthropic's built-ins.

Writing has two forms. :func:`export_json_schema` sends the tool's JSON Schema unchanged as
``parametersJsonSchema``, which the Gemini API and Vertex AI accept in place of ``parameters``;
nothing is lost, so prefer it where the endpoint takes it. :func:`export` produces
``parameters`` in the OpenAPI subset, which every Gemini endpoint takes, because it rejects
much of JSON Schema; :mod:`toolgate.formats.gemini_schema` lists what that conversion changes,
and what it loses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgate.formats.compact import definition_parts, takes_no_arguments
from toolgate.formats.gemini_fields import (
    DECLARATIONS,
    SCHEMA_FIELDS,
    SpellingClash,
    field_key,
    gives,
)
from toolgate.formats.gemini_schema import RefInliner, to_openapi
from toolgate.formats.raw import RawTool, ToolView, extract_meta
from toolgate.formats.schema_walk import map_subschemas, normalize_type_aliases

__all__ = [
    "export",
    "export_json_schema",
    "from_openapi",
    "is_declaration",
    "is_wrapper",
    "parse",
    "parse_builtin",
    "parse_declaration",
    "parse_wrapper",
    "to_openapi",
]

JsonDict = dict[str, Any]

# Entries of a request's ``tools`` list that switch on a tool Google runs, in both casings.
_BUILTIN_TOOLS = frozenset(
    {
        "googleSearch",
        "google_search",
        "googleSearchRetrieval",
        "google_search_retrieval",
        "codeExecution",
        "code_execution",
        "urlContext",
        "url_context",
        "googleMaps",
        "google_maps",
        "computerUse",
        "computer_use",
        "fileSearch",
        "file_search",
        "enterpriseWebSearch",
        "enterprise_web_search",
    }
)


def is_wrapper(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` holds a list of function declarations."""
    return gives(obj, DECLARATIONS)


def is_declaration(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` gives parameters as a Gemini declaration does (either spelling)."""
    return gives(obj, *SCHEMA_FIELDS)


def parse_builtin(obj: Mapping[str, Any], where: str) -> RawTool | None:
    """A bad entry for the Gemini built-in tool ``obj`` switches on, or ``None`` if it is not one.

    ``{"googleSearch": {}}`` runs on Google's side and declares no function, so there is
    nothing to route; like OpenAI's built-ins it is reported, never silently dropped.
    """
    if "name" in obj:
        return None
    key = next((k for k in obj if k in _BUILTIN_TOOLS), None)
    if key is None:
        return None
    problem = (
        f"built-in Gemini tool {key!r} has no function declaration to route: "
        "only function tools can be routed"
    )
    return RawTool(where=where, problem=problem)


def parse(obj: Any, server: str | None) -> list[RawTool]:
    """Read a Gemini document: a declarations wrapper, a request (``{"tools": [...]}``), a list
    of wrappers or declarations, or one declaration."""
    if isinstance(obj, Mapping) and is_wrapper(obj):
        return parse_wrapper(obj, "$", server)
    if isinstance(obj, Mapping) and isinstance(obj.get("tools"), list):
        return _parse_items(obj["tools"], "tools", server)
    if isinstance(obj, Mapping):
        return [parse_declaration(obj, "$", server)]
    if isinstance(obj, list):
        return _parse_items(obj, "tools", server)
    raise ValueError(
        "Gemini tools are a {'functionDeclarations': [...]} object, a request's tools list or "
        f"a declaration, not {type(obj).__name__}"
    )


def _parse_items(items: list[Any], where: str, server: str | None) -> list[RawTool]:
    out: list[RawTool] = []
    for i, item in enumerate(items):
        item_where = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            out.append(RawTool(where=item_where, problem="a Gemini tool is a JSON object"))
        elif is_wrapper(item):
            out.extend(parse_wrapper(item, item_where, server))
        else:
            builtin = parse_builtin(item, item_where)
            out.append(builtin or parse_declaration(item, item_where, server))
    return out


def parse_wrapper(obj: Mapping[str, Any], where: str, server: str | None) -> list[RawTool]:
    """Read every declaration of a ``{"functionDeclarations": [...]}`` object."""
    try:
        key = field_key(obj, DECLARATIONS) or DECLARATIONS
    except SpellingClash as clash:
        return [RawTool(where=where, problem=f"the entry {clash}")]
    items = obj[key]
    if not isinstance(items, list):
        return [RawTool(where=f"{where}.{key}", problem=f"'{key}' must be a list")]
    out = []
    for i, item in enumerate(items):
        item_where = f"{where}.{key}[{i}]"
        if not isinstance(item, Mapping):
            out.append(RawTool(where=item_where, problem="a function declaration is an object"))
        else:
            out.append(parse_declaration(item, item_where, server))
    return out


def parse_declaration(obj: Mapping[str, Any], where: str, server: str | None) -> RawTool:
    """Read one declaration; OpenAPI ``parameters`` are converted to JSON Schema."""
    name = obj.get("name")
    try:
        key = field_key(obj, *SCHEMA_FIELDS)
        schema = None if key is None else obj[key]
        if key == "parameters":
            schema = from_openapi(schema)
    except SpellingClash as clash:
        return RawTool(where=where, name=name, problem=f"the declaration {clash}")
    return RawTool(
        where=where,
        name=name,
        description=obj.get("description"),
        input_schema=schema,
        server=obj.get("server", server),
        meta=extract_meta(obj),
    )


def _from_openapi_node(node: JsonDict) -> JsonDict:
    if node.pop("nullable", False) is True:
        _allow_null(node)
    if "example" in node:
        node["examples"] = [node.pop("example")]
    node.pop("propertyOrdering", None)
    return node


def _allow_null(node: JsonDict) -> None:
    """``nullable: true`` in JSON Schema: null added to every keyword of ``node`` that would
    refuse it (its type, its alternatives, its enum); an untyped node already takes it."""
    if isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    if isinstance(node.get("anyOf"), list):
        node["anyOf"] = [*node["anyOf"], {"type": "null"}]
    if isinstance(node.get("enum"), list) and None not in node["enum"]:
        node["enum"] = [*node["enum"], None]


def from_openapi(schema: Any) -> Any:
    """Gemini/OpenAPI ``parameters`` as JSON Schema. Non-dicts are returned unchanged.

    Fields may be spelled in snake_case (``any_of``, ``max_items``), as google-genai sends
    them; a node giving one under both spellings raises
    :class:`~toolgate.formats.gemini_fields.SpellingClash`.
    """
    camel = _camel_case_fields(schema)
    return map_subschemas(normalize_type_aliases(camel), _from_openapi_node)


# The fields of Gemini's Schema whose two spellings differ, and where it nests schemas.
_TWO_SPELLINGS = (
    "anyOf",
    "maxItems",
    "minItems",
    "maxLength",
    "minLength",
    "maxProperties",
    "minProperties",
    "propertyOrdering",
    "additionalProperties",
)
_ONE_SCHEMA = ("items", "additionalProperties")


def _camel_case_fields(node: Any) -> Any:
    """``node`` (a Gemini Schema) with its fields, and its subschemas', in camelCase; a
    property's name is left as it is."""
    if not isinstance(node, dict):
        return node
    renamed: dict[str, str] = {}
    for field in _TWO_SPELLINGS:
        key = field_key(node, field)
        if key is not None:
            renamed[key] = field
    out = {renamed.get(key, key): value for key, value in node.items()}
    for key in _ONE_SCHEMA:
        if key in out:
            out[key] = _camel_case_fields(out[key])
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [_camel_case_fields(branch) for branch in out["anyOf"]]
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _camel_case_fields(v) for k, v in out["properties"].items()}
    return out


def export(tool: ToolView, *, compact: bool = False) -> dict[str, Any]:
    """The tool as a Gemini function declaration, named by its exposed name (``compact``: see
    :mod:`toolgate.formats.compact`).

    A tool whose root names no argument in ``properties`` but takes keys of any name (maps
    them with ``patternProperties`` or ``additionalProperties``) or alternatives (``anyOf``,
    ``oneOf``: find a user by id or by email) is written as :func:`export_json_schema` writes
    it: the subset's top level is an ``OBJECT`` with properties, and a declaration without
    ``parameters`` would have the model send no argument.
    """
    schema, description = definition_parts(tool, "gemini", compact=compact)
    out: dict[str, Any] = {"name": tool.exposed_name, "description": description}
    parameters = to_openapi(schema)
    if isinstance(parameters, dict) and parameters.get("properties"):
        out["parameters"] = parameters
    elif _beyond_the_subset(tool.input_schema):
        return export_json_schema(tool, compact=compact)
    return out


def _beyond_the_subset(schema: Any) -> bool:
    """Whether the root of ``schema`` (its references followed, its ``allOf`` parts read)
    takes keys it does not name (``patternProperties``, or ``additionalProperties`` /
    ``unevaluatedProperties`` other than ``false``) or alternatives (``anyOf``, ``oneOf``).

    Gemini's ``parameters`` cannot say so: the subset has no ``patternProperties``,
    google-genai refuses ``additionalProperties`` outside Vertex AI, and a top level of
    alternatives has no properties (merged into one ``OBJECT``, the alternatives would lose
    which keys go together, and requiring only what every one requires lets the model send
    none). ``parametersJsonSchema`` can, and the Gemini API and Vertex AI take it on any one
    declaration of a request (the SDK itself sends a plain function's parameters so).
    """
    if not isinstance(schema, dict):
        return False
    root = RefInliner(schema).inline()
    parts = [root, *(p for p in root.get("allOf", []) if isinstance(p, dict))]
    return any(
        part.get("patternProperties")
        or part.get("additionalProperties", False) is not False
        or part.get("unevaluatedProperties", False) is not False
        or part.get("anyOf")
        or part.get("oneOf")
        for part in parts
    )


def export_json_schema(tool: ToolView, *, compact: bool = False) -> dict[str, Any]:
    """The tool as a Gemini function declaration whose ``parametersJsonSchema`` is its schema
    (``compact``: see :mod:`toolgate.formats.compact`).

    A tool that takes no arguments gets no parameters field, as in :func:`export`.
    """
    schema, description = definition_parts(tool, "gemini-json-schema", compact=compact)
    out: dict[str, Any] = {"name": tool.exposed_name, "description": description}
    if not takes_no_arguments(tool.input_schema):
        out["parametersJsonSchema"] = schema
    return out
