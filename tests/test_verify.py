"""The hallucination gate: every provider's call shape, every error, in-band results."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jsonschema import Draft202012Validator

from toolgate import verify as verify_module
from toolgate.catalog.catalog import Catalog
from toolgate.errors import CatalogError, InvalidInputError
from toolgate.formats.calls import parse_tool_call
from toolgate.promotion.budget import Budget
from toolgate.promotion.discovery import TOOL_SEARCH_ID
from toolgate.promotion.promote import promote_tools
from toolgate.verify import Verdict, closest_name, verify_call, verify_name

ISSUE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "options": {
            "type": "object",
            "properties": {"limit": {"type": "integer", "maximum": 100}},
        },
        "labels": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["title"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load(
        {
            "github": {
                "tools": [
                    {
                        "name": "create_issue",
                        "description": "Open an issue.",
                        "inputSchema": ISSUE_SCHEMA,
                    },
                    {"name": "search", "description": "Search code."},
                    {"name": "nasa/apod", "description": "Picture of the day."},
                    {"name": "get_me", "description": "Who am I."},
                ]
            },
            "slack": {
                "tools": [
                    {"name": "search", "description": "Search messages."},
                    {"name": "post_message", "description": "Post."},
                ]
            },
        },
        overrides={"github/get_me": {"pinned": True}},
    )


ACTIVE = ["github/create_issue", "slack/search"]
GOOD_ARGS = {"title": "Flaky test", "options": {"limit": 5}}

CALL_SHAPES: dict[str, Any] = {
    "openai-chat": {
        "id": "call_1",
        "type": "function",
        "function": {"name": "create_issue", "arguments": json.dumps(GOOD_ARGS)},
    },
    "openai-responses": {
        "type": "function_call",
        "id": "fc_1",  # the item's id; the output must answer call_id
        "call_id": "call_1",
        "name": "create_issue",
        "arguments": json.dumps(GOOD_ARGS),
    },
    "anthropic": {"type": "tool_use", "id": "call_1", "name": "create_issue", "input": GOOD_ARGS},
    "gemini-part": {"functionCall": {"name": "create_issue", "args": GOOD_ARGS, "id": "call_1"}},
    "gemini-bare": {"name": "create_issue", "args": GOOD_ARGS, "id": "call_1"},
    "mcp": {"name": "create_issue", "arguments": GOOD_ARGS, "id": "call_1"},
}


@pytest.mark.parametrize("shape", list(CALL_SHAPES))
def test_every_call_shape_passes(catalog: Catalog, shape: str) -> None:
    verdict = verify_call(catalog, ACTIVE, CALL_SHAPES[shape])
    assert verdict.ok, verdict.message
    assert verdict.tool_id == "github/create_issue"
    assert verdict.call_id == "call_1"
    assert verdict.arguments == GOOD_ARGS
    assert verdict.available == ("create_issue", "get_me", "slack__search")


def test_exposed_names_map_back(catalog: Catalog) -> None:
    verdict = verify_call(catalog, ACTIVE, {"name": "slack__search", "arguments": {}})
    assert verdict.ok
    assert verdict.tool_id == "slack/search"
    by_raw_name = verify_call(catalog, ["github/nasa/apod"], {"name": "nasa/apod"})
    assert by_raw_name.ok
    assert by_raw_name.tool_id == "github/nasa/apod"


def test_pinned_tools_are_always_callable(catalog: Catalog) -> None:
    assert verify_call(catalog, [], {"name": "get_me", "arguments": "{}"}).ok


def test_tool_not_available_names_closest_and_available(catalog: Catalog) -> None:
    verdict = verify_call(catalog, ACTIVE, {"name": "github__search", "arguments": {}})
    assert not verdict.ok
    assert verdict.error == "tool_not_available"
    assert verdict.tool_id == "github/search"
    assert verdict.closest == "slack__search"
    assert "not available this turn" in verdict.message
    assert "slack__search" in verdict.message


def test_unknown_tool_gets_the_closest_available_name(catalog: Catalog) -> None:
    verdict = verify_call(catalog, ACTIVE, {"name": "create_isue", "arguments": {}})
    assert verdict.error == "unknown_tool"
    assert verdict.tool_id is None
    assert verdict.closest == "create_issue"
    assert "Did you mean 'create_issue'?" in verdict.message
    far = verify_call(catalog, ACTIVE, {"name": "zzzzzzzz", "arguments": {}})
    assert far.error == "unknown_tool"
    assert far.closest is None


def _validator_paths(args: Any) -> set[str]:
    """Reference failing paths straight from jsonschema, for comparison."""
    paths = set()
    for error in Draft202012Validator(ISSUE_SCHEMA).iter_errors(args):
        paths.add(
            "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        )
    return paths


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"title": "x", "options": {"limit": 500}}, "$.options.limit"),
        ({"title": "x", "options": {"limit": "5"}}, "$.options.limit"),
        ({"title": "x", "labels": ["ok", 3]}, "$.labels[1]"),
        ({"title": ""}, "$.title"),
        ({"options": {}}, "$.title"),
        ({"title": "x", "surprise": 1}, "$"),
    ],
)
def test_invalid_arguments_point_at_the_failing_path(
    catalog: Catalog, args: dict[str, Any], path: str
) -> None:
    verdict = verify_call(catalog, ACTIVE, {"name": "create_issue", "arguments": args})
    assert verdict.error == "invalid_arguments"
    assert verdict.path == path
    assert path in verdict.message
    reference = _validator_paths(args)
    assert path in reference or (path == "$.title" and "$" in reference)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        ({"function": {"arguments": "{}"}, "type": "function"}, "no tool name"),
        ("create_issue", "a tool call is a JSON object"),
        ({"type": "function", "function": "create_issue"}, "'function' must be an object"),
        ({"functionCall": []}, "'functionCall' must be an object"),
    ],
)
def test_malformed_calls_without_a_name(catalog: Catalog, call: Any, fragment: str) -> None:
    verdict = verify_call(catalog, ACTIVE, call)
    assert verdict.error == "malformed_call"
    assert fragment in verdict.message


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ('{"title": ', "arguments are not valid JSON"),
        ("[1, 2]", "arguments must be a JSON object, got list"),
        (7, "arguments must be a JSON object, got int"),
    ],
)
def test_malformed_arguments_name_the_tool(catalog: Catalog, arguments: Any, fragment: str) -> None:
    call = {"type": "function", "function": {"name": "create_issue", "arguments": arguments}}
    verdict = verify_call(catalog, ACTIVE, call)
    assert verdict.error == "malformed_call"
    assert verdict.tool_id == "github/create_issue"
    assert fragment in verdict.message


def test_empty_arguments_mean_no_arguments(catalog: Catalog) -> None:
    call = {"type": "function", "function": {"name": "create_issue", "arguments": ""}}
    assert verify_call(catalog, ACTIVE, call).error == "invalid_arguments"
    assert verify_call(catalog, ["slack/search"], {"name": "slack__search", "arguments": ""}).ok


def test_a_shared_name_resolves_to_the_one_active_tool(catalog: Catalog) -> None:
    verdict = verify_call(catalog, ["slack/search"], {"name": "search"})
    assert verdict.ok
    assert verdict.tool_id == "slack/search"
    inactive = verify_call(catalog, ["github/create_issue"], {"name": "search"})
    assert inactive.error == "tool_not_available"
    both = verify_call(catalog, ["github/search", "slack/search"], {"name": "search"})
    assert both.error == "unknown_tool"
    assert both.closest in ("github__search", "slack__search")
    assert "github__search" in both.message
    assert "slack__search" in both.message


def test_exposed_names_match_ignoring_case(catalog: Catalog) -> None:
    verdict = verify_call(catalog, ["slack/post_message"], {"name": "POST_MESSAGE"})
    assert verdict.ok
    assert verdict.tool_id == "slack/post_message"


@pytest.mark.parametrize(
    "name",
    [
        "po\u017ft_me\u017f\u017fage",  # long s: Unicode case folding makes it "s"
        "PO\u017fT_MESSAGE",
        "post_message\u200b",  # a zero-width space
        "\uff50\uff4f\uff53\uff54_message",  # full-width letters
    ],
)
def test_look_alike_names_do_not_pass_as_an_exposed_name(catalog: Catalog, name: str) -> None:
    # Exposed names are ASCII: a client that folds case folds ASCII letters, and a name no
    # tool has is refused rather than passed as the tool it looks like.
    promotion = promote_tools(catalog, ["slack/post_message"], pool="digest")
    verdict = verify_call(catalog, promotion, {"name": name, "arguments": {}})
    assert verdict.error == "unknown_tool"
    assert verdict.closest == "post_message"


def test_a_look_alike_of_the_search_tool_name_is_unknown(catalog: Catalog) -> None:
    promotion = promote_tools(catalog, ["slack/post_message"], pool="digest")
    call = {"name": "tool_\u017fearch", "arguments": {"query": "x"}}
    verdict = verify_call(catalog, promotion, call)
    assert verdict.error == "unknown_tool"
    assert verdict.closest == "tool_search"


@pytest.mark.parametrize(
    "call",
    [
        {"function_call": {"name": "post_message", "args": {}}},  # Gemini, Python SDK
        {"function_call": {"name": "post_message", "arguments": "{}"}},  # OpenAI legacy
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "post_message", "arguments": {}},
        },
    ],
)
def test_more_call_shapes(catalog: Catalog, call: dict[str, Any]) -> None:
    verdict = verify_call(catalog, ["slack/post_message"], call)
    assert verdict.ok
    assert verdict.tool_id == "slack/post_message"


def test_a_name_that_is_not_a_string_is_malformed(catalog: Catalog) -> None:
    verdict = verify_call(catalog, ACTIVE, {"name": ["create_issue"], "arguments": {}})
    assert verdict.error == "malformed_call"
    assert "must be a string" in verdict.message


def test_search_tool_calls_pass_with_a_promotion(catalog: Catalog) -> None:
    promotion = promote_tools(catalog, ACTIVE, pool="digest")
    verdict = verify_call(catalog, promotion, {"name": "tool_search", "arguments": {"query": "x"}})
    assert verdict.ok
    assert verdict.tool_id == TOOL_SEARCH_ID
    assert verdict.available[0] == "tool_search"
    assert not verify_call(catalog, ACTIVE, {"name": "tool_search"}).ok


def test_search_tool_calls_use_the_name_the_promotion_sent() -> None:
    clashing = Catalog.from_tools([{"name": "Tool_Search"}, {"name": "x"}], server="toolgate")
    promotion = promote_tools(clashing, ["toolgate/x"], pool="digest")
    assert promotion.search_tool_name == "toolgate_tool_search"
    for name in ("toolgate_tool_search", "TOOLGATE_TOOL_SEARCH"):
        verdict = verify_call(clashing, promotion, {"name": name, "arguments": {"query": "q"}})
        assert verdict.ok, verdict.message
        assert verdict.tool_id == TOOL_SEARCH_ID
    for name in ("Tool_Search", "tool_search"):
        real = verify_call(clashing, promotion, {"name": name, "arguments": {}})
        assert real.error == "tool_not_available"
        assert real.tool_id == "toolgate/Tool_Search"


def test_a_promotion_of_another_catalog_is_refused(catalog: Catalog) -> None:
    old = Catalog.from_tools([{"name": "create_issue"}], server="github")
    promotion = promote_tools(old, ["github/create_issue"])
    with pytest.raises(InvalidInputError, match=f"catalog version {old.version}"):
        verify_call(catalog, promotion, {"name": "create_issue", "arguments": {}})


def test_bad_active_ids(catalog: Catalog) -> None:
    with pytest.raises(InvalidInputError, match="active_ids"):
        verify_call(catalog, "github/create_issue", {"name": "create_issue"})


def test_tool_results_for_every_provider(catalog: Catalog) -> None:
    verdict = verify_call(catalog, ACTIVE, {"name": "github__search", "id": "c9", "arguments": {}})
    openai = verdict.to_tool_result("openai")
    assert openai["role"] == "tool"
    assert openai["tool_call_id"] == "c9"
    body = json.loads(openai["content"])
    assert body["error"] == "tool_not_available"
    assert body["closest"] == "slack__search"
    assert body["available"] == list(verdict.available)
    responses = verdict.to_tool_result("openai-responses")
    assert responses["type"] == "function_call_output"
    assert responses["call_id"] == "c9"
    anthropic = verdict.to_tool_result("anthropic")
    assert anthropic["is_error"] is True
    assert anthropic["tool_use_id"] == "c9"
    gemini = verdict.to_tool_result("gemini")["functionResponse"]
    assert gemini["name"] == "github__search"
    assert gemini["response"]["error"] == "tool_not_available"
    assert verdict.to_tool_result("gemini-json-schema") == verdict.to_tool_result("gemini")
    mcp = verdict.to_tool_result("mcp")
    assert mcp["isError"] is True
    assert "not available" in mcp["content"][0]["text"]
    with pytest.raises(InvalidInputError, match="unknown provider"):
        verdict.to_tool_result("bedrock")
    ok = verify_call(catalog, ACTIVE, CALL_SHAPES["mcp"])
    with pytest.raises(InvalidInputError, match="passed verification"):
        ok.to_tool_result("openai")


def test_verdict_serialises_without_arguments(catalog: Catalog) -> None:
    verdict = verify_call(catalog, ACTIVE, CALL_SHAPES["anthropic"])
    data = json.loads(json.dumps(verdict.to_dict()))
    assert data["ok"] is True
    assert "arguments" not in data
    assert repr(verdict) == "Verdict(ok, github/create_issue)"


def test_a_verdict_repr_stays_short_whatever_the_name_called(catalog: Catalog) -> None:
    # A model's name is its own: one of a megabyte made a log line of as much.
    call = {"name": "create_issue" + "x" * 1_000_000, "arguments": {}}
    verdict = verify_call(catalog, ACTIVE, call)
    assert verdict.error == "unknown_tool"
    assert len(repr(verdict)) < 300
    assert repr(verdict).startswith("Verdict(unknown_tool, 'create_issuexxx")


def test_parse_and_closest_helpers() -> None:
    assert parse_tool_call({"name": "x", "arguments": None}).arguments == {}
    assert closest_name("list_issue", ["list_issues", "get_me"]) == "list_issues"
    assert closest_name("issues list", ["list_issues", "get_me"]) == "list_issues"
    assert closest_name("anything", []) is None


@pytest.mark.parametrize(
    ("name", "candidates"),
    [
        ("delete_everything", ["write_query", "read_query", "list_tables"]),
        ("drop_database", ["create_issue", "search_code"]),
        ("delete_everything", ["delete_note", "list_notes", "add_note"]),  # one word in three
    ],
)
def test_an_unrelated_name_gets_no_suggestion(name: str, candidates: list[str]) -> None:
    assert closest_name(name, candidates) is None


def test_a_name_far_longer_than_any_tool_name_gets_no_suggestion(catalog: Catalog) -> None:
    """A hostile name of a million characters sharing a word with the tools: a suggestion
    cost a pass over all of it per tool, holding the GIL, and no tool is named like it."""
    name = "_".join(["search"] * 150_000)
    verdict = verify_call(catalog, ACTIVE, {"name": name, "arguments": {}})
    assert verdict.error == "unknown_tool"
    assert verdict.closest is None
    assert closest_name("search_" * 30, ["search", "get_me"]) == "search"  # shared words still


def test_the_edit_distance_is_skipped_when_the_lengths_rule_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Names whose lengths differ by more than half cannot be misspellings of each other: only
    their shared words count, at no cost quadratic in their lengths."""
    computed: list[tuple[str, str]] = []

    def counted(a: str, b: str) -> float:
        computed.append((a, b))
        return similarity(a, b)

    similarity = verify_module._edit_similarity
    monkeypatch.setattr(verify_module, "_edit_similarity", counted)
    assert closest_name("list_" * 40, ["list_issues", "get_me"]) == "list_issues"
    assert computed == []
    assert closest_name("list_isues", ["list_issues", "get_me"]) == "list_issues"  # a typo still
    assert computed


