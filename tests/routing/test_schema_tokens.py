"""Schema token counts are saved with a router, so adaptive selection never loads its catalog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.routing.sealed import write_sealed
from tests.routing.test_selection import TOOLS as SELECTION_TOOLS
from toolgate import IndexFormatError
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.tool import Tool
from toolgate.embedding.embedder import Embedder
from toolgate.formats.tokens import count_text
from toolgate.routing import outline
from toolgate.routing.router import Router, RouterConfig

# Three servers of the selection tests' catalog: seven tools.
TOOLS = {server: SELECTION_TOOLS[server] for server in ("weather", "mail", "files")}
QUERY = "what is the weather forecast for Lisbon"
LEAN = RouterConfig(min_tools=4, floor_tokens=0, keep_ratio=1.0)


def _fresh(catalog: Catalog) -> list[int]:
    return [count_text(t.definition_json("openai", compact=True), "cl100k_base") for t in catalog]


@pytest.fixture(scope="module")
def router(embedder: Embedder) -> Router:
    return Router.from_catalog(Catalog.load(TOOLS), config=LEAN, embedder=embedder, cache=None)


@pytest.fixture
def saved(router: Router, tmp_path: Path) -> Path:
    router.save(tmp_path / "r")
    return tmp_path / "r"


def _manifest(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "router.json").read_text())
    return data


def test_counts_are_saved_and_read_back_as_a_fresh_count(
    router: Router, saved: Path, embedder: Embedder
) -> None:
    fresh = _fresh(router.catalog)
    assert all(count > 0 for count in fresh)
    assert _manifest(saved)["schema_tokens"] == fresh
    opened = Router.open(saved, embedder=embedder)
    assert opened._parts.outline.schema_tokens == tuple(fresh)


def test_a_router_from_disk_routes_adaptively_without_its_catalog(
    router: Router, saved: Path, embedder: Embedder
) -> None:
    plain = router.route(QUERY, top_k=6, adaptive=False)
    lean = router.route(QUERY, top_k=6)
    assert lean.ids == plain.ids[:1]  # floor_tokens=0: the counts cut the floor short
    (saved / "catalog.json").write_text("not a catalog")
    opened = Router.open(saved, embedder=embedder)
    assert opened.route(QUERY, top_k=6).ids == lean.ids
    with pytest.raises(IndexFormatError, match="catalog"):
        _ = opened.catalog


def test_a_manifest_without_counts_counts_from_the_catalog(
    router: Router, saved: Path, embedder: Embedder, tmp_path: Path
) -> None:
    data = _manifest(saved)
    del data["schema_tokens"]
    write_sealed(saved / "router.json", data)
    opened = Router.open(saved, embedder=embedder)
    assert opened._parts.outline.schema_tokens is None
    assert opened.route(QUERY, top_k=6).ids == router.route(QUERY, top_k=6).ids
    opened.save(tmp_path / "again")  # saved again, it gains the counts
    assert _manifest(tmp_path / "again")["schema_tokens"] == _fresh(router.catalog)


def test_refresh_counts_only_the_tools_that_changed(
    router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[str] = []
    count = outline.tool_schema_tokens

    def counting(tool: Tool) -> int:
        counted.append(tool.id)
        return count(tool)

    monkeypatch.setattr(outline, "tool_schema_tokens", counting)
    changed = json.loads(json.dumps(TOOLS))
    changed["mail"]["tools"][0]["description"] = "Send an email with attachments to a person."
    refreshed = router.refresh(Catalog.load(changed))
    assert counted == ["mail/send_email"]
    assert refreshed._parts.outline.schema_tokens == tuple(_fresh(refreshed.catalog))
    assert refreshed._parts.outline.schema_tokens != router._parts.outline.schema_tokens


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1, 2, 3], "schema_tokens holds 3 counts for 7 rows"),
        ([1, 2, -1, 4, 5, 6, 7], r"schema_tokens\[2\] -1 is not a count >= 0"),
        ([1, 2, 3, 4.0, 5, 6, 7], r"schema_tokens\[3\] 4.0 is not a count >= 0"),
        ([1, True, 3, 4, 5, 6, 7], r"schema_tokens\[1\] True is not a count >= 0"),
        ([1, 2, 3, 4, 5, "6", 7], r"schema_tokens\[5\] '6' is not a count >= 0"),
        ({"a": 1}, "schema_tokens is a dict, not a list"),
    ],
)
def test_bad_counts_are_refused(saved: Path, embedder: Embedder, value: Any, message: str) -> None:
    data = _manifest(saved)
    data["schema_tokens"] = value
    write_sealed(saved / "router.json", data)
    with pytest.raises(IndexFormatError, match=rf"router\.json: malformed manifest: {message}"):
        Router.open(saved, embedder=embedder)


def test_counting_leaves_no_definition_on_the_tools(embedder: Embedder) -> None:
    # A build counts every tool's compact definition: kept on each tool, those doubled the
    # catalog's memory (a gateway holds one catalog per tools array), for the few tools a
    # turn promotes.
    catalog = Catalog.load(TOOLS)
    built = Router.from_catalog(catalog, config=LEAN, embedder=embedder, cache=None)
    kept = [t.id for t in catalog if {"_compact_definitions", "_definition_json"} & vars(t).keys()]
    assert kept == []
    assert built._parts.outline.schema_tokens == tuple(_fresh(Catalog.load(TOOLS)))
