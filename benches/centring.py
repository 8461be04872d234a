"""Rows centred on the catalog: routing quality by ``RouterConfig.row_centring``.

Each tool's row is its embedding less a share of the catalog's mean row, made unit length
again (:mod:`toolgate.routing.centring`). For each labelled set of
:func:`benches.front.labelled_sets` (up to ``--n`` sampled queries each) and the multi-turn
fixtures of :mod:`benches.history` (every turn, history blended as by default), this prints
``toolgate eval``'s recall@10, complete@5, complete@10, nDCG@10 and complete@default at each
share of :data:`SHARES`, each share's router centred anew from one build
(``Router.recentred``).
``--whole-registry`` routes the MCP tasks over every tool of the Docker registry instead
(4,993 tools of 250 servers)::

    .venv/bin/python -m benches.centring [--n 800]
    .venv/bin/python -m benches.centring --whole-registry
"""

from __future__ import annotations

import argparse
from typing import Any

from benches import mcp_tasks
from benches.front import labelled_sets
from benches.history import FIXTURES, FIXTURES_DIR
from benches.quality import quality_rows, sample
from benches.tables import markdown
from toolgate.catalog.catalog import Catalog
from toolgate.evaluation.evaluate import LabelledQuery, load_queries
from toolgate.routing.router import Router

SHARES = (0.0, 0.5, 0.75, 1.0)
COLUMNS = (
    "set",
    "row_centring",
    "recall@10",
    "complete@5",
    "complete@10",
    "ndcg@10",
    "complete@default",
)


def workloads(n: int) -> list[tuple[str, Catalog, list[LabelledQuery]]]:
    """The labelled sets, sampled, then the multi-turn fixtures whole."""
    out = [(f"{name} ({min(n, len(q))})", c, sample(q, n)) for name, c, q in labelled_sets()]
    for fixture, title in FIXTURES.items():
        queries = load_queries(FIXTURES_DIR / fixture / "queries.jsonl")
        catalog = Catalog.load(FIXTURES_DIR / fixture / "tools.jsonl")
        out.append((f"{title} ({len(queries)} turns)", catalog, queries))
    return out


def whole_registry() -> list[dict[str, Any]]:
    """The MCP tasks over every tool of the Docker registry, by share."""
    catalog, queries = mcp_tasks.whole_registry()
    return by_share(f"MCP tasks over the registry ({len(catalog):,} tools)", catalog, queries)


def by_share(label: str, catalog: Catalog, queries: list[LabelledQuery]) -> list[dict[str, Any]]:
    """``evaluate``'s figures at each share, each router centred anew from one build (no tool
    embedded twice)."""
    base = Router.from_catalog(catalog)
    routers = {share: base.recentred(share) for share in SHARES}
    return quality_rows(label, routers, queries, key="row_centring")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=800, help="queries sampled per labelled set")
    parser.add_argument(
        "--whole-registry", action="store_true", help="the MCP tasks over the whole registry"
    )
    args = parser.parse_args(argv)
    if args.whole_registry:
        rows = whole_registry()
    else:
        rows = [row for workload in workloads(args.n) for row in by_share(*workload)]
    print(markdown(rows, COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