def test_a_made_up_name_is_cut_short_in_what_goes_back_to_the_model(catalog: Catalog) -> None:
    name = "x" * 100_000
    for verdict in (
        verify_call(catalog, ACTIVE, {"name": name, "arguments": {}}),
        verify_name({"name": name, "arguments": {}}, ["get_me"]),
    ):
        assert verdict.error == "unknown_tool"
        assert verdict.name == name  # the verdict keeps what was called
        assert len(verdict.message) < 1_000
        assert "There is no tool called 'xxxx" in verdict.message


def test_a_refusal_suggests_nothing_unrelated() -> None:
    catalog = Catalog.load({"sqlite": {"tools": [{"name": "write_query"}, {"name": "read_query"}]}})
    verdict = verify_call(catalog, catalog.ids, {"name": "delete_everything"})
    assert verdict.error == "unknown_tool"
    assert verdict.closest is None
    assert "Did you mean" not in verdict.message
    # A misspelling and a shared word still get one.
    assert closest_name("reed_query", ["write_query", "read_query"]) == "read_query"
    assert closest_name("query_read", ["write_query", "read_query"]) == "read_query"


def test_threads_get_the_same_verdicts_as_one_thread(catalog: Catalog) -> None:
    calls = [
        *CALL_SHAPES.values(),
        {"name": "create_issue", "arguments": {"title": "x", "options": {"limit": 500}}},
        {"name": "github__search", "arguments": {}},
        {"name": "create_isue", "arguments": {}},
    ] * 25
    serial = [verify_call(catalog, ACTIVE, c).to_dict() for c in calls]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(lambda c: verify_call(catalog, ACTIVE, c).to_dict(), calls))
    assert parallel == serial


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("uri", "https://example.com/a", "not a uri"),
        ("date-time", "2026-11-23T10:00:00Z", "tomorrow"),
    ],
)
def test_string_formats_are_checked(fmt: str, good: str, bad: str) -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}
    catalog = Catalog.from_tools([{"name": "f", "description": "F.", "inputSchema": schema}])
    assert verify_call(catalog, ["default/f"], {"name": "f", "arguments": {"v": good}}).ok
    verdict = verify_call(catalog, ["default/f"], {"name": "f", "arguments": {"v": bad}})
    assert verdict.error == "invalid_arguments"
    assert verdict.path == "$.v"


