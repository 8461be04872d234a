"""Compact definitions: what a model does not need is left out, every constraint stays."""

from __future__ import annotations

import copy
import json
import re
import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.validators import Draft202012Validator, validator_for

from tests.shared_data import CATALOGS, DATA, require
from toolgate.catalog.catalog import Catalog, CatalogWarning
from toolgate.catalog.tool import Tool
from toolgate.formats import compact
from toolgate.formats.compact import compact_entry, compact_schema, compact_text, is_strict
from toolgate.formats.raw import PROVIDERS
from toolgate.verify import verify_call

# A pydantic / FastMCP-style schema: a title on everything, $schema, Optional fields.
GENERATED: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "search_issuesArguments",
    "type": "object",
    "properties": {
        "query": {"title": "Query", "type": "string", "description": "  Words  to find.\n\n"},
        "per_page": {
            "title": "Per Page",
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "default": 30,
            "description": "Results per page (default 30).",
        },
        "state": {
            "title": "Issue state filter",
            "anyOf": [{"type": "string", "enum": ["open", "closed"]}, {"type": "null"}],
            "default": None,
        },
        "sort": {"type": "string", "default": "created", "description": "Sort key."},
        "labels": {
            "title": "Labels",
            "type": "array",
            "items": {"type": "string", "title": "Labels"},
            "$comment": "from the API spec",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}

# Keywords that constrain a call: compaction must never touch them.
_CONSTRAINTS = {
    "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "minLength", "maxLength", "pattern", "format", "minItems", "maxItems", "uniqueItems",
    "multipleOf", "minProperties", "maxProperties",
}  # fmt: skip


def _constraints(node: Any, path: str = "") -> set[tuple[str, str]]:
    """Every (path, keyword=value) that constrains a value, plus non-empty required lists."""
    out: set[tuple[str, str]] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _CONSTRAINTS and not isinstance(value, dict):
                out.add((path, f"{key}={json.dumps(value, sort_keys=True)}"))
            elif key == "required" and value:
                out.add((path, f"required={sorted(value)}"))
            elif key == "properties" and isinstance(value, dict):
                out.add((path, f"properties={sorted(value)}"))
            out |= _constraints(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            out |= _constraints(item, f"{path}/{i}")
    return out


def test_generated_noise_is_left_out_and_every_constraint_kept() -> None:
    original = copy.deepcopy(GENERATED)
    out = compact_schema(GENERATED, provider="openai", name="search_issues")
    assert original == GENERATED  # not modified
    assert "$schema" not in out
    assert "title" not in out
    props = out["properties"]
    assert props["query"] == {"type": "string", "description": "Words to find."}
    assert "title" not in props["per_page"]
    assert "default" not in props["per_page"]
    assert props["state"]["title"] == "Issue state filter"  # says more than the name
    assert "default" not in props["state"]  # null, and not required
    assert props["sort"]["default"] == "created"  # the description does not state it
    assert "$comment" not in props["labels"]
    assert "title" not in props["labels"]
    assert props["labels"]["items"] == {"type": "string", "title": "Labels"}  # not its name
    assert "additionalProperties" not in out  # OpenAI's models never see it
    assert _constraints(out) == _constraints(GENERATED)


@pytest.mark.parametrize("provider", ["anthropic", "mcp", "gemini-json-schema"])
def test_closed_objects_stay_closed_where_the_model_reads_json_schema(provider: str) -> None:
    out = compact_schema(GENERATED, provider=provider, name="search_issues")
    assert out["additionalProperties"] is False
    assert "title" not in out["properties"]["query"]


def test_open_and_schema_valued_additional_properties() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            "meta": {"type": "object", "additionalProperties": True},
        },
        "required": [],
    }
    for provider in PROVIDERS:
        out = compact_schema(schema, provider=provider)
        assert out["properties"]["tags"]["additionalProperties"] == {"type": "string"}
        assert "additionalProperties" not in out["properties"]["meta"]
        assert "required" not in out


