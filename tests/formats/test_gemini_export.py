"""Gemini export: schemas Gemini would answer with a 400, and the real catalogs exported whole."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from google.genai import types as genai_types
from pydantic import ValidationError

from tests.shared_data import SHARED, require
from toolgate.catalog.catalog import Catalog, CatalogWarning
from toolgate.formats import gemini
from toolgate.json_limits import json_problem

DATA = SHARED / "data" / "catalogs"
CATALOGS = ("github-mcp-server.tools-list.json", "docker-mcp-registry.jsonl", "mcpm-registry.jsonl")
# Keywords that only mean something for one type (Gemini rejects them on any other).
TYPED_KEYWORDS = {
    "items": "ARRAY",
    "minItems": "ARRAY",
    "maxItems": "ARRAY",
    "properties": "OBJECT",
    "required": "OBJECT",
    "minProperties": "OBJECT",
    "maxProperties": "OBJECT",
    "enum": "STRING",
    "pattern": "STRING",
    "minLength": "STRING",
    "maxLength": "STRING",
}


def _nodes(node: Any, path: str = "$") -> Iterator[tuple[str, Any]]:
    """Every schema node of a Gemini ``parameters`` tree, with its path."""
    yield path, node
    if not isinstance(node, dict):
        return
    for name, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    for i, sub in enumerate(node.get("anyOf", [])):
        yield from _nodes(sub, f"{path}.anyOf[{i}]")
    if "items" in node:
        yield from _nodes(node["items"], f"{path}[]")


def _problems(parameters: Any) -> list[str]:
    """Where ``parameters`` breaks a rule Gemini enforces with a 400, or keeps a local $ref."""
    found = []
    try:  # google-genai's own model of a schema reaches every node, booleans included
        genai_types.Schema.model_validate(parameters)
    except ValidationError as exc:
        found.extend(f"$.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    for path, node in _nodes(parameters):
        if not isinstance(node, dict):
            found.append(f"{path}: not an object")
            continue
        kind = node.get("type")
        if kind == "OBJECT" and not node.get("properties"):
            found.append(f"{path}: OBJECT without properties")
        if kind == "ARRAY" and not node.get("items"):
            found.append(f"{path}: ARRAY without items")
        for key, owner in TYPED_KEYWORDS.items():
            if key in node and kind != owner:
                found.append(f"{path}: {key} on a node of type {kind}")
        if "(unresolved reference #" in node.get("description", ""):
            found.append(f"{path}: local $ref left unresolved")
    return found


def test_local_refs_resolve_wherever_they_point() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "a/b": {"type": "integer"},
            "t~x": {"type": "boolean"},
            "with space": {"type": "number"},
            "outer": {"$defs": {"inner": {"type": "string", "enum": ["x"]}}},
        },
        "properties": {
            "state": {
                "type": "object",
                "properties": {
                    "leftFormat": {"type": "string", "enum": ["json", "yaml"]},
                    "rightFormat": {
                        "$ref": "#/properties/state/properties/leftFormat",
                        "description": "Right side.",
                    },
                },
            },
            "slash": {"$ref": "#/$defs/a~1b"},
            "tilde": {"$ref": "#/$defs/t~0x"},
            "percent": {"$ref": "#/$defs/with%20space"},
            "nested": {"$ref": "#/$defs/outer/$defs/inner"},
            "pair": {"anyOf": [{"type": "string"}, {"$ref": "#/properties/slash"}]},
            "second": {"$ref": "#/properties/pair/anyOf/1"},
            "tree": {
                "type": "object",
                "properties": {"child": {"$ref": "#/properties/tree"}, "n": {"type": "integer"}},
            },
            "ghost": {"$ref": "#/properties/nowhere"},
        },
    }
    props = gemini.to_openapi(schema)["properties"]
    assert props["state"]["properties"]["rightFormat"] == {
        "type": "STRING",
        "enum": ["json", "yaml"],
        "description": "Right side.",
    }
    assert props["slash"] == {"type": "INTEGER"}
    assert props["tilde"] == {"type": "BOOLEAN"}
    assert props["percent"] == {"type": "NUMBER"}
    assert props["nested"] == {"type": "STRING", "enum": ["x"]}
    assert props["second"] == {"type": "INTEGER"}
    child = props["tree"]["properties"]["child"]
    assert child["properties"]["n"] == {"type": "INTEGER"}
    assert "(recursive reference #/properties/tree)" in child["properties"]["child"]["description"]
    assert "(unresolved reference #/properties/nowhere)" in props["ghost"]["description"]


def test_anchors_and_id_relative_refs_resolve() -> None:
    schema = {
        "$id": "https://tools.example/weather.json",
        "type": "object",
        "$defs": {
            "city": {"$anchor": "city", "type": "string", "description": "A city."},
            "days": {"$id": "days.json", "type": "integer", "minimum": 1},
        },
        "properties": {
            "city": {"$ref": "#city"},
            "days": {"$ref": "days.json"},
            "also": {"$ref": "https://tools.example/days.json"},
        },
    }
    catalog = Catalog.from_tools(
        [{"name": "t", "description": "d", "inputSchema": schema}], server="s"
    )
    parameters = catalog["s/t"].to_provider("gemini")["parameters"]
    props = parameters["properties"]
    assert props["city"] == {"type": "STRING", "description": "A city."}
    assert props["days"] == {"type": "INTEGER", "minimum": 1}
    assert props["also"] == props["days"]
    assert _problems(parameters) == []


def _fan_out_schema(depth: int) -> dict[str, Any]:
    """Definitions that each refer twice to the next: inlining every path doubles per level."""
    defs: dict[str, Any] = {
        f"d{i}": {
            "type": "object",
            "properties": {side: {"$ref": f"#/$defs/d{i + 1}"} for side in ("l", "r")},
        }
        for i in range(depth)
    }
    defs[f"d{depth}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"root": {"$ref": "#/$defs/d0"}}}


# Inlined in full, depth 14 is already a megabyte; depth 30, tens of gigabytes.
@pytest.mark.parametrize("depth", [14, 30])
def test_references_that_fan_out_inline_within_a_budget(depth: int) -> None:
    schema = _fan_out_schema(depth)
    catalog = Catalog.from_tools(
        [{"name": "t", "description": "d", "inputSchema": schema}], server="s"
    )
    parameters = catalog["s/t"].to_provider("gemini")["parameters"]
    text = json.dumps(parameters)
    assert len(text) < 100_000
    # The first levels are still inlined; only what is past the budget is left out.
    top = parameters["properties"]["root"]["properties"]["l"]["properties"]["r"]
    assert top["properties"]["l"]["type"] == "OBJECT"
    assert "too large" in text
    assert _problems(parameters) == []


def test_nested_objects_without_properties_are_not_empty_objects() -> None:
    schema = {
        "type": "object",
        "properties": {
            "inputs": {"type": "object", "description": "Workflow inputs."},
            "empty": {"type": "object", "properties": {}, "required": ["x"]},
            "maybe": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
            "rows": {"type": "array", "items": {"type": "object"}},
            "either": {"type": "object", "oneOf": [{"properties": {"a": {"type": "string"}}}]},
        },
    }
    out = gemini.to_openapi(schema)
    props = out["properties"]
    assert props["inputs"] == {"description": "Workflow inputs. (a JSON object with any keys)"}
    assert props["empty"] == {"description": "(a JSON object with any keys)"}
    assert props["maybe"] == {"nullable": True, "description": "(a JSON object with any keys)"}
    assert props["rows"]["items"] == {"description": "(a JSON object with any keys)"}
    # The alternatives describe the object, so only the empty OBJECT type goes.
    assert props["either"] == {
        "anyOf": [{"type": "OBJECT", "properties": {"a": {"type": "STRING"}}}]
    }
    assert _problems(out) == []
    # The top level keeps its own rule: no parameters at all.
    declaration = Catalog.from_tools(
        [{"name": "run", "description": "Run.", "inputSchema": {"type": "object"}}], server="s"
    )["s/run"].to_provider("gemini")
    assert "parameters" not in declaration


def test_boolean_subschemas_become_nodes_gemini_takes() -> None:
    schema = {
        "type": "object",
        "properties": {
            "payload": True,
            "gone": False,
            "tags": {"type": "array", "items": True},
            "none": {"type": "array", "items": False},
            "v": {"anyOf": [True, {"type": "string"}]},
            "w": {"oneOf": [False, {"type": "integer"}]},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, False]},
        },
        "required": ["payload", "gone"],
    }
    catalog = Catalog.from_tools(
        [{"name": "t", "description": "d", "inputSchema": schema}], server="s"
    )
    declaration = catalog["s/t"].to_provider("gemini")
    genai_types.FunctionDeclaration.model_validate(declaration)
    parameters = declaration["parameters"]
    props = parameters["properties"]
    assert props["payload"] == {"description": "(any JSON value)"}
    assert "gone" not in props  # nothing matches it, so no call sends it
    assert parameters["required"] == ["payload"]
    assert props["tags"]["items"]["type"] == "STRING"
    assert props["none"]["maxItems"] == 0
    assert props["v"]["anyOf"][0] == {"description": "(any JSON value)"}
    assert props["w"]["anyOf"] == [{"type": "INTEGER"}]
    assert props["pair"]["items"] == {"anyOf": [{"type": "STRING"}]}
    assert _problems(parameters) == []


def test_arrays_without_items_get_string_items() -> None:
    schema = {
        "type": "object",
        "properties": {
            "keyWords": {"type": "array", "description": "Words to grep for."},
            "open": {"type": "array", "items": {}},
            "tuple": {"type": "array", "items": []},
            "typed": {"type": "array", "items": {"type": "integer"}},
        },
    }
    out = gemini.to_openapi(schema)
    props = out["properties"]
    for name in ("keyWords", "open", "tuple"):
        assert props[name]["type"] == "ARRAY"
        assert props[name]["items"]["type"] == "STRING"
    assert props["keyWords"]["description"] == "Words to grep for."
    assert props["typed"]["items"] == {"type": "INTEGER"}
    assert _problems(out) == []


def test_type_lists_move_keywords_into_their_branch() -> None:
    schema = {
        "type": "object",
        "properties": {
            "location": {
                "type": ["string", "array"],
                "items": {"type": "string"},
                "minLength": 2,
                "maxItems": 5,
                "description": "A place or places.",
            },
            "ref": {
                "type": ["object", "string", "null"],
                "properties": {"id": {"type": "integer"}},
                "required": ["id", "ghost"],
                "pattern": "^[a-z]+$",
                "format": "date-time",
            },
            "count": {"type": ["integer", "string"], "format": "int64", "minimum": 0},
            "bare": {"type": ["string", "array"]},
        },
    }
    out = gemini.to_openapi(schema)
    props = out["properties"]
    assert props["location"] == {
        "description": "A place or places.",
        "anyOf": [
            {"type": "STRING", "minLength": 2},
            {"type": "ARRAY", "items": {"type": "STRING"}, "maxItems": 5},
        ],
    }
    assert props["ref"] == {
        "nullable": True,
        "anyOf": [
            {"type": "OBJECT", "properties": {"id": {"type": "INTEGER"}}, "required": ["id"]},
            {"type": "STRING", "pattern": "^[a-z]+$", "format": "date-time"},
        ],
    }
    assert props["count"] == {
        "anyOf": [{"type": "INTEGER", "format": "int64", "minimum": 0}, {"type": "STRING"}]
    }
    assert props["bare"]["anyOf"][1]["items"]["type"] == "STRING"
    assert _problems(out) == []


def test_every_real_tool_exports_a_schema_gemini_accepts() -> None:
    paths = [DATA / name for name in CATALOGS]
    require(*paths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CatalogWarning)
        tools = [t for p in paths for t in Catalog.load(p, lenient=True)]
    assert len(tools) > 7000
    problems = []
    for tool in tools:
        declaration = tool.to_provider("gemini")
        if "parameters" in declaration:
            assert declaration["parameters"]["type"] == "OBJECT", tool.id
            problems.extend(f"{tool.id} {p}" for p in _problems(declaration["parameters"]))
    assert problems == []


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},
        {"type": "object", "properties": {}},
        {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
    ],
)
def test_json_schema_form_leaves_out_parameters_a_tool_does_not_take(schema: Any) -> None:
    tool = Catalog.from_tools(
        [{"name": "now", "description": "The time.", "inputSchema": schema}], server="s"
    )["s/now"]
    assert tool.to_provider("gemini-json-schema") == {"name": "now", "description": "The time."}


def test_json_schema_form_sends_the_schema_unchanged() -> None:
    schema = {
        "type": "object",
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "properties": {
            "at": {"$ref": "#/$defs/point"},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            "mode": {"oneOf": [{"const": 1}, {"type": "string", "format": "uuid"}]},
        },
        "required": ["at"],
        "additionalProperties": False,
    }
    free_map = {"type": "object", "additionalProperties": True}
    only_required = {"type": "object", "required": ["x"]}
    catalog = Catalog.from_tools(
        [
            {"name": "draw", "description": "Draw a point.", "inputSchema": schema},
            {"name": "put", "description": "Store any keys.", "inputSchema": free_map},
            {"name": "need", "description": "Needs x.", "inputSchema": only_required},
        ],
        server="s",
    )
    declaration = catalog["s/draw"].to_provider("gemini-json-schema")
    assert declaration == {
        "name": "draw",
        "description": "Draw a point.",
        "parametersJsonSchema": schema,
    }
    assert "parameters" not in declaration  # the two fields are mutually exclusive
    # An open object takes arguments: any key is one.
    put = catalog["s/put"].to_provider("gemini-json-schema")
    assert put["parametersJsonSchema"] == free_map
    # A key it requires but does not describe is still an argument the model must send.
    need = catalog["s/need"].to_provider("gemini-json-schema")
    assert need["parametersJsonSchema"] == only_required


_ENV = {"type": "string", "description": "A value."}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "patternProperties": {"^[A-Z_]+$": _ENV}},
        {"type": "object", "additionalProperties": _ENV, "description": "Variables."},
        {"type": "object", "additionalProperties": True},
        {"$ref": "#/$defs/vars", "$defs": {"vars": {"patternProperties": {"^v": _ENV}}}},
        {"allOf": [{"type": "object"}, {"unevaluatedProperties": _ENV}]},
    ],
)
@pytest.mark.parametrize("compact", [False, True])
def test_a_root_of_keys_of_any_name_is_sent_as_json_schema(schema: Any, compact: bool) -> None:
    # Gemini's parameters cannot hold such a map (no patternProperties; additionalProperties
    # not in the Developer API), and without parameters the model would send no argument.
    tool = Catalog.from_tools(
        [{"name": "set_env", "description": "Set variables.", "inputSchema": schema}], server="s"
    )["s/set_env"]
    declaration = tool.to_provider("gemini", compact=compact)
    assert declaration == tool.to_provider("gemini-json-schema", compact=compact)
    assert "parametersJsonSchema" in declaration
    genai_types.FunctionDeclaration.model_validate(declaration)


def test_a_root_with_properties_keeps_the_openapi_form() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "patternProperties": {"^x-": _ENV},
    }
    tool = Catalog.from_tools(
        [{"name": "tag", "description": "Tag.", "inputSchema": schema}], server="s"
    )["s/tag"]
    declaration = tool.to_provider("gemini")
    assert declaration["parameters"]["properties"] == {"name": {"type": "STRING"}}
    assert "parametersJsonSchema" not in declaration


def test_only_schema_positions_are_inlined_or_stripped() -> None:
    # "definitions" and "$defs" as property names, and "$ref" inside data, are not keywords.
    schema = {
        "type": "object",
        "$defs": {"word": {"type": "string"}},
        "properties": {
            "word": {"$ref": "#/$defs/word"},
            "definitions": {"type": "array", "items": {"type": "string"}},
            "$defs": {"type": "string"},
            "config": {
                "type": "object",
                "properties": {"x": {"type": "string"}},
                "default": {"x": "a", "definitions": {"k": 1}, "$ref": "#/$defs/word"},
                "enum": [{"$ref": "#/$defs/word"}],
            },
        },
        "required": ["word", "definitions"],
    }
    parameters = Catalog.from_tools(
        [{"name": "add", "description": "Add a word.", "inputSchema": schema}], server="s"
    )["s/add"].to_provider("gemini")["parameters"]
    props = parameters["properties"]
    assert list(props) == ["word", "definitions", "$defs", "config"]
    assert props["word"] == {"type": "STRING"}
    assert props["definitions"]["items"] == {"type": "STRING"}
    assert parameters["required"] == ["word", "definitions"]
    default = schema["properties"]["config"]["default"]  # type: ignore[index]
    assert props["config"]["default"] == default
    # A non-string enum is listed in the description, as written.
    assert json.dumps({"$ref": "#/$defs/word"}) in props["config"]["description"]
    assert _problems(parameters) == []


def test_a_deep_chain_of_references_inlines_within_the_nesting_limit() -> None:
    # Each definition nests 60 levels (under MAX_DEPTH), but the chain inlined whole would
    # nest hundreds: deeper than any walk of the output can go.
    defs: dict[str, Any] = {}
    for i in range(12):
        inner: dict[str, Any] = {"$ref": f"#/$defs/d{i + 1}"} if i < 11 else {"type": "string"}
        for _ in range(30):
            inner = {"type": "object", "properties": {"x": inner}}
        defs[f"d{i}"] = inner
    schema = {"type": "object", "properties": {"root": {"$ref": "#/$defs/d0"}}, "$defs": defs}
    tool = Catalog.from_tools(
        [{"name": "deep", "description": "d", "inputSchema": schema}], server="s"
    )["s/deep"]
    for compact in (False, True):
        parameters = tool.to_provider("gemini", compact=compact)["parameters"]
        assert json_problem(parameters) is None
        node = parameters["properties"]["root"]
        for _ in range(30):  # the first definition is inlined
            assert node["type"] == "OBJECT"
            node = node["properties"]["x"]
        assert "(reference #/$defs/d1 left out: the schema nests too deeply)" in json.dumps(node)


def test_all_of_parts_merge_what_they_share() -> None:
    schema = {
        "type": "object",
        "allOf": [
            {
                "properties": {
                    "unit": {"type": "string", "enum": ["c", "f", "k"]},
                    "n": {"type": "number", "minimum": 0, "maximum": 5},
                },
                "required": ["unit"],
            },
            {
                "properties": {
                    "unit": {"description": "Temperature unit", "enum": ["f", "k", "x"]},
                    "n": {"type": "integer", "minimum": -3, "maximum": 10},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
            },
            {"required": ["n"]},
        ],
        "properties": {"tags": {"maxItems": 3}},
    }
    out = gemini.to_openapi(schema)
    assert out["properties"] == {
        "unit": {"type": "STRING", "enum": ["f", "k"], "description": "Temperature unit"},
        "n": {"type": "INTEGER", "minimum": 0, "maximum": 5},
        "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "maxItems": 3},
    }
    assert out["required"] == ["unit", "n"]
    nested = {"allOf": [{"type": "integer", "maximum": 5}, {"maximum": 10}]}
    assert gemini.to_openapi(nested) == {"type": "INTEGER", "maximum": 5}
    assert _problems(out) == []


def test_a_reference_and_its_sibling_keywords_both_apply() -> None:
    schema = {
        "type": "object",
        "$defs": {
            "base": {
                "type": "object",
                "properties": {"id": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["id"],
            }
        },
        "properties": {
            "item": {
                "$ref": "#/$defs/base",
                "properties": {"qty": {"minimum": 1}, "note": {"type": "string"}},
                "required": ["qty"],
                "description": "The item.",
            },
        },
        "required": ["item"],
    }
    parameters = Catalog.from_tools(
        [{"name": "add", "description": "Add an item.", "inputSchema": schema}], server="s"
    )["s/add"].to_provider("gemini")["parameters"]
    assert parameters["properties"]["item"] == {
        "type": "OBJECT",
        "description": "The item.",
        "properties": {
            "id": {"type": "STRING"},
            "qty": {"type": "INTEGER", "minimum": 1},
            "note": {"type": "STRING"},
        },
        "required": ["id", "qty"],
    }
    assert _problems(parameters) == []


def test_a_closed_tuple_is_bounded_by_its_length() -> None:
    pair = [{"type": "number"}, {"type": "number"}]
    schema = {
        "type": "object",
        "properties": {
            "point": {"type": "array", "prefixItems": pair, "items": False, "minItems": 2},
            "short": {"type": "array", "prefixItems": pair, "items": False, "maxItems": 1},
            "legacy": {"type": "array", "items": pair, "additionalItems": False},
            "cut": {"type": "array", "prefixItems": [{"type": "string"}, False]},
        },
    }
    props = gemini.to_openapi(schema)["properties"]
    assert props["point"]["maxItems"] == 2
    assert props["point"]["minItems"] == 2
    assert props["short"]["maxItems"] == 1
    assert props["legacy"]["maxItems"] == 2
    assert props["cut"]["maxItems"] == 1  # a second item can never match


def test_a_nullable_enum_keeps_its_values() -> None:
    schema = {
        "type": "object",
        "properties": {
            "unit": {"type": ["string", "null"], "enum": ["c", "f", None]},
            "bare": {"enum": ["a", None]},
            "closed": {"type": "string", "enum": ["x", None]},  # null is not a string
            "mixed": {"enum": ["a", 1, None]},
        },
    }
    props = gemini.to_openapi(schema)["properties"]
    assert props["unit"] == {"type": "STRING", "nullable": True, "enum": ["c", "f"]}
    assert props["bare"] == {"type": "STRING", "nullable": True, "enum": ["a"]}
    assert props["closed"] == {"type": "STRING", "enum": ["x"]}
    assert "enum" not in props["mixed"]
    assert props["mixed"]["description"] == 'Allowed values: "a", 1, null.'


@pytest.mark.parametrize(
    ("bounds", "expected"),
    [
        ({"minimum": 0, "exclusiveMinimum": 10}, {"minimum": 10}),
        ({"minimum": 20, "exclusiveMinimum": 10}, {"minimum": 20}),
        ({"maximum": 5, "exclusiveMaximum": 3}, {"maximum": 3}),
        ({"maximum": 1, "exclusiveMaximum": 3}, {"maximum": 1}),
        ({"exclusiveMinimum": 2}, {"minimum": 2}),
    ],
)
def test_an_exclusive_bound_becomes_the_tighter_inclusive_one(
    bounds: dict[str, int], expected: dict[str, int]
) -> None:
    assert gemini.to_openapi({"type": "number", **bounds}) == {"type": "NUMBER", **expected}


_BY_ID = {"properties": {"id": {"type": "string"}}, "required": ["id"]}
_BY_EMAIL = {"properties": {"email": {"type": "string"}}, "required": ["email"]}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "oneOf": [_BY_ID, _BY_EMAIL]},
        {"anyOf": [{"type": "object", **_BY_ID}, {"type": "object", **_BY_EMAIL}]},
        {"$ref": "#/$defs/q", "$defs": {"q": {"type": "object", "anyOf": [_BY_ID, _BY_EMAIL]}}},
        {"allOf": [{"type": "object"}, {"oneOf": [_BY_ID, _BY_EMAIL]}]},
    ],
)
@pytest.mark.parametrize("compact", [False, True])
def test_a_root_union_of_argument_objects_is_sent_as_json_schema(
    schema: Any, compact: bool
) -> None:
    # Without properties at its top level the subset would declare no argument at all.
    tool = Catalog.from_tools(
        [{"name": "find", "description": "Find a user.", "inputSchema": schema}], server="s"
    )["s/find"]
    declaration = tool.to_provider("gemini", compact=compact)
    assert declaration == tool.to_provider("gemini-json-schema", compact=compact)
    assert "parametersJsonSchema" in declaration
    genai_types.FunctionDeclaration.model_validate(declaration)


def test_an_open_tuple_takes_every_item_it_accepts() -> None:
    # Gemini has one `items` for every position: it must take the tuple's own positions and
    # what may follow them, or the model is steered away from calls the schema accepts.
    pair = [{"type": "string"}]
    schema = {
        "type": "object",
        "properties": {
            "typed_rest": {"type": "array", "prefixItems": pair, "items": {"type": "integer"}},
            "open_rest": {"type": "array", "prefixItems": pair},
            "legacy": {"type": "array", "items": pair, "additionalItems": {"type": "boolean"}},
        },
    }
    props = gemini.to_openapi(schema)["properties"]
    assert props["typed_rest"]["items"] == {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}
    assert props["open_rest"]["items"] == {
        "anyOf": [{"type": "STRING"}, {"description": "(any JSON value)"}]
    }
    assert props["legacy"]["items"] == {"anyOf": [{"type": "STRING"}, {"type": "BOOLEAN"}]}
    assert _problems(gemini.to_openapi(schema)) == []