def test_a_value_outside_a_large_enum_is_refused_with_a_few_of_its_values() -> None:
    # The refusal repeated the whole enum: 2,000 regions made a 32 KB message to the model.
    regions = [f"region-{i:04d}" for i in range(2000)]
    schema = {"type": "object", "properties": {"r": {"enum": regions}}}
    catalog = Catalog.from_tools([{"name": "f", "description": "F.", "inputSchema": schema}])
    verdict = verify_call(catalog, ["default/f"], {"name": "f", "arguments": {"r": "region-19"}})
    assert verdict.error == "invalid_arguments"
    assert verdict.path == "$.r"
    assert len(verdict.message) < 600
    assert "'region-0000', 'region-0001'" in verdict.message  # the first few
    assert "region-0100" not in verdict.message
    assert "the 2000 values allowed" in verdict.message
    assert "1990 more" in verdict.message
    assert "'region-0019'" in verdict.message  # and the closest


def test_a_small_enum_is_listed_whole() -> None:
    schema = {"type": "object", "properties": {"r": {"enum": ["eu", "us"]}}}
    catalog = Catalog.from_tools([{"name": "f", "description": "F.", "inputSchema": schema}])
    verdict = verify_call(catalog, ["default/f"], {"name": "f", "arguments": {"r": "mars"}})
    assert "'mars' is not one of ['eu', 'us']" in verdict.message