def test_strict_schemas_stay_strict() -> None:
    strict = {
        "type": "object",
        "title": "Args",
        "properties": {
            "city": {"type": "string", "title": "City"},
            "when": {
                "type": "object",
                "properties": {"day": {"type": ["string", "null"], "default": None}},
                "required": ["day"],
                "additionalProperties": False,
            },
        },
        "required": ["city", "when"],
        "additionalProperties": False,
    }
    assert is_strict(strict)
    out = compact_schema(strict, provider="openai")
    assert is_strict(out)
    assert out["properties"]["when"]["additionalProperties"] is False
    assert "title" not in out["properties"]["city"]
    assert not is_strict(GENERATED)


@pytest.mark.parametrize(
    ("default", "description", "dropped"),
    [
        (10, "How many. Defaults to 10.", True),
        (0, "How many. Default is 10.", False),
        (False, "Include forks (default: false).", True),
        (True, "Include forks (default: false).", False),
        ("celsius", "Unit; the default is celsius.", True),
        ("celsius", "Unit, celsius or fahrenheit.", False),
        (1.0, "Scale factor, default 1.", True),
        ([], "Fields to return; default none.", False),
        (",", "Delimiter, such as a comma; default ','.", False),
        ("json", "Output format. Use json for machines, or text; a default applies.", False),
        ("celsius", "Temperature unit, celsius by default.", True),
        ("celsius", "Unit (default: 'celsius').", True),
        (10, "Page size (default=10).", True),
        ("text", "Output format. text: (default) prose, json: a delta.", True),
        (10, "If not set, defaults to 10.", True),
        (0, "Max results. Uses the server default if 0 is given.", False),
        (10, "Page size; default 50, but 10 when 'compact' is set.", False),
        (-1, "Timeout in seconds. If -1, the default of 30 applies.", False),
        ("asc", "Sort direction (defaults to desc for dates, asc otherwise).", False),
        ("main", "Branch name. Defaults to the repository's default branch, not main.", False),
        ("text", "Format of the output: json or text. text is not the default", False),
        (1.0, "Temperature. Not the default 1.0 but 0.7 is used", False),
        ("en", "Language code, e.g. 'en'. The default language is not en.", False),
        # A line break ends a clause, also right before the statement.
        (10, "Max results, none for no limit\nDefault: 10", True),
    ],
)
def test_a_default_is_dropped_only_when_the_description_states_it(
    default: Any, description: str, dropped: bool
) -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"default": default, "description": description}},
    }
    out = compact_schema(schema)
    assert ("default" not in out["properties"]["x"]) is dropped


