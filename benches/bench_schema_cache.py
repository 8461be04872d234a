"""Phase 2 of a promotion with schemas from a schema source, through the schema cache.

One turn promotes 8 tools of GitHub's MCP server (117 tools) in OpenAI format, with
``schema_source`` answering from a dict of input schemas, so after the first pass every
schema is a cache hit, as in a long conversation. Entries, timed on one thread:

* ``Rust SchemaCache``: the cache in the core (``toolgate._toolgate.SchemaCache``);
* ``no cache``: every schema fetched and validated again, each turn;
* ``catalog schemas``: no schema source at all, the floor the others approach.

Ratios to the cache print at the end:

    .venv/bin/python -m pytest benches/bench_schema_cache.py -q -p no:cacheprovider \\
        -o python_files='bench_*.py'
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from toolgate._toolgate import SchemaCache
from toolgate.catalog.catalog import Catalog
from toolgate.promotion.promote import promote_tools
from toolgate.promotion.schema_source import SchemaCacheLike

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
        "no cache": None,
    }
    call = _promote(catalog, source if method in caches else None, caches.get(method))
    benchmark.group = GROUP
    benchmark.pedantic(call, rounds=300, iterations=1, warmup_rounds=20)  # type: ignore[no-untyped-call]
    assert benchmark.stats is not None
    ratio_table.record(GROUP, method, benchmark.stats.stats.min)