@pytest.mark.parametrize(
    "schema", [{"const": "x" * 3000}, {"type": "integer"}, {"maxLength": 2}], ids=str
)
def test_a_refusal_quotes_a_long_value_cut_short(schema: dict[str, Any]) -> None:
    # jsonschema's messages hold the value (and a const) whole: the model's own 50 KB
    # argument came back in its refusal.
    outer = {"type": "object", "properties": {"v": schema}}
    catalog = Catalog.from_tools([{"name": "f", "description": "F.", "inputSchema": outer}])
    call = {"name": "f", "arguments": {"v": "y" * 50_000}}
    verdict = verify_call(catalog, ["default/f"], call)
    assert verdict.error == "invalid_arguments"
    assert len(verdict.message) < 800


def test_a_refusal_names_a_long_key_of_the_models_cut_short() -> None:
    # The path names the key, which a free-form map lets the model choose: its 50 KB key
    # came back whole in the refusal, though the value beside it was cut short.
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    catalog = Catalog.from_tools([{"name": "f", "description": "F.", "inputSchema": schema}])
    key = "k" * 50_000
    verdict = verify_call(catalog, ["default/f"], {"name": "f", "arguments": {key: "x"}})
    assert verdict.error == "invalid_arguments"
    assert verdict.path == f"$.{key}"  # the caller's, exact
    assert len(verdict.message) < 600
    assert f"at $.{'k' * 80}..." in verdict.message