class _CountingPattern:
    """A compiled pattern that counts the characters it is given to scan."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.scanned = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.pattern, name)

        def scan(text: str, *args: Any) -> Any:
            self.scanned += len(text)
            return method(text, *args)

        return scan


def test_a_long_description_is_scanned_for_negations_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every statement of the default stands in a negated clause: each is checked, and
    # rescanning the text before each one was quadratic (seconds at 100 KB).
    patterns = [_CountingPattern(getattr(compact, name)) for name in ("_CLAUSE_START", "_NEGATION")]
    monkeypatch.setattr(compact, "_CLAUSE_START", patterns[0])
    monkeypatch.setattr(compact, "_NEGATION", patterns[1])
    description = "not default 10 " * 1000
    schema = {"type": "object", "properties": {"x": {"default": 10, "description": description}}}
    assert compact_schema(schema)["properties"]["x"]["default"] == 10
    assert 0 < sum(p.scanned for p in patterns) <= 2 * len(description)


def _negated_by_rescanning(text: str) -> bool:
    """Whether the last clause of ``text`` says "not": the definition, scanning it again."""
    return bool(compact._NEGATION.search(re.split(r"[.;,:!?()\n]", text)[-1]))


# Words that make up descriptions stating, negating and placing a default.
DEFAULT_WORDS = [
    "default", "Defaults to", "default value of", "by default", "(default)", "default:",
    "default=", "not", "No", "never", "without", "don't", "isn't", "nothing", "10", "'10'",
    "10.0", "celsius", "true", "null", "the", ",", ".", ";", "(", ")", "\n", "!", "?",
]  # fmt: skip


@given(
    st.lists(st.sampled_from(DEFAULT_WORDS), max_size=30),
    st.lists(st.sampled_from([" ", "", "\n"]), min_size=30, max_size=30),
    st.sampled_from([10, 10.0, "10", "celsius", True, None]),
)
@settings(max_examples=400, deadline=None, derandomize=True, database=None)
def test_a_stated_default_is_found_negated_as_by_rescanning_each_clause(
    words: list[str], separators: list[str], value: Any
) -> None:
    description = "".join(w + sep for w, sep in zip(words, separators, strict=False))
    negated = compact._negated_before(description)
    statements = list(compact._default_statements(description, value))
    for found in statements:
        assert negated(found.start()) == _negated_by_rescanning(description[: found.start()])
    stated = any(not _negated_by_rescanning(description[: f.start()]) for f in statements)
    assert compact._states_default(description, value) is stated


DRAFT_04 = "http://json-schema.org/draft-04/schema#"
DRAFT_06 = "http://json-schema.org/draft-06/schema#"
DRAFT_07 = "http://json-schema.org/draft-07/schema#"
DRAFT_2019 = "https://json-schema.org/draft/2019-09/schema"
DRAFT_2020 = "https://json-schema.org/draft/2020-12/schema"


def _accepts(schema: dict[str, Any], call: dict[str, Any]) -> bool:
    """Whether ``call`` is valid under ``schema``, read in the dialect it names (else 2020-12)."""
    return bool(validator_for(schema, default=Draft202012Validator)(schema).is_valid(call))


# Schemas whose meaning hangs on their dialect or on an ``additionalProperties: true``, each
# with a call valid under it.
DIALECT_CASES = {
    "draft-07 ignores the siblings of $ref": (
        {
            "$schema": DRAFT_07,
            "type": "object",
            "definitions": {"n": {"type": "integer"}},
            "properties": {"x": {"$ref": "#/definitions/n", "maximum": 5}},
        },
        {"x": 10},
    ),
    "draft-04 exclusive bounds are booleans": (
        {
            "$schema": DRAFT_04,
            "type": "object",
            "properties": {"x": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
        },
        {"x": 0.5},
    ),
    "draft-07 ignores unevaluatedProperties": (
        {"$schema": DRAFT_07, "type": "object", "unevaluatedProperties": False},
        {"x": 1},
    ),
    "draft-06 ignores if and then": (
        {"$schema": DRAFT_06, "if": {"type": "object"}, "then": {"required": ["x"]}},
        {"y": 1},
    ),
    "additionalProperties true evaluates keys": (
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "additionalProperties": True,
            "unevaluatedProperties": False,
        },
        {"a": "x", "b": 1},
    ),
    "unevaluatedProperties sees a branch's additionalProperties": (
        {
            "allOf": [{"properties": {"a": {}}, "additionalProperties": True}],
            "unevaluatedProperties": False,
        },
        {"a": 1, "b": 2},
    ),
}


@pytest.mark.parametrize("provider", ["openai", "anthropic", "mcp"])
@pytest.mark.parametrize("case", list(DIALECT_CASES))
def test_a_call_valid_under_the_full_schema_stays_valid(case: str, provider: str) -> None:
    schema, call = DIALECT_CASES[case]
    assert _accepts(schema, call)
    assert _accepts(compact_schema(schema, provider=provider), call)


# Schemas using a keyword the draft applies and 2020-12 drops or reads otherwise, each with
# a call the schema refuses: without its ``$schema`` the compact one would accept it.
REFUSED_CASES = {
    "draft-07 dependencies": (
        {
            "$schema": DRAFT_07,
            "type": "object",
            "properties": {"card": {"type": "string"}, "billing": {"type": "string"}},
            "dependencies": {"card": ["billing"]},
        },
        {"card": "4111"},
    ),
    "draft-06 dependencies in a nested schema": (
        {
            "$schema": DRAFT_06,
            "type": "object",
            "properties": {"pay": {"dependencies": {"card": {"required": ["billing"]}}}},
        },
        {"pay": {"card": "4111"}},
    ),
    "2019-09 $recursiveRef": (
        {
            "$schema": DRAFT_2019,
            "$recursiveAnchor": True,
            "type": "object",
            "properties": {"n": {"type": "integer"}, "child": {"$recursiveRef": "#"}},
        },
        {"child": {"n": "x"}},
    ),
    "draft-07 $id naming an anchor": (
        {
            "$schema": DRAFT_07,
            "type": "object",
            "definitions": {"pos": {"$id": "#pos", "type": "integer", "minimum": 0}},
            "properties": {"n": {"$ref": "#pos"}},
        },
        {"n": -1},
    ),
    "2019-09 tuple items": (
        {"$schema": DRAFT_2019, "items": [{"type": "string"}], "additionalItems": False},
        ["a", "b"],
    ),
    # What a reference points at is read in the dialect wherever it sits.
    "draft-07 tuple behind a $ref outside the keywords": (
        {
            "$schema": DRAFT_07,
            "type": "object",
            "x-shared": {"pair": {"items": [{"type": "integer"}], "additionalItems": False}},
            "properties": {"p": {"$ref": "#/x-shared/pair"}},
        },
        {"p": [1, 2]},
    ),
    # An embedded resource of another dialect: without its own ``$schema`` it reads as the
    # root's draft-07, which ignores prefixItems.
    "a 2020-12 resource in a draft-07 schema": (
        {
            "$schema": DRAFT_07,
            "type": "object",
            "properties": {
                "a": {
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "$id": "https://example.com/a.json",
                    "prefixItems": [{"type": "integer"}],
                }
            },
        },
        {"a": ["x"]},
    ),
}


@pytest.mark.parametrize("provider", ["openai", "anthropic", "mcp"])
@pytest.mark.parametrize("case", list(REFUSED_CASES))
def test_a_call_refused_by_the_full_schema_stays_refused(case: str, provider: str) -> None:
    schema, call = REFUSED_CASES[case]
    assert not _accepts(schema, call)
    out = compact_schema(schema, provider=provider)
    assert out["$schema"] == schema["$schema"]
    assert not _accepts(out, call)


# Subschemas built from the keywords whose meaning hangs on the dialect, on a default or on
# ``additionalProperties: true``, and values to check against them.
_LEAVES = st.sampled_from([
    {"type": "integer"}, {"type": "string", "title": "A", "default": "a"}, True, False,
    {"$ref": "#/definitions/n"}, {"$ref": "#/x-shared/pair"},
    {"$ref": "#/definitions/n", "minimum": 2},
])  # fmt: skip
_SUBSCHEMAS = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.builds(lambda i: {"items": i, "additionalItems": False}, st.lists(inner, max_size=2)),
        st.builds(lambda i, r: {"prefixItems": i, "items": r}, st.lists(inner, max_size=2), inner),
        st.builds(lambda p: {"properties": p, "additionalProperties": True}, st.dictionaries(
            st.sampled_from("ab"), inner, max_size=2)),
        st.builds(lambda p: {"properties": p, "unevaluatedProperties": False}, st.dictionaries(
            st.sampled_from("ab"), inner, max_size=2)),
        st.builds(lambda d: {"dependencies": d}, st.dictionaries(st.just("a"), inner, max_size=1)),
        st.builds(lambda c: {"contains": c, "minContains": 2}, inner),
        st.builds(lambda c: {"if": c, "then": {"required": ["a"]}}, inner),
        st.builds(lambda i: {"$schema": DRAFT_2020, "$id": "https://example.com/s",
                             "prefixItems": i}, st.lists(inner, min_size=1, max_size=2)),
    ),
    max_leaves=5,
)  # fmt: skip
_VALUES = st.recursive(
    st.one_of(st.integers(-1, 3), st.sampled_from(["a", ""]), st.just([1, 2]), st.none()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abc"), inner, max_size=3)
    ),
    max_leaves=6,
)


@given(
    st.sampled_from([None, DRAFT_06, DRAFT_07, DRAFT_2019]),
    _SUBSCHEMAS,
    st.lists(_VALUES, min_size=1, max_size=4),
)
@settings(max_examples=80, deadline=None, derandomize=True, database=None)
def test_compaction_never_changes_which_calls_a_schema_takes(
    dialect: str | None, sub: Any, values: list[Any]
) -> None:
    schema = {
        "type": "object",
        "properties": {"v": sub},
        "definitions": {"n": {"type": "integer", "title": "n"}},
        "x-shared": {"pair": {"items": [{"type": "integer"}], "additionalItems": False}},
        **({"$schema": dialect} if dialect else {}),
    }
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
        expected = [_accepts(schema, {"v": v}) for v in values]
    except Exception:  # a schema the draft refuses, or jsonschema cannot apply
        return
    for provider, strict in (("anthropic", None), ("mcp", None), ("openai", True)):
        out = compact_schema(schema, provider=provider, strict=strict)
        assert [_accepts(out, {"v": v}) for v in values] == expected, (provider, out)


def test_a_2019_unevaluated_items_keeps_its_dialect() -> None:
    # 2020-12 counts the items ``contains`` matched as evaluated, 2019-09 does not.
    schema = {"$schema": DRAFT_2019, "contains": {"type": "string"}, "unevaluatedItems": False}
    assert compact_schema(schema)["$schema"] == DRAFT_2019


@pytest.mark.parametrize(
    "schema",
    [
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"},
        {
            "$schema": DRAFT_07,
            "type": "object",
            "definitions": {"n": {"type": "integer"}},
            "properties": {"x": {"$ref": "#/definitions/n", "description": "A number."}},
        },
        # A property named as a dropped keyword, and an ``$id`` naming no anchor.
        {
            "$schema": DRAFT_07,
            "$id": "https://example.com/pay.json",
            "type": "object",
            "properties": {"dependencies": {"type": "array"}, "$recursiveRef": {}},
        },
        {"$schema": DRAFT_2019, "$id": "https://example.com/pay.json#", "type": "object"},
    ],
)
def test_a_dialect_that_reads_as_the_implied_one_is_left_out(schema: dict[str, Any]) -> None:
    assert "$schema" not in compact_schema(schema)


def test_keywords_are_only_read_at_schema_positions() -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "title": "Title"},
            "$schema": {"type": "string"},
        },
        "required": ["title"],
    }
    out = compact_schema(schema, name="make")
    assert set(out["properties"]) == {"title", "$schema"}
    assert out["properties"]["title"] == {"type": "string"}


def test_whitespace() -> None:
    assert (
        compact_text("  A  tool.\t Does\n\n\n - one\r\n - two  \n") == "A tool. Does\n- one\n- two"
    )
    assert compact_text("") == ""


def test_tool_exports_switch_between_original_and_compact() -> None:
    tool = Tool("gh", "search_issues", "  Search  issues. ", GENERATED, title="Search Issues")
    for provider in PROVIDERS:
        assert tool.to_provider(provider) == tool.to_provider(provider, compact=False)
        full, small = tool.definition_json(provider), tool.definition_json(provider, compact=True)
        assert len(small) < len(full)
        assert tool.token_count(provider, compact=True) <= tool.token_count(provider)
    assert tool.to_provider("openai")["function"]["parameters"] == GENERATED
    compact = tool.to_provider("openai", compact=True)["function"]
    assert compact["description"] == "Search issues."
    assert "title" not in tool.to_provider("mcp", compact=True)  # repeats the name
    # The caller's own copy, as for full definitions.
    compact["parameters"]["properties"].clear()
    assert tool.to_provider("openai", compact=True)["function"]["parameters"]["properties"]


def test_verify_checks_the_full_schema() -> None:
    catalog = Catalog.from_tools(
        [{"name": "search_issues", "description": "Search.", "inputSchema": GENERATED}],
        server="gh",
    )
    sent = catalog["gh/search_issues"].to_provider("openai", compact=True)
    assert "additionalProperties" not in sent["function"]["parameters"]
    call = {"name": "search_issues", "arguments": {"query": "bug", "colour": "red"}}
    verdict = verify_call(catalog, ["gh/search_issues"], call)
    assert not verdict.ok
    assert verdict.error == "invalid_arguments"
    bound = {"name": "search_issues", "arguments": {"query": "bug", "per_page": 500}}
    assert not verify_call(catalog, ["gh/search_issues"], bound).ok


@pytest.mark.parametrize(
    "path",
    [
        CATALOGS / "mcpm-registry.jsonl",
        CATALOGS / "github-mcp-server.tools-list.json",
        DATA / "eval" / "bfcl-single-turn" / "tools.jsonl",
    ],
)
def test_real_catalogs_keep_every_constraint_and_never_grow(path: Any) -> None:
    require(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CatalogWarning)
        catalog = Catalog.load(path, lenient=True, rename_duplicates=True)
    saved = 0
    for tool in catalog.tools[:600]:
        for provider in ("openai", "anthropic", "mcp"):
            out = compact_schema(tool.input_schema, provider=provider, name=tool.name)
            assert _constraints(out) == _constraints(tool.input_schema), tool.id
            full = tool.token_count(provider)
            small = tool.token_count(provider, compact=True)
            assert small <= full, tool.id
            saved += full - small
    assert saved > 0


def test_request_entries_of_every_shape_are_compacted_in_place() -> None:
    chat = {"type": "function", "function": {"name": "search_issues", "parameters": GENERATED}}
    out = compact_entry(chat, "openai")
    assert out["function"]["parameters"] == compact_schema(GENERATED, name="search_issues")
    strict = {"type": "function", "function": {**chat["function"], "strict": True}}
    kept = compact_entry(strict, "openai")["function"]
    assert kept["parameters"]["additionalProperties"] is False  # strict: stays closed
    assert "title" not in kept["parameters"]["properties"]["query"]
    responses = {"type": "function", "name": "x", "description": " a  b ", "parameters": GENERATED}
    assert compact_entry(responses, "openai-responses")["description"] == "a b"
    claude = {"name": "x", "input_schema": GENERATED, "cache_control": {"type": "ephemeral"}}
    out = compact_entry(claude, "anthropic")
    assert out["cache_control"] == {"type": "ephemeral"}
    assert out["input_schema"]["additionalProperties"] is False
    gemini = {"functionDeclarations": [{"name": "x", "parametersJsonSchema": GENERATED}]}
    declared = compact_entry(gemini, "gemini")["functionDeclarations"][0]
    assert "$schema" not in declared["parametersJsonSchema"]
    # google-genai writes the key in snake_case: compacted under the spelling it came in.
    sdk = {"functionDeclarations": [{"name": "x", "parameters_json_schema": GENERATED}]}
    declared = compact_entry(sdk, "gemini")["functionDeclarations"][0]
    assert sorted(declared) == ["name", "parameters_json_schema"]
    assert "$schema" not in declared["parameters_json_schema"]
    typed = {"type": "object", "properties": {"q": {"type": "string"}}}
    plain = {"type": "function", "function": {"name": "f", "parameters": typed}}
    assert compact_entry(plain, "openai") is plain  # nothing to leave out: the entry itself
    assert chat["function"]["parameters"] is GENERATED  # the input is not modified


def test_a_responses_tool_without_strict_keeps_what_strict_mode_reads() -> None:
    # Responses reads a missing ``strict`` as "strict where the schema can be made so": a
    # free-form map (``additionalProperties: true``) is why this one cannot, and left out, it
    # would be a plain object, closed by strict mode, that takes no label.
    labels = {"type": "object", "additionalProperties": True}
    schema = {
        "type": "object",
        "properties": {"id": {"type": "string", "title": "Id"}, "labels": labels},
        "required": ["id", "labels"],
        "additionalProperties": False,
    }
    entry = {"type": "function", "name": "tag", "parameters": schema}
    out = compact_entry(entry, "openai-responses")["parameters"]
    assert out["properties"]["labels"] == labels
    assert out["additionalProperties"] is False
    assert "title" not in out["properties"]["id"]  # still compacted
    # Said false, it is best-effort, as in Chat, which never shows additionalProperties.
    loose = compact_entry({**entry, "strict": False}, "openai-responses")["parameters"]
    assert "additionalProperties" not in loose["properties"]["labels"]
    chat = compact_entry({"type": "function", "function": entry}, "openai")["function"]
    assert "additionalProperties" not in chat["parameters"]


NO_ARGUMENTS = {"type": "object", "properties": {}}


def test_openai_leaves_out_the_parameters_of_a_tool_without_arguments() -> None:
    tool = Tool("s", "now", "The time.", NO_ARGUMENTS)
    assert "parameters" not in tool.to_provider("openai", compact=True)["function"]
    # Responses wants them (its SDK declares them required).
    assert tool.to_provider("openai-responses", compact=True)["parameters"] == NO_ARGUMENTS
    assert tool.to_provider("openai")["function"]["parameters"] == NO_ARGUMENTS
    # OpenAI bills its own rendering, the same either way; JSON sent as text is shorter.
    assert len(tool.definition_json("openai", compact=True)) < len(tool.definition_json("openai"))
    # Anthropic and MCP require a schema: it stays.
    assert tool.to_provider("anthropic", compact=True)["input_schema"] == NO_ARGUMENTS
    entry = {"type": "function", "function": {"name": "now", "parameters": NO_ARGUMENTS}}
    assert compact_entry(entry, "openai") == {"type": "function", "function": {"name": "now"}}
    # An argument declared, or strict mode, keeps them.
    taking = Tool("s", "at", "The time at.", {"type": "object", "properties": {"tz": {}}})
    assert "parameters" in taking.to_provider("openai", compact=True)["function"]
    closed = {**NO_ARGUMENTS, "additionalProperties": False, "required": []}
    strict = {"type": "function", "function": {"name": "now", "parameters": closed, "strict": True}}
    assert compact_entry(strict, "openai")["function"]["parameters"] == closed
    sent = Tool("s", "now", "x", closed).to_provider("openai", compact=True)
    assert "parameters" in sent["function"]


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {}, "title": "nowArguments", "type": "object"},  # FastMCP
        {"type": "object", "title": "Clock", "description": "Nothing to pass."},
        {"type": "object", "properties": {}, "$comment": "generated", "required": []},
        {"type": "object", "additionalProperties": True},  # OpenAI never shows it
    ],
)
def test_a_schema_that_takes_no_arguments_once_compacted_is_left_out(
    schema: dict[str, Any],
) -> None:
    tool = Tool("s", "now", "The time.", schema)
    assert "parameters" not in tool.to_provider("openai", compact=True)["function"]
    entry = {"type": "function", "function": {"name": "now", "parameters": schema}}
    assert "parameters" not in compact_entry(entry, "openai")["function"]
    # Responses requires parameters (FunctionToolParam): kept, compacted.
    responses = {"type": "function", "name": "now", "parameters": schema, "strict": False}
    assert "parameters" in compact_entry(responses, "openai-responses")
    assert "parameters" in tool.to_provider("openai-responses", compact=True)
