"""Phase 2 of a promotion with schemas from a schema source, through each schema cache.

One turn promotes 8 tools of GitHub's MCP server (117 tools) in OpenAI format, with
``schema_source`` answering from a dict of input schemas, so after the first pass every
schema is a cache hit, as in a long conversation. Entries, timed on one thread:

* ``Rust SchemaCache``: the cache in the core (``toolgate._toolgate.SchemaCache``);
* ``Python LRUSchemaCache``: the pure-Python twin in
  :mod:`toolgate.promotion.schema_source`;
* ``no cache``: every schema fetched and validated again, each turn;
* ``catalog schemas``: no schema source at all, the floor the others approach.

A second group times the caches alone: ``get_or_fetch`` hits on 64 cached schemas, the JSON
text returned as it is (``... hit``) and parsed as promotion parses it (``... hit + parse``).
Ratios to the Rust cache print at the end:

    .venv/bin/python -m pytest benches/bench_schema_cache.py -q -p no:cacheprovider \\
        -o python_files='bench_*.py'
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from toolgate._toolgate import SchemaCache
from toolgate.catalog.catalog import Catalog
from toolgate.promotion.promote import promote_tools
from toolgate.promotion.schema_source import LRUSchemaCache, SchemaCacheLike

if TYPE_CHECKING:
    from benches.conftest import RatioTable

LISTING = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "catalogs"
    / "github-mcp-server.tools-list.json"
)
GROUP = "promote 8 tools, schemas from a source"
HIT_GROUP = "schema cache, 64 hits"
PER_TURN = 8
TURNS = 64


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    if not LISTING.exists():
        pytest.skip(f"{LISTING} not present")
    return Catalog.load(LISTING, server="github")


def _turns(catalog: Catalog) -> list[list[str]]:
    """Overlapping active sets walking through the catalog, as consecutive turns would."""
    ids = catalog.ids
    return [[ids[(turn * 3 + i) % len(ids)] for i in range(PER_TURN)] for turn in range(TURNS)]


def _promote(
    catalog: Catalog, source: Callable[[str], Any] | None, cache: SchemaCacheLike | None
) -> Callable[[], object]:
    turns = itertools.cycle(_turns(catalog))

    def turn() -> object:
        return promote_tools(catalog, next(turns), schema_source=source, cache=cache, pool="none")

    for _ in range(TURNS):  # every schema cached before timing
        turn()
    return turn


@pytest.mark.parametrize(
    "method",
    [
        "Rust SchemaCache",
        "Python LRUSchemaCache",
        "no cache",
        "catalog schemas",
    ],
)
def test_promote(
    benchmark: BenchmarkFixture, ratio_table: RatioTable, catalog: Catalog, method: str
) -> None:
    """Time one turn's promotion with ``method``'s schemas."""
    schemas = {tool.id: tool.input_schema for tool in catalog}
    source = schemas.__getitem__
    caches: dict[str, SchemaCacheLike | None] = {
        "Rust SchemaCache": SchemaCache(4096, 64 << 20),
        "Python LRUSchemaCache": LRUSchemaCache(4096),
        "no cache": None,
    }
    call = _promote(catalog, source if method in caches else None, caches.get(method))
    benchmark.group = GROUP
    benchmark.pedantic(call, rounds=300, iterations=1, warmup_rounds=20)  # type: ignore[no-untyped-call]
    assert benchmark.stats is not None
    ratio_table.record(GROUP, method, benchmark.stats.stats.min)


@pytest.mark.parametrize("parse", [False, True], ids=["hit", "hit + parse"])
@pytest.mark.parametrize("cache", ["Rust SchemaCache", "Python LRUSchemaCache"])
def test_cache_hits(
    benchmark: BenchmarkFixture, ratio_table: RatioTable, catalog: Catalog, cache: str, parse: bool
) -> None:
    """Time 64 cache hits with ``cache``, parsing the JSON or not."""
    texts = {tool.id: json.dumps(tool.input_schema, sort_keys=True) for tool in catalog}
    ids = list(texts)[:64]
    store: SchemaCacheLike = (
        SchemaCache(4096, 64 << 20) if cache == "Rust SchemaCache" else LRUSchemaCache(4096)
    )
    for tool_id in ids:
        store.get_or_fetch(tool_id, 1, partial(texts.__getitem__, tool_id))

    def hits() -> object:
        found = [store.get_or_fetch(tool_id, 1, _never) for tool_id in ids]
        return [json.loads(text) for text in found] if parse else found

    group = f"{HIT_GROUP}{' + parse' if parse else ''}"
    benchmark.group = group
    benchmark.pedantic(hits, rounds=300, iterations=1, warmup_rounds=20)  # type: ignore[no-untyped-call]
    assert benchmark.stats is not None
    ratio_table.record(group, cache, benchmark.stats.stats.min)


def _never() -> str:
    raise AssertionError("every schema is cached")
