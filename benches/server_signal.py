"""Servers as a second-level signal: routing quality by ``RouterConfig.server_weight``.

Each tool among the ranking's best ``k + SERVER_DEPTH`` gains ``server_weight`` times its
server's cosine with the query (:mod:`toolgate.routing.servers`). For each labelled set of
:func:`benches.front.labelled_sets` with more than one server (the Table 2 testbed, the MCP
tasks of :mod:`benches.mcp_tasks`, BFCL single-turn, whose categories pose as servers; up to
``--n`` sampled queries each) this prints ``toolgate eval``'s complete@5, complete@10,
nDCG@10 and complete@default at each weight of :data:`WEIGHTS`, on one router per set::

    .venv/bin/python -m benches.server_signal [--n 800]
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from benches.front import labelled_sets
from benches.quality import sample
from benches.tables import markdown
from toolgate.evaluation.evaluate import evaluate
from toolgate.routing.router import Router, RouterConfig

WEIGHTS = (0.0, 0.1, 0.2, 0.35, 0.5)
COLUMNS = ("set", "server_weight", "complete@5", "complete@10", "ndcg@10", "complete@default")


def measure(n: int) -> list[dict[str, Any]]:
    """One row per set of several servers and weight (see the module)."""
    rows = []
    for name, catalog, queries in labelled_sets():
        if len({tool.server for tool in catalog}) < 2:
            continue
        queries = sample(queries, n)
        base = Router.from_catalog(catalog)
        for weight in WEIGHTS:
            router = base.with_config(replace(RouterConfig(), server_weight=weight))
            figures = evaluate(router, queries, top_k=10)
            rows.append(
                {
                    "set": f"{name} ({len(queries)})",
                    "server_weight": weight,
                    **{key: figures[key] for key in COLUMNS[2:]},
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=800, help="queries sampled per set")
    args = parser.parse_args(argv)
    print(markdown(measure(args.n), COLUMNS))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