def _documented_formats() -> list[str]:
    """The formats docs/api.md says verify asserts."""
    api = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text("utf-8")
    found = re.search(r"verify asserts(.*?)\(RE2\)", api, re.S)
    assert found is not None, "api.md no longer lists the formats verify asserts"
    return re.findall(r"`([a-z0-9-]+)`", found[1])


@pytest.mark.parametrize("fmt", _documented_formats())
def test_every_documented_format_is_asserted(fmt: str) -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}
    catalog = Catalog.from_tools([{"name": "f", "description": "F.", "inputSchema": schema}])
    bad = {"name": "f", "arguments": {"v": "not ::: a [ value"}}
    assert verify_call(catalog, ["default/f"], bad).error == "invalid_arguments"


def test_the_formats_asserted_do_not_grow_with_what_else_is_installed() -> None:
    # jsonschema checks `hostname` when fqdn is installed (Jupyter installs it, with the
    # checkers of color, duration, iri...): a verdict must not change with the environment.
    # In a child, where a stand-in fqdn, refusing every name, is importable first.
    code = (
        "import sys, types\n"
        "fqdn = types.ModuleType('fqdn')\n"
        "class FQDN:\n"
        "    def __init__(self, name, min_labels=1):\n"
        "        self.is_valid = False\n"
        "fqdn.FQDN = FQDN\n"
        "sys.modules['fqdn'] = fqdn\n"
        "from toolgate.catalog.catalog import Catalog; from toolgate.verify import verify_call\n"
        "v = {'type': 'string', 'format': 'hostname'}\n"
        "schema = {'type': 'object', 'properties': {'v': v}}\n"
        "c = Catalog.from_tools([{'name': 'f', 'description': 'F.', 'inputSchema': schema}])\n"
        "print(verify_call(c, ['default/f'], {'name': 'f', 'arguments': {'v': 'example.com'}}).ok)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "True", done.stderr[-2000:]


BROKEN_SCHEMAS: dict[str, dict[str, Any]] = {
    "pointer-to-nowhere": {"x": {"$ref": "#/$defs/nope"}},
    "remote": {"x": {"$ref": "https://example.com/schema.json"}},
    "bad-pattern": {"x": {"type": "string", "pattern": "[unclosed"}},
    "cycle": {"x": {"$ref": "#/properties/x"}},
    # Cycles through keywords that apply to the same value never end: jsonschema recurses
    # until the interpreter's limit, which a `not` hits inside referencing's Rust map,
    # where it becomes a PanicException (a BaseException) rather than a RecursionError.
    "not-cycle": {"x": {"not": {"$ref": "#/properties/x"}}},
    "anyof-cycle": {"x": {"anyOf": [{"type": "integer"}, {"allOf": [{"$ref": "#/properties/x"}]}]}},
    # No cycle, but each level refers twice to the next: 2**40 schemas checked against "y".
    "fan-out": {
        "x": {"$ref": "#/properties/a0"},
        **{f"a{i}": {"allOf": [{"$ref": f"#/properties/a{i + 1}"}] * 2} for i in range(40)},
        "a40": {"type": "string"},
    },
}


@pytest.mark.parametrize("case", list(BROKEN_SCHEMAS))
def test_broken_schemas_never_reach_verify_and_never_crash_it(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.request

    import jsonschema.validators

    from toolgate.catalog.catalog import InvalidToolsError
    from toolgate.catalog.tool import Tool

    fetched: list[str] = []

    def no_network(url: Any, *args: Any, **kwargs: Any) -> Any:
        fetched.append(str(url))
        raise OSError("network access attempted")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setattr(jsonschema.validators, "urlopen", no_network, raising=False)
    schema = {"type": "object", "properties": BROKEN_SCHEMAS[case]}
    with pytest.raises(InvalidToolsError):
        Catalog.from_tools([{"name": "t", "inputSchema": schema}], server="s")
    # Tools built in code skip the load-time check; verify must still fail closed, offline.
    built = Catalog([Tool("s", "t", "Does things.", schema)])
    verdict = verify_call(built, ["s/t"], {"name": "t", "arguments": {"x": "y"}})
    assert not verdict.ok
    assert verdict.error == "invalid_arguments"
    assert "input schema is broken" in verdict.message
    assert fetched == []


def test_a_shared_name_suggests_only_active_tools() -> None:
    servers = {s: {"tools": [{"name": "search", "description": f"Search {s}."}]} for s in "abc"}
    catalog = Catalog.load(servers)
    verdict = verify_call(catalog, ["b/search", "c/search"], {"name": "search"})
    assert verdict.error == "unknown_tool"
    assert verdict.closest == "b__search"
    assert "a__search" not in verdict.message


def test_search_tool_arguments_are_checked(catalog: Catalog) -> None:
    promotion = promote_tools(catalog, ACTIVE, pool="digest")
    for arguments in ({}, {"query": 42}, {"q": "x"}):
        verdict = verify_call(catalog, promotion, {"name": "tool_search", "arguments": arguments})
        assert verdict.error == "invalid_arguments", arguments
        assert verdict.tool_id == TOOL_SEARCH_ID
        assert verdict.path == "$.query"  # missing or not a string
    bad_json = {"type": "function", "function": {"name": "tool_search", "arguments": "{"}}
    assert verify_call(catalog, promotion, bad_json).error == "malformed_call"


def test_a_search_tool_the_budget_dropped_cannot_be_called(catalog: Catalog) -> None:
    blocked = promote_tools(
        catalog, ACTIVE, pool="digest", budget=Budget(max_schema_tokens=1, mode="block")
    )
    assert blocked.tools == []
    assert blocked.search_tool_name is None
    call = {"name": "tool_search", "arguments": {"query": "x"}}
    assert verify_call(catalog, blocked, call).error == "unknown_tool"


def test_the_closest_name_reads_original_names_too() -> None:
    servers = {
        "dart-mcp-server": {"tools": [{"name": "get_config"}, {"name": "run"}]},
        "other": {"tools": [{"name": "get_config"}]},
    }
    catalog = Catalog.load(servers)
    verdict = verify_call(catalog, ["dart-mcp-server/get_config"], {"name": "get_confg"})
    assert verdict.error == "unknown_tool"
    assert verdict.closest == "dart-mcp-server__get_config"  # the name the model must use


def test_a_name_only_inactive_tools_share_charges_none_of_them(catalog: Catalog) -> None:
    verdict = verify_call(catalog, ["github/create_issue"], {"name": "search", "arguments": {}})
    assert verdict.error == "tool_not_available"
    assert verdict.tool_id is None
    assert "not available" in verdict.message


def test_verify_name_tells_not_offered_from_unknown_in_verify_calls_words(
    catalog: Catalog,
) -> None:
    offered = ["create_issue", "search"]
    call = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    assert verify_name(call, offered).ok
    hidden = verify_name({"name": "post_message"}, offered, known=["post_message", *offered])
    assert (hidden.error, hidden.available) == ("tool_not_available", tuple(offered))
    # The same words verify_call gives for a tool it knows but did not offer.
    full = verify_call(catalog, ["github/create_issue"], {"name": "post_message"})
    assert hidden.message.split(" Tools you")[0] == full.message.split(" Tools you")[0]
    assert "create_issue, search" in hidden.message
    typo = verify_name({"name": "create_isue"}, offered, known=offered)
    assert (typo.error, typo.closest) == ("unknown_tool", "create_issue")
    assert "There is no tool called 'create_isue'" in typo.message
    broken = verify_name({"arguments": {}}, offered)
    assert broken.error == "malformed_call"
    assert json.loads(hidden.to_tool_result()["content"])["error"] == "tool_not_available"


# ECMA-262's answers (node's RegExp with the "u" flag): its \s takes every Unicode space
# and the byte order mark, where RE2's is ASCII, and its dot stops at \r and U+2028 too.
ECMA_MATCHES = [
    ("^[\\w\\s-]+$", "Hello\u00a0World", True),
    ("^[\\w\\s-]+$", "Hello\u3000World", True),
    ("^\\S+$", "a\u00a0b", False),
    ("^\\s*$", "\u2028\v", True),
    ("^[^\\s]+$", "a\ufeffb", False),
    ("^[\\s\\S]+$", "a\u00a0\nb", True),
    ("^.+$", "a\rb", False),
    ("^.+$", "a\u2028b", False),
    ("^[.]$", ".", True),
    ("^\\.$", "a", False),
]


@pytest.mark.parametrize(("pattern", "text", "matches"), ECMA_MATCHES)
def test_patterns_read_spaces_and_the_dot_as_ecma_262_does(
    pattern: str, text: str, matches: bool
) -> None:
    from toolgate.catalog.schema import pattern_search

    assert pattern_search(pattern, text) is matches


# A "-" after a class escape is a plain "-", as RE2 and ECMA-262's Annex B read it (with
# the "u" flag ECMA-262 refuses the pattern): spelling the escape out must not make a range.
@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("^[\\s-z]+$", "- z", True),
        ("^[\\s-z]+$", "m", False),
        ("^[\\w\\s-,.]+$", "Hello\u00a0World, a-b.", True),
        ("^[\\S-]+$", "a-b", True),
        ("^[\\S-]+$", "a b", False),
    ],
)
def test_a_dash_after_a_space_class_is_a_dash(pattern: str, text: str, matches: bool) -> None:
    from toolgate.catalog.schema import pattern_search

    assert pattern_search(pattern, text) is matches


