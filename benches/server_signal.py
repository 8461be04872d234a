"""Servers as a second-level signal: routing quality by ``RouterConfig.server_weight``.

Each tool among the ranking's best ``k + SERVER_DEPTH`` gains ``server_weight`` times its
server's cosine with the query (:mod:`toolgate.routing.servers`). For each labelled set of
:func:`benches.front.labelled_sets` with more than one server (the Table 2 testbed, the MCP
tasks of :mod:`benches.mcp_tasks`, BFCL single-turn, whose categories pose as servers; up to
``--n`` sampled queries each) this prints ``toolgate eval``'s complete@5, complete@10,
nDCG@10 and complete@default at each weight of :data:`WEIGHTS`, on one router per set.
``--whole-registry`` routes the MCP tasks over every tool of the Docker registry instead
(4,993 tools of 250 servers: the set's servers among many others)::

    .venv/bin/python -m benches.server_signal [--n 800]
    .venv/bin/python -m benches.server_signal --whole-registry
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from benches import mcp_tasks
from benches.front import labelled_sets
from benches.quality import quality_rows, sample
from benches.tables import markdown
from toolgate.catalog.catalog import Catalog
from toolgate.evaluation.evaluate import LabelledQuery
from toolgate.routing.router import Router

WEIGHTS = (0.0, 0.1, 0.2, 0.35, 0.5)
COLUMNS = ("set", "server_weight", "complete@5", "complete@10", "ndcg@10", "complete@default")


def measure(n: int) -> list[dict[str, Any]]:
    """One row per set of several servers and weight (see the module)."""
    rows = []
    for name, catalog, queries in labelled_sets():
        if len({tool.server for tool in catalog}) > 1:
            rows += by_weight(f"{name} ({min(n, len(queries))})", catalog, sample(queries, n))
    return rows


def whole_registry() -> list[dict[str, Any]]:
    """The MCP tasks over every tool of the Docker registry, by weight."""
    catalog, queries = mcp_tasks.whole_registry()
    return by_weight(f"MCP tasks over the registry ({len(catalog):,} tools)", catalog, queries)


def by_weight(label: str, catalog: Catalog, queries: list[LabelledQuery]) -> list[dict[str, Any]]:
    """``evaluate``'s figures at each weight, on one index."""
    base = Router.from_catalog(catalog)
    routers = {w: base.with_config(replace(base.config, server_weight=w)) for w in WEIGHTS}
    return quality_rows(label, routers, queries, key="server_weight")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=800, help="queries sampled per set")
    parser.add_argument(
        "--whole-registry", action="store_true", help="the MCP tasks over the whole registry"
    )
    args = parser.parse_args(argv)
    print(markdown(whole_registry() if args.whole_registry else measure(args.n), COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
