"""Rows centred on the catalog: routing quality by ``RouterConfig.row_centring``.

Each tool's row is its embedding less a share of the catalog's mean row, made unit length
again (:mod:`toolgate.routing.centring`). For each labelled set of
:func:`benches.front.labelled_sets` (up to ``--n`` sampled queries each) and the multi-turn
fixtures of :mod:`benches.history` (every turn, history blended as by default), this prints
``toolgate eval``'s complete@5, complete@10, nDCG@10 and complete@default at each share of
:data:`SHARES`, one router built per share::

    .venv/bin/python -m benches.centring [--n 800]
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from benches.front import labelled_sets
from benches.history import FIXTURES, FIXTURES_DIR
from benches.quality import sample
from benches.tables import markdown
from toolgate.catalog.catalog import Catalog
from toolgate.evaluation.evaluate import LabelledQuery, evaluate, load_queries
from toolgate.routing.router import Router, RouterConfig

SHARES = (0.0, 0.5, 0.75, 1.0)
COLUMNS = ("set", "row_centring", "complete@5", "complete@10", "ndcg@10", "complete@default")


def workloads(n: int) -> list[tuple[str, Catalog, list[LabelledQuery]]]:
    """The labelled sets, sampled, then the multi-turn fixtures whole."""
    out = [(f"{name} ({min(n, len(q))})", c, sample(q, n)) for name, c, q in labelled_sets()]
    for fixture, title in FIXTURES.items():
        queries = load_queries(FIXTURES_DIR / fixture / "queries.jsonl")
        catalog = Catalog.load(FIXTURES_DIR / fixture / "tools.jsonl")
        out.append((f"{title} ({len(queries)} turns)", catalog, queries))
    return out


def by_share(label: str, catalog: Catalog, queries: list[LabelledQuery]) -> list[dict[str, Any]]:
    """``evaluate``'s figures at each share, on a router built for each."""
    rows = []
    for share in SHARES:
        router = Router.from_catalog(catalog, config=replace(RouterConfig(), row_centring=share))
        figures = evaluate(router, queries, top_k=10)
        rows.append({"set": label, "row_centring": share, **{k: figures[k] for k in COLUMNS[2:]}})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=800, help="queries sampled per labelled set")
    args = parser.parse_args(argv)
    rows = [row for workload in workloads(args.n) for row in by_share(*workload)]
    print(markdown(rows, COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