HOSTILE_SCHEMA = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "pattern": "^(a+)+$"},
        "u": {"type": "array", "uniqueItems": True},
        "r": {"type": "string", "format": "regex"},
        "id": {"type": "string", "pattern": "^\\u0041[0-9]+$"},  # an ECMA-262 escape
    },
    "patternProperties": {"^(b+)+$": {"type": "integer"}},
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def hostile() -> Catalog:
    return Catalog.load({"tools": [{"name": "t", "inputSchema": HOSTILE_SCHEMA}]}, server="x")


@pytest.mark.parametrize(
    ("arguments", "error", "found"),
    [
        # Each took longer than the test's budget with Python's re (38 s at 30 characters).
        ({"s": "a" * 40 + "!"}, "invalid_arguments", "does not match '^(a+)+$'"),
        ({"b" * 40 + "!": 1}, "invalid_arguments", "does not match any of the regexes"),
        ({"b" * 40: "x"}, "invalid_arguments", "'x' is not of type 'integer'"),
        ({"s": "aaaa", "id": "A12"}, None, ""),
        ({"id": "B12"}, "invalid_arguments", "does not match"),
        ({"r": "(a|b)*c"}, None, ""),
        ({"r": "(?=a)"}, "invalid_arguments", "is not a 'regex'"),
        # Pairwise comparison of 40,000 unhashable items.
        ({"u": [{"k": i} for i in range(40_000)]}, None, ""),
        ({"u": [{"k": 1}, {"k": 1.0}]}, "invalid_arguments", "non-unique"),
        ({"u": [True, 1]}, None, ""),
        # ValueError and RecursionError, although verify never raises.
        ('{"s": ' + "9" * 5_000 + "}", "malformed_call", "Exceeds the limit"),
        ("[" * 100_000, "malformed_call", "nested too deeply"),
        ({"a": json.loads("[" * 500 + "]" * 500)}, "malformed_call", "deeper than 64 levels"),
        ({"s": 10**5000}, "malformed_call", "more than 4,300 digits"),
        # Each value costs microseconds of Python, with the GIL held: the walk stops early.
        ({"u": list(range(99_999))}, None, ""),
        ({"u": [0] * 3_000_000}, "malformed_call", "more than 100,000 values"),
        ({"u": [{str(i): 0 for i in range(100_000)}]}, "malformed_call", "more than 100,000"),
    ],
)
def test_hostile_arguments_get_a_verdict_in_linear_time(
    hostile: Catalog, arguments: Any, error: str | None, found: str
) -> None:
    verdict = verify_call(hostile, ["x/t"], {"name": "t", "arguments": arguments})
    assert verdict.error == error, verdict.message
    assert found in verdict.message


