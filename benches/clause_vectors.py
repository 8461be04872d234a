"""Clause vectors pooled or embedded on their own, with and without clause slots.

A multi-intent request ("fetch the changelog and post a summary to #eng") is cut into clauses
(:mod:`toolgate.embedding.clauses`), each with a vector of its own. By default that vector is
the mean of the clause's token states in the whole query's model run (``pooled``); with
``clause_vectors="embedded"`` the clause is also embedded on its own, one more model run per
multi-clause query. ``clause_slots`` places each clause's best tool right after the query's
best two in the ranking itself, not only in adaptive selection.

For each labelled set of :func:`benches.front.labelled_sets` (the Table 2 testbed, the
hand-written MCP tasks of :mod:`benches.mcp_tasks`, and the sets of ``../shared/data/eval``,
up to ``--n`` sampled queries each) this prints ``toolgate eval``'s complete@5, complete@10,
nDCG@10 and complete@default under each configuration, and the route time of each
configuration relative to the default's, measured over the same queries in the same run.
``--speed`` times ``Router.route`` at N = 10,000 instead (the catalog and queries of
:mod:`benches.route_speed`), pooled against embedded, each with an embedder of its own and
the two interleaved query by query::

    .venv/bin/python -m benches.clause_vectors [--n 800]
    .venv/bin/python -m benches.clause_vectors --speed
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from benches.bench_route import TopUpEmbedder, query_pool, real_tools, scale_catalog
from benches.front import labelled_sets
from benches.quality import sample
from benches.route_speed import FRESH, N, interleaved_ms, percentiles
from benches.tables import markdown
from toolgate.catalog.catalog import Catalog
from toolgate.embedding.embedder import Embedder
from toolgate.evaluation.evaluate import LabelledQuery, evaluate
from toolgate.routing.router import Router, RouterConfig

DEFAULT = RouterConfig()
CONFIGS = {
    "pooled (default)": DEFAULT,
    "pooled, slots": replace(DEFAULT, clause_slots=1),
    "embedded": replace(DEFAULT, clause_vectors="embedded"),
    "embedded, slots": replace(DEFAULT, clause_vectors="embedded", clause_slots=1),
}
COLUMNS = ("set", "config", "complete@5", "complete@10", "ndcg@10", "complete@default", "time")


def workloads(n: int) -> list[tuple[str, Catalog, list[LabelledQuery]]]:
    """Every labelled set, each cut to ``n`` sampled queries."""
    return [(name, catalog, sample(queries, n)) for name, catalog, queries in labelled_sets()]


def route_seconds(router: Router, queries: Sequence[LabelledQuery]) -> float:
    """Seconds to route every query once with the router's default selection, memo cleared
    first: every route embeds, as a fresh request does."""
    router._pipeline.query_vectors._embed_text.cache_clear()
    start = time.perf_counter()
    for item in queries:
        router.route(item.query)
    return time.perf_counter() - start


def measure(n: int) -> list[dict[str, Any]]:
    """One row per set and configuration (see the module)."""
    rows = []
    for name, catalog, queries in workloads(n):
        base = Router.from_catalog(catalog)
        views = {label: base.with_config(config) for label, config in CONFIGS.items()}
        reference = route_seconds(views["pooled (default)"], queries)
        for label, router in views.items():
            figures = evaluate(router, queries, top_k=10)
            seconds = route_seconds(router, queries)
            rows.append(
                {
                    "set": f"{name} ({len(queries)})",
                    "config": label,
                    **{key: figures[key] for key in COLUMNS[2:6]},
                    "time": f"{seconds / reference:.2f}x",
                }
            )
    return rows


def speed() -> str:
    """p50 and p90 milliseconds of a fresh route at N = 10,000, pooled and embedded."""
    real, queries = real_tools(), query_pool()
    catalog = scale_catalog(N, real)
    with tempfile.TemporaryDirectory(prefix="toolgate-clause-vectors-") as workdir:
        Router.from_catalog(catalog, embedder=TopUpEmbedder(), cache=False, path=workdir)  # type: ignore[arg-type]
        routers = {
            label: Router.open(
                workdir, embedder=Embedder(precision="int8", progress=False)
            ).with_config(CONFIGS[label])
            for label in ("pooled (default)", "embedded")
        }
        # A query's vectors are memoised: each is routed once, every route embeds it.
        return percentiles(interleaved_ms(routers, queries[:FRESH]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=800, help="queries sampled per set")
    parser.add_argument("--speed", action="store_true", help="route time at N = 10,000")
    args = parser.parse_args(argv)
    print(speed() if args.speed else markdown(measure(args.n), COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
