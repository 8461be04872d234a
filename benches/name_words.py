"""Name words: routing quality by ``RouterConfig.name_weight``.

The best ``2k`` ranked tools are ordered by ``fused + name_weight * coverage - 0.65 * ln(1 +
place)``, coverage being the share of the tool name's words the request holds (``order_by_name``
in ``rust/route.rs``). For each workload of :func:`benches.centring.workloads` (the labelled
sets, up to ``--n`` sampled queries each, and the multi-turn fixtures whole) this prints
``toolgate eval``'s recall@10, complete@5, complete@10, nDCG@10 and complete@default at each
weight of :data:`WEIGHTS`, on one index per workload. ``--whole-registry`` routes the MCP
tasks over every tool of the Docker registry instead (4,993 tools of 250 servers).
``--speed`` times ``Router.route`` at N = 10,000 (the catalog and queries of
:mod:`benches.route_speed`) at 0 and the default, interleaved query by query, each query's
embedding memoised first: what is left is the core and selection, where the order is made::

    .venv/bin/python -m benches.name_words [--n 800]
    .venv/bin/python -m benches.name_words --whole-registry
    .venv/bin/python -m benches.name_words --speed
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import replace
from typing import Any

from benches import mcp_tasks
from benches.bench_route import TopUpEmbedder, query_pool, real_tools, scale_catalog
from benches.centring import COLUMNS as CENTRING_COLUMNS
from benches.centring import workloads
from benches.quality import quality_rows
from benches.route_speed import FRESH, N, interleaved_ms, percentiles
from benches.tables import markdown
from toolgate.catalog.catalog import Catalog
from toolgate.embedding.embedder import Embedder
from toolgate.evaluation.evaluate import LabelledQuery
from toolgate.routing.router import Router, RouterConfig

WEIGHTS = (0.0, 0.2, 0.4, 0.6)
COLUMNS = tuple("name_weight" if c == "row_centring" else c for c in CENTRING_COLUMNS)


def by_weight(label: str, catalog: Catalog, queries: list[LabelledQuery]) -> list[dict[str, Any]]:
    """``evaluate``'s figures at each weight, on one index."""
    base = Router.from_catalog(catalog)
    routers = {w: base.with_config(replace(base.config, name_weight=w)) for w in WEIGHTS}
    return quality_rows(label, routers, queries, key="name_weight")


def speed(rounds: int = 5) -> str:
    """p50 and p90 milliseconds of a route at N = 10,000 by weight, embeddings memoised."""
    real, queries = real_tools(), query_pool()[:FRESH]
    with tempfile.TemporaryDirectory(prefix="toolgate-name-words-") as workdir:
        catalog = scale_catalog(N, real)
        Router.from_catalog(catalog, embedder=TopUpEmbedder(), cache=False, path=workdir)  # type: ignore[arg-type]
        base = Router.open(workdir, embedder=Embedder(precision="int8", progress=False))
        weights = (0.0, RouterConfig().name_weight)
        routers = {w: base.with_config(replace(base.config, name_weight=w)) for w in weights}
        for text in queries:
            base.route(text)  # the embedding, memoised for every view of the router
        return percentiles(interleaved_ms(routers, queries, rounds), "name_weight ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=800, help="queries sampled per labelled set")
    parser.add_argument(
        "--whole-registry", action="store_true", help="the MCP tasks over the whole registry"
    )
    parser.add_argument("--speed", action="store_true", help="route time at N = 10,000")
    args = parser.parse_args(argv)
    if args.speed:
        print(speed())
        return 0
    if args.whole_registry:
        catalog, queries = mcp_tasks.whole_registry()
        rows = by_weight(f"MCP tasks over the registry ({len(catalog):,} tools)", catalog, queries)
    else:
        rows = [row for workload in workloads(args.n) for row in by_weight(*workload)]
    print(markdown(rows, COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