def test_a_catastrophic_pattern_finishes_in_a_child_within_seconds() -> None:
    # In a child with a deadline: with Python's re this holds the GIL for hours.
    code = (
        "from toolgate.catalog.catalog import Catalog; from toolgate.verify import verify_call\n"
        f"c = Catalog.load({{'tools': [{{'name': 't', 'inputSchema': {HOSTILE_SCHEMA!r}}}]}}, "
        "server='x')\n"
        "print(verify_call(c, ['x/t'], {'name': 't', 'arguments': {'s': 'a' * 64 + '!'}}).error)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "invalid_arguments", done.stderr[-2000:]


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "string", "pattern": "^(?=.*[A-Z]).{8,}$"}, "cannot be matched in linear time"),
        ({"type": "string", "pattern": "(a)\\1"}, "cannot be matched in linear time"),
        ({"type": "string", "pattern": "(a{1000}){1000}"}, "invalid repetition size"),
    ],
)
def test_patterns_the_linear_engine_refuses_are_refused_at_load(
    schema: dict[str, Any], reason: str
) -> None:
    tool = {"name": "t", "inputSchema": {"type": "object", "properties": {"p": schema}}}
    with pytest.raises(CatalogError, match=reason):
        Catalog.load({"tools": [tool]}, server="x")
    both = {
        "type": "object",
        "patternProperties": {"^a": {}},
        "allOf": [{"unevaluatedProperties": False}],
    }
    with pytest.raises(CatalogError, match="unevaluatedProperties cannot be checked"):
        Catalog.load({"tools": [{"name": "t", "inputSchema": both}]}, server="x")


def test_a_tool_name_where_an_id_belongs_is_named() -> None:
    catalog = Catalog.load(
        {
            "github": {"tools": [{"name": "issue_write"}, {"name": "search"}]},
            "slack": {"tools": [{"name": "search"}]},
        }
    )
    call = {"name": "issue_write", "arguments": {}}
    with pytest.raises(InvalidInputError, match="'issue_write' is the name of 'github/issue_w"):
        verify_call(catalog, ["issue_write"], call)
    with pytest.raises(InvalidInputError, match="'search' is the name of 'github/search' or "):
        verify_call(catalog, ["search"], call)
    with pytest.raises(InvalidInputError, match="not names: 'github__search' is the name of"):
        promote_tools(catalog, ["github__search"])  # an exposed name
    assert verify_call(catalog, ["github/issue_write"], call).ok
    # An id no tool has is still left out: the call is refused, not the list.
    assert verify_call(catalog, ["github/gone"], call).error == "tool_not_available"


def _listing_tool(n: int) -> dict[str, Any]:
    """A tool with a large schema of its own (about 40 kB as JSON)."""
    files = [f"workspace_{n}/src/file_{i:06d}.py" for i in range(1_200)]
    schema = {"type": "object", "properties": {"path": {"type": "string", "enum": files}}}
    return {"name": "open_file", "description": "Open a file.", "inputSchema": schema}


