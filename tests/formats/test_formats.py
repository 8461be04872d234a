"""Every input format reads the same tool alike; every output format is what its API takes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import FunctionToolParam
from pydantic import TypeAdapter

from tests.shared_data import CATALOGS, require
from toolgate.catalog.catalog import Catalog, CatalogWarning, InvalidToolsError
from toolgate.formats import gemini, jsonl, text_tags
from toolgate.formats.requests import read_tool_choice
from toolgate.formats.schema_walk import normalize_type_aliases
from toolgate.verify import verify_call

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
}
GITHUB_FILE = "github-mcp-server.tools-list.json"
DESCRIPTION = "Get the weather forecast for a city. Up to seven days."

SHAPES: dict[str, Any] = {
    "mcp": {"tools": [{"name": "forecast", "description": DESCRIPTION, "inputSchema": SCHEMA}]},
    "openai-chat": [
        {
            "type": "function",
            "function": {"name": "forecast", "description": DESCRIPTION, "parameters": SCHEMA},
        }
    ],
    "openai-chat-body": {
        "model": "x",
        "tools": [
            {
                "type": "function",
                "function": {"name": "forecast", "description": DESCRIPTION, "parameters": SCHEMA},
            }
        ],
    },
    "openai-responses": [
        {"type": "function", "name": "forecast", "description": DESCRIPTION, "parameters": SCHEMA}
    ],
    "anthropic": [{"name": "forecast", "description": DESCRIPTION, "input_schema": SCHEMA}],
    "gemini-snake": {
        "function_declarations": [
            {
                "name": "forecast",
                "description": DESCRIPTION,
                "parameters": {
                    "type": "OBJECT",
                    "properties": {
                        "city": {"type": "STRING", "description": "City name"},
                        "days": {"type": "INTEGER", "minimum": 1, "maximum": 7},
                    },
                    "required": ["city"],
                },
            }
        ]
    },
    "gemini-request": {
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "forecast", "description": DESCRIPTION, "parametersJsonSchema": SCHEMA}
                ]
            }
        ]
    },
    # google-genai's wire form: the declaration's own fields in snake_case.
    "gemini-sdk": {
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "forecast",
                        "description": DESCRIPTION,
                        "parameters_json_schema": SCHEMA,
                    }
                ]
            }
        ]
    },
    "jsonl": json.dumps(
        {"server": "wx", "name": "forecast", "description": DESCRIPTION, "inputSchema": SCHEMA}
    )
    + "\n",
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_format_reads_the_same_tool(shape: str) -> None:
    catalog = Catalog.load(SHAPES[shape], server="wx")
    assert catalog.ids == ["wx/forecast"]
    tool = catalog["wx/forecast"]
    assert tool.input_schema == SCHEMA
    assert tool.description == DESCRIPTION
    assert tool.summary == "Get the weather forecast for a city."
    reference = Catalog.load(SHAPES["mcp"], server="wx")["wx/forecast"]
    assert tool.fingerprint == reference.fingerprint


def test_explicit_constructors() -> None:
    assert Catalog.from_mcp(SHAPES["mcp"], server="wx").ids == ["wx/forecast"]
    assert Catalog.from_openai(SHAPES["openai-chat"], server="wx").ids == ["wx/forecast"]
    assert Catalog.from_openai(SHAPES["openai-responses"], server="wx").ids == ["wx/forecast"]
    assert Catalog.from_anthropic(SHAPES["anthropic"], server="wx").ids == ["wx/forecast"]
    assert Catalog.from_gemini(SHAPES["gemini-snake"], server="wx").ids == ["wx/forecast"]
    assert Catalog.from_gemini(SHAPES["gemini-request"]["tools"], server="wx").ids == [
        "wx/forecast"
    ]
    assert Catalog.from_jsonl(SHAPES["jsonl"]).ids == ["wx/forecast"]


def test_from_tools_mixes_shapes_and_tool_objects() -> None:
    reference = Catalog.load(SHAPES["mcp"], server="wx")["wx/forecast"]
    mixed = [
        reference,
        {"type": "function", "function": {"name": "b", "description": "B."}},
        {"name": "c", "input_schema": {"type": "object"}},
        {"functionDeclarations": [{"name": "d"}, {"name": "e"}]},
    ]
    catalog = Catalog.from_tools(mixed, server="wx")
    assert catalog.ids == ["wx/forecast", "wx/b", "wx/c", "wx/d", "wx/e"]
    assert catalog["wx/b"].input_schema == {"type": "object", "properties": {}}


def test_responses_builtin_tools_are_offenders_not_dropped() -> None:
    with pytest.warns(UserWarning, match="built-in tool of type 'web_search'"):
        catalog = Catalog.load(
            [{"type": "web_search"}, *SHAPES["openai-responses"]], server="wx", lenient=True
        )
    assert catalog.ids == ["wx/forecast"]


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "mcp"])
def test_exports_read_back_to_the_same_tool(provider: str) -> None:
    tool = Catalog.load(SHAPES["mcp"], server="wx")["wx/forecast"]
    exported = tool.to_provider(provider)
    again = Catalog.load([exported], server="wx")["wx/forecast"]
    assert again.input_schema == tool.input_schema
    assert again.description == tool.description


RESPONSES_TOOLS = [
    {"name": "now", "description": "The time.", "inputSchema": {"type": "object"}},
    {
        "name": "empty",
        "description": "The date.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {"name": "forecast", "description": DESCRIPTION, "inputSchema": SCHEMA},
    {
        "type": "function",
        "function": {
            "name": "closed",
            "description": "Strict.",
            "strict": True,
            "parameters": {**SCHEMA, "required": ["city", "days"], "additionalProperties": False},
        },
    },
]


@pytest.mark.parametrize("compact", [False, True])
def test_responses_exports_carry_strict_and_parameters(compact: bool) -> None:
    checker = TypeAdapter(FunctionToolParam)
    for tool in Catalog.from_tools(RESPONSES_TOOLS, server="s"):
        exported = tool.to_provider("openai-responses", compact=compact)
        checker.validate_python(exported)  # the SDK declares both fields required
        # Left out, strict reads as true in Responses: every optional property required;
        # so it is written, true only for the tool given as strict.
        assert exported["strict"] is (tool.id == "s/closed"), tool.id
        assert exported["parameters"]["type"] == "object", tool.id
    # Chat still leaves out what means the same there.
    chat = Catalog.from_tools(RESPONSES_TOOLS[:1], server="s")["s/now"]
    assert chat.to_provider("openai", compact=True)["function"] == {
        "name": "now",
        "description": "The time.",
    }


CLOSED = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("compact", [False, True])
def test_a_tool_given_as_strict_is_exported_strict(compact: bool) -> None:
    given = [
        {"type": "function", "function": {"name": "weather", "parameters": CLOSED,
                                          "strict": True}},
        {"type": "function", "name": "ping", "parameters": {
            "type": "object", "properties": {}, "additionalProperties": False}, "strict": True},
        {"type": "function", "name": "loose", "parameters": CLOSED},
    ]  # fmt: skip
    catalog = Catalog.from_tools(given, server="s")
    strict = {tool.name: tool.strict for tool in catalog}
    assert strict == {"weather": True, "ping": True, "loose": False}
    for tool in catalog:
        chat = tool.to_provider("openai", compact=compact)["function"]
        responses = tool.to_provider("openai-responses", compact=compact)
        TypeAdapter(FunctionToolParam).validate_python(responses)
        assert chat.get("strict", False) is tool.strict, tool.id
        assert responses["strict"] is tool.strict, tool.id
        # Strict mode needs the closed schema, even for a tool without arguments.
        assert chat["parameters"]["additionalProperties"] is False, tool.id
    # Saved and read back, the mark stays, and it is part of the tool's content.
    again = Catalog.from_tools([tool.to_dict() for tool in catalog], server="s")
    assert {tool.name: tool.strict for tool in again} == strict
    assert catalog["s/weather"].fingerprint != catalog["s/loose"].fingerprint
    with pytest.raises(InvalidToolsError, match="strict must be true or false, got a str"):
        Catalog.from_tools([{**given[2], "strict": "yes"}], server="s")


UNTYPED_ROOT = {"properties": {"city": {"type": "string"}}, "required": ["city"]}
# Where each export keeps the schema, and the name its format gives the object type.
ROOT_OF: dict[str, tuple[Any, str]] = {
    "openai": (lambda d: d["function"]["parameters"], "object"),
    "openai-responses": (lambda d: d["parameters"], "object"),
    "anthropic": (lambda d: d["input_schema"], "object"),
    "mcp": (lambda d: d["inputSchema"], "object"),
    "gemini": (lambda d: d["parameters"], "OBJECT"),
    "gemini-json-schema": (lambda d: d["parametersJsonSchema"], "object"),
}


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("provider", list(ROOT_OF))
def test_a_root_without_type_exports_as_an_object(provider: str, compact: bool) -> None:
    tool = Catalog.from_tools(
        [{"name": "get_weather", "description": "Weather.", "inputSchema": UNTYPED_ROOT}],
        server="s",
    )["s/get_weather"]
    root_of, object_type = ROOT_OF[provider]
    # OpenAI refuses the whole request over a root without it; Anthropic's API requires it.
    assert root_of(tool.to_provider(provider, compact=compact))["type"] == object_type


def test_export_shapes() -> None:
    tool = Catalog.load(SHAPES["mcp"], server="wx")["wx/forecast"]
    assert tool.to_provider("openai") == {
        "type": "function",
        "function": {"name": "forecast", "description": DESCRIPTION, "parameters": SCHEMA},
    }
    assert tool.to_provider("openai-responses") == {
        "type": "function",
        "name": "forecast",
        "description": DESCRIPTION,
        "parameters": SCHEMA,
        "strict": False,
    }
    assert tool.to_provider("anthropic") == {
        "name": "forecast",
        "description": DESCRIPTION,
        "input_schema": SCHEMA,
    }
    assert tool.to_provider("mcp") == {
        "name": "forecast",
        "description": DESCRIPTION,
        "inputSchema": SCHEMA,
    }


def test_exports_use_exposed_names() -> None:
    catalog = Catalog.load({"a": {"tools": [{"name": "x.y"}]}, "b": {"tools": [{"name": "x.y"}]}})
    names = [t.to_provider("openai")["function"]["name"] for t in catalog]
    assert names == ["a__x_y", "b__x_y"]


def test_unknown_provider_is_rejected() -> None:
    tool = Catalog.load(SHAPES["mcp"], server="wx")["wx/forecast"]
    with pytest.raises(Exception, match="unknown provider 'bedrock'"):
        tool.to_provider("bedrock")


GEMINI_ALLOWED = {
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
GEMINI_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"}


def _assert_gemini_subset(node: Any) -> None:
    assert isinstance(node, dict)
    assert set(node) <= GEMINI_ALLOWED, set(node) - GEMINI_ALLOWED
    if "type" in node:
        assert node["type"] in GEMINI_TYPES
    if "enum" in node:
        assert all(isinstance(v, str) for v in node["enum"])
    for sub in node.get("properties", {}).values():
        _assert_gemini_subset(sub)
    for sub in node.get("anyOf", []):
        _assert_gemini_subset(sub)
    if "items" in node:
        _assert_gemini_subset(node["items"])
    for name in node.get("required", []):
        assert name in node.get("properties", {})


RICH_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "label": {"type": "object", "properties": {"name": {"type": "string"}}},
        "node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}},
    },
    "properties": {
        "title": {"type": ["string", "null"], "examples": ["Bug"]},
        "state": {"const": "open"},
        "limit": {"type": "integer", "exclusiveMinimum": 0, "format": "uint32"},
        "when": {"type": "string", "format": "date-time"},
        "priority": {"enum": [1, 2, 3]},
        "labels": {"type": "array", "items": {"$ref": "#/$defs/label"}},
        "tree": {"$ref": "#/$defs/node"},
        "target": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "both": {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "number"}}},
            ]
        },
        "extra": {"type": "object", "additionalProperties": {"type": "string"}},
        "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}], "description": "N"},
        "nothing": {"type": "null"},
    },
    "required": ["title", "ghost"],
    "additionalProperties": False,
}


def test_gemini_export_stays_inside_the_openapi_subset() -> None:
    out = gemini.to_openapi(RICH_SCHEMA)
    _assert_gemini_subset(out)
    props = out["properties"]
    assert props["title"] == {"type": "STRING", "nullable": True, "example": "Bug"}
    assert props["state"] == {"type": "STRING", "enum": ["open"]}
    assert props["limit"] == {"type": "INTEGER", "minimum": 0}
    assert props["when"]["format"] == "date-time"
    assert "Allowed values: 1, 2, 3" in props["priority"]["description"]
    assert props["labels"]["items"]["properties"]["name"] == {"type": "STRING"}
    assert "recursive reference" in props["tree"]["properties"]["child"]["description"]
    assert props["target"]["anyOf"] == [{"type": "STRING"}, {"type": "INTEGER"}]
    assert set(props["both"]["properties"]) == {"a", "b"}
    assert props["both"]["required"] == ["a"]
    assert props["maybe"] == {"type": "INTEGER", "nullable": True, "description": "N"}
    assert props["nothing"] == {"nullable": True}
    assert out["required"] == ["title"]
    # The input is left untouched.
    assert RICH_SCHEMA["properties"]["title"]["type"] == ["string", "null"]


def test_gemini_declaration_omits_empty_parameters() -> None:
    catalog = Catalog.from_tools([{"name": "ping", "description": "Ping."}], server="s")
    assert catalog["s/ping"].to_provider("gemini") == {"name": "ping", "description": "Ping."}
    wx = Catalog.load(SHAPES["mcp"], server="wx")["wx/forecast"].to_provider("gemini")
    assert wx["parameters"]["properties"]["city"] == {"type": "STRING", "description": "City name"}


def test_gemini_openapi_reads_back_as_json_schema() -> None:
    openapi = {
        "type": "OBJECT",
        "properties": {
            "q": {"type": "STRING", "nullable": True, "example": "x"},
            "n": {"type": "ARRAY", "items": {"type": "NUMBER"}},
        },
    }
    assert gemini.from_openapi(openapi) == {
        "type": "object",
        "properties": {
            "q": {"type": ["string", "null"], "examples": ["x"]},
            "n": {"type": "array", "items": {"type": "number"}},
        },
    }


def test_gemini_nullable_reads_back_wherever_it_is() -> None:
    openapi = {
        "type": "OBJECT",
        "properties": {
            "limit": {"nullable": True, "anyOf": [{"type": "INTEGER"}, {"type": "STRING"}]},
            "unit": {"type": "STRING", "nullable": True, "enum": ["c", "f"]},
            "bare": {"nullable": True, "enum": ["a"]},
        },
        "required": ["limit", "unit", "bare"],
    }
    schema = gemini.from_openapi(openapi)
    assert schema["properties"] == {
        "limit": {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]},
        "unit": {"type": ["string", "null"], "enum": ["c", "f", None]},
        "bare": {"enum": ["a", None]},
    }
    declaration = {"name": "set_limit", "description": "Set a limit.", "parameters": openapi}
    catalog = Catalog.from_gemini({"functionDeclarations": [declaration]}, server="s")
    call = {"name": "set_limit", "arguments": {"limit": None, "unit": None, "bare": None}}
    assert verify_call(catalog, ["s/set_limit"], call).ok
    # What the export writes for a nullable enum reads back as the schema it came from.
    exported = catalog["s/set_limit"].to_provider("gemini")["parameters"]["properties"]
    assert exported["unit"] == openapi["properties"]["unit"]


def test_gemini_openapi_in_snake_case_reads_as_in_camel_case() -> None:
    # google-genai sends types.Schema fields under their snake_case names.
    snake = {
        "type": "OBJECT",
        "properties": {
            "tags": {"type": "ARRAY", "max_items": 2, "items": {"type": "STRING", "min_length": 1}},
            "id": {"any_of": [{"type": "STRING", "max_length": 8}, {"type": "INTEGER"}]},
            "max_items": {"type": "STRING"},  # a property's name is not a keyword
        },
        "property_ordering": ["tags", "id", "max_items"],
    }
    assert gemini.from_openapi(snake) == {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "minLength": 1}},
            "id": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "integer"}]},
            "max_items": {"type": "string"},
        },
    }


def test_gemini_openapi_keyword_under_both_spellings_is_an_offender() -> None:
    parameters = {"type": "OBJECT", "properties": {"a": {"anyOf": [], "any_of": []}}}
    declaration = {"name": "forecast", "parameters": parameters}
    with pytest.raises(InvalidToolsError, match="both 'anyOf' and 'any_of'"):
        Catalog.from_gemini({"functionDeclarations": [declaration]}, server="wx")


def test_type_aliases_only_touch_schema_positions() -> None:
    schema = {"type": "dict", "properties": {"type": {"type": "str", "default": "dict"}}}
    assert normalize_type_aliases(schema) == {
        "type": "object",
        "properties": {"type": {"type": "string", "default": "dict"}},
    }


def test_text_tags_read_pairs_query_and_strip() -> None:
    text = (
        "System stuff\n<toolname>get_weather</toolname>\n"
        "<tooldescription>Get current weather &amp; forecast</tooldescription>\n"
        "<toolname>send_mail</toolname><tooldescription>Send an email.</tooldescription>\n"
        "<userq>Is it raining in Denver?</userq>"
    )
    catalog = Catalog.load(text, server="tags")
    assert catalog.ids == ["tags/get_weather", "tags/send_mail"]
    assert catalog["tags/get_weather"].description == "Get current weather & forecast"
    assert text_tags.user_query(text) == "Is it raining in Denver?"
    assert text_tags.user_query("no tags") is None
    stripped = text_tags.strip_tool_tags(text)
    assert "<toolname>" not in stripped
    assert "<userq>" in stripped
    again = Catalog.from_text_tags(text_tags.render(catalog), server="tags")
    assert [t.description for t in again] == [t.description for t in catalog]


def test_text_tags_orphan_description_is_an_offender() -> None:
    with pytest.raises(Exception, match="without a <toolname> before it"):
        Catalog.from_text_tags("<tooldescription>lost</tooldescription><toolname>a</toolname>")


BROKEN_TAGS: list[tuple[str, str]] = [
    (
        "<toolname>a</toolname>\n<toolname>b\n<tooldescription>Send an email</tooldescription>",
        "line 2 tags/b: <toolname> at line 2 is never closed (<tooldescription> opens at line 3",
    ),
    (
        "<toolname>a</toolname>\n<tooldescription>Half a description",
        "line 1 tags/a: <tooldescription> at line 2 is never closed (the text ends first)",
    ),
    ("\n\n<toolname>a", "line 3 tags/a: <toolname> at line 3 is never closed"),
    (
        "<toolname>a</tooldescription>",
        "line 1 tags/a: <toolname> at line 1 is closed by </tooldescription> at line 1",
    ),
    ("<toolname>a</toolname>\n</toolname>", "line 2 '<unnamed>': </toolname> at line 2 has no"),
    (
        "<toolname>a</toolname><tooldescription>1</tooldescription>\n"
        "<tooldescription>2</tooldescription>",
        "line 1 tags/a: a second <tooldescription> at line 2",
    ),
]


@pytest.mark.parametrize(("text", "offender"), BROKEN_TAGS)
def test_broken_text_tags_are_offenders_with_their_line(text: str, offender: str) -> None:
    with pytest.raises(InvalidToolsError) as info:
        Catalog.from_text_tags(text, server="tags")
    assert offender in str(info.value)
    assert len(info.value.offenders) == 1


def test_broken_text_tags_never_move_a_description_to_a_neighbour() -> None:
    text = "<toolname>a</toolname>\n<toolname>b\n<tooldescription>Send an email</tooldescription>"
    with pytest.warns(CatalogWarning, match="tags/b"):
        catalog = Catalog.from_text_tags(text, server="tags", lenient=True)
    assert catalog.ids == ["tags/a"]
    assert catalog["tags/a"].description == ""


@pytest.mark.parametrize(
    "key", ["googleSearch", "google_search", "codeExecution", "code_execution"]
)
def test_gemini_builtin_tools_are_offenders_not_nameless_tools(key: str) -> None:
    request = {"tools": [{"functionDeclarations": [{"name": "forecast"}]}, {key: {}}]}
    for load in (Catalog.load, Catalog.from_gemini):
        with pytest.raises(InvalidToolsError) as info:
            load(request, server="wx")
        (offender,) = info.value.offenders
        assert offender.position == "tools[1]"
        assert f"built-in Gemini tool {key!r} has no function declaration" in offender.reason
    with pytest.warns(CatalogWarning, match="built-in Gemini tool"):
        lenient = Catalog.from_gemini(request["tools"], server="wx", lenient=True)
    assert lenient.ids == ["wx/forecast"]


def test_a_bare_gemini_declaration_reads_its_snake_case_json_schema() -> None:
    tool = {"name": "forecast", "parameters_json_schema": SCHEMA}
    assert Catalog.from_tools([tool], server="wx")["wx/forecast"].input_schema == SCHEMA


@pytest.mark.parametrize(
    "keys",
    [
        ("parametersJsonSchema", "parameters_json_schema"),
        ("parametersJsonSchema", "parameters"),
        ("parameters_json_schema", "parameters"),
    ],
)
def test_a_gemini_declaration_with_two_schemas_is_an_offender(keys: tuple[str, str]) -> None:
    declaration = {"name": "forecast", keys[0]: {"type": "object"}, keys[1]: SCHEMA}
    with pytest.raises(InvalidToolsError) as info:
        Catalog.from_gemini({"functionDeclarations": [declaration]}, server="wx")
    (offender,) = info.value.offenders
    assert offender.tool == "'forecast'"
    assert f"both {keys[0]!r} and {keys[1]!r}" in offender.reason


def test_gemini_declarations_under_both_spellings_are_an_offender() -> None:
    tools = {"functionDeclarations": [{"name": "a"}], "function_declarations": [{"name": "b"}]}
    with pytest.raises(InvalidToolsError, match="both 'functionDeclarations' and 'function_decl"):
        Catalog.from_gemini(tools, server="wx")


def test_jsonl_round_trip() -> None:
    catalog = Catalog.load(SHAPES["mcp"], server="wx")
    text = jsonl.dumps(catalog)
    assert Catalog.from_jsonl(text).version == catalog.version


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_jsonl_lines_end_only_at_a_line_feed(separator: str) -> None:
    # JSON strings may hold these raw (dumps writes them so), and str.splitlines() cut a
    # line at each: the tool's own export did not read back.
    tool = {"name": "note", "description": f"first{separator}second", "inputSchema": {}}
    text = jsonl.dumps(Catalog.from_tools({"wx": {"tools": [tool]}}))
    assert separator in text
    crlf = (text + text.replace("note", "memo")).replace("\n", "\r\n")
    first, second = Catalog.from_jsonl(crlf)
    assert first.description == f"first{separator}second"
    assert second.name == "memo"


def test_every_real_tool_exports_to_every_provider() -> None:
    import warnings

    from toolgate.catalog.catalog import CatalogWarning

    paths = [
        CATALOGS / name
        for name in (GITHUB_FILE, "docker-mcp-registry.jsonl", "mcpm-registry.jsonl")
    ]
    require(*paths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CatalogWarning)
        tools = [t for p in paths for t in Catalog.load(p, lenient=True)]
    for tool in tools:
        declaration = tool.to_provider("gemini")
        if "parameters" in declaration:
            _assert_gemini_subset(declaration["parameters"])
        for provider in ("openai", "openai-responses", "anthropic", "mcp"):
            json.dumps(tool.to_provider(provider))


@pytest.mark.parametrize("mode", ["none", "NONE", ["NONE"], {"a": 1}, 7])
def test_a_gemini_mode_is_read_only_as_a_string(mode: Any) -> None:
    deep: Any = []
    for _ in range(1000):
        deep = [deep]
    request = {"toolConfig": {"functionCallingConfig": {"mode": mode}}}
    assert read_tool_choice(request).off == isinstance(mode, str)
    assert read_tool_choice({"toolConfig": {"functionCallingConfig": {"mode": deep}}}).off is False
