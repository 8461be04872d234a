"""Rows centred on the catalog: routing quality by ``RouterConfig.row_centring``.

Each tool's row is its embedding less a share of the catalog's mean row, made unit length
again (:mod:`toolgate.routing.centring`). For each labelled set of
:func:`benches.front.labelled_sets` (up to ``--n`` sampled queries each) and the multi-turn
fixtures of :mod:`benches.history` (every turn, history blended as by default), this prints
``toolgate eval``'s complete@5, complete@10, nDCG@10 and complete@default at each share of
:data:`SHARES`, one router built per share. ``--whole-registry`` routes the MCP tasks over
every tool of the Docker registry instead (4,993 tools of 250 servers), with recall@10::

    .venv/bin/python -m benches.centring [--n 800]
    .venv/bin/python -m benches.centring --whole-registry
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from benches import mcp_tasks
from benches.front import labelled_sets
from benches.history import FIXTURES, FIXTURES_DIR
from benches.quality import sample
from benches.tables import markdown
from toolgate.catalog.catalog import Catalog
from toolgate.evaluation.evaluate import LabelledQuery, evaluate, load_queries
from toolgate.routing.router import Router, RouterConfig

SHARES = (0.0, 0.5, 0.75, 1.0)
COLUMNS = ("set", "row_centring", "complete@5", "complete@10", "ndcg@10", "complete@default")
REGISTRY_COLUMNS = ("set", "row_centring", "recall@10", "complete@10", "ndcg@10")


def workloads(n: int) -> list[tuple[str, Catalog, list[LabelledQuery]]]:
    """The labelled sets, sampled, then the multi-turn fixtures whole."""
    out = [(f"{name} ({min(n, len(q))})", c, sample(q, n)) for name, c, q in labelled_sets()]
    for fixture, title in FIXTURES.items():
        queries = load_queries(FIXTURES_DIR / fixture / "queries.jsonl")
        catalog = Catalog.load(FIXTURES_DIR / fixture / "tools.jsonl")
        out.append((f"{title} ({len(queries)} turns)", catalog, queries))
    return out


def by_share(
    label: str, catalog: Catalog, queries: list[LabelledQuery], columns: tuple[str, ...] = COLUMNS
) -> list[dict[str, Any]]:
    """``evaluate``'s figures (those of ``columns``) at each share, on a router built for
    each."""
    rows = []
    for share in SHARES:
        router = Router.from_catalog(catalog, config=replace(RouterConfig(), row_centring=share))
        figures = evaluate(router, queries, top_k=10)
        rows.append({"set": label, "row_centring": share, **{k: figures[k] for k in columns[2:]}})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=800, help="queries sampled per labelled set")
    parser.add_argument(
        "--whole-registry", action="store_true", help="the MCP tasks over the whole registry"
    )
    args = parser.parse_args(argv)
    if args.whole_registry:
        catalog, queries = mcp_tasks.whole_registry()
        label = f"MCP tasks over the registry ({len(catalog):,} tools)"
        print(markdown(by_share(label, catalog, queries, REGISTRY_COLUMNS), REGISTRY_COLUMNS))
        return 0
    rows = [row for workload in workloads(args.n) for row in by_share(*workload)]
    print(markdown(rows, COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