def test_checked_calls_keep_no_schema_of_a_dropped_catalog_alive() -> None:
    # A gateway checks calls against the catalog of each tools array it is sent and drops
    # the catalog with its router: what verify keeps per tool must go with it.
    def check(n: int) -> None:
        catalog = Catalog.from_tools([_listing_tool(n)], server="s")
        call = {"name": "open_file", "arguments": {"path": f"workspace_{n}/src/file_000001.py"}}
        assert verify_call(catalog, ["s/open_file"], call).ok

    for n in range(-1, 20):  # imports, set-up and the schema check's memo: not measured
        Catalog.from_tools([_listing_tool(n)], server="s")
    check(-1)
    size = len(json.dumps(_listing_tool(0)))
    tracemalloc.start()
    try:
        for n in range(20):
            check(n)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 2 * size  # not 20 parsed schemas (each several times its JSON)


def _stepped_verdict(step: float, value: Any) -> Verdict:
    """The verdict on a call passing ``value`` for a number that must be a multiple of ``step``."""
    schema = {"type": "object", "properties": {"x": {"type": "number", "multipleOf": step}}}
    catalog = Catalog.from_tools([{"name": "t", "inputSchema": schema}], server="s")
    return verify_call(catalog, ["s/t"], {"name": "t", "arguments": {"x": value}})


@pytest.mark.parametrize(
    ("amount", "ok"),
    [(3 * 10**400, True), (10**400, False), (-(10**4000), False), (4.5, True)],
    ids=["3e400", "1e400", "-1e4000", "4.5"],
)
def test_a_float_step_takes_integers_too_large_for_a_float(amount: int, ok: bool) -> None:
    # jsonschema divides the integer by the step as floats, which overflows past 1e308.
    verdict = _stepped_verdict(1.5, amount)
    assert verdict.ok is ok
    if not ok:
        assert "is not a multiple of 1.5" in verdict.message
        assert len(verdict.message) < 400  # the integer is shown cut short


@pytest.mark.parametrize(
    ("price", "ok"),
    [(19.99, True), (0.07, True), (4.35, True), (0.071, False), (7, True)],
)
def test_a_decimal_step_reads_numbers_as_written(price: float, ok: bool) -> None:
    # As floats, 19.99 / 0.01 is 1998.9999999999998: jsonschema refuses a valid price.
    verdict = _stepped_verdict(0.01, price)
    assert verdict.ok is ok
    if not ok:
        assert "is not a multiple of 0.01" in verdict.message


@pytest.mark.parametrize(
    ("price", "ok"),
    [
        (np.float64(19.99), True),
        (np.float32(0.5), True),
        (np.int64(7), True),
        (Decimal("19.99"), True),
        (Decimal("19.991"), False),
        (Decimal("1e999999999"), False),
    ],
    ids=["float64", "float32", "int64", "decimal", "off-step", "huge-exponent"],
)
def test_multiple_of_takes_numbers_of_other_types(price: Any, ok: bool) -> None:
    # Arguments built in code may hold numpy or Decimal numbers, which jsonschema counts as
    # numbers: their repr is no decimal ("np.float64(19.99)"), and reading it raised
    # decimal.InvalidOperation out of verify_call. A huge exponent is refused, not expanded.
    verdict = _stepped_verdict(0.01, price)
    assert verdict.ok is ok
    if not ok:
        assert "is not a multiple of 0.01" in verdict.message


@pytest.mark.parametrize("text", ['{"x": NaN}', '{"x": -Infinity}', '{"x": [Infinity]}'])
def test_nan_and_infinity_in_a_calls_text_are_no_json(text: str) -> None:
    # Python's reader takes them, and NaN passes every bound: maximum 10 let it through.
    schema = {"type": "object", "properties": {"x": {"maximum": 10, "minimum": 0}}}
    catalog = Catalog.from_tools([{"name": "t", "inputSchema": schema}], server="s")
    verdict = verify_call(catalog, ["s/t"], {"name": "t", "arguments": text})
    assert verdict.error == "malformed_call"
    assert "arguments are not valid JSON" in verdict.message
    assert "Infinity" in verdict.message or "NaN" in verdict.message


@pytest.mark.parametrize(
    "arguments",
    [
        {"x": float("nan")},
        {"x": [-1e400]},
        {"y": {"x": np.float64("nan")}},
        {"x": np.float32("nan")},
        {"x": Decimal("NaN")},
        {"x": [Decimal("sNaN")]},
    ],
    ids=["nan", "infinity-in-a-list", "numpy-nan-nested", "float32-nan", "decimal-nan", "snan"],
)
def test_nan_and_infinity_in_a_calls_object_are_refused(arguments: dict[str, Any]) -> None:
    # An arguments object (MCP's tools/call, a Gemini args dict, a call built in code) is
    # not read from text: NaN passed maximum 10 there, as it did in the text before.
    schema = {"type": "object", "properties": {"x": {"maximum": 10, "minimum": 0}}}
    catalog = Catalog.from_tools([{"name": "t", "inputSchema": schema}], server="s")
    verdict = verify_call(catalog, ["s/t"], {"name": "t", "arguments": arguments})
    assert verdict.error == "invalid_arguments"
    assert "NaN or Infinity" in verdict.message
