"""Fit the "no tool needed" weights once, offline, across catalogs; print what they reach.

Each labelled set in ``../shared/data/eval`` is routed with the shipped config (``top_k=10``,
ranking only); every query's features (:func:`toolgate.routing.no_tool.features`, against
its own catalog's null scores) are the rows of one logistic regression: queries with empty
gold are "no tool", the others "a tool", each class weighted to count as much as the other.
The packaged null requests are rows of "no tool" too, for every catalog, so that a set with
no irrelevant queries (MetaTool) still says what chit-chat looks like against its tools.

The threshold printed is the lowest confidence at which at most ``--false-rejections`` of
every set's relevant queries are rejected (the default: 1%). Paste both into
``toolgate.routing.config`` (``NO_TOOL_WEIGHTS``, ``no_tool_threshold``).

    .venv/bin/python -m benches.no_tool_fit [--limit 3000] [--false-rejections 0.01]
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np

from toolgate.catalog.catalog import Catalog
from toolgate.routing.no_tool import features, no_tool_confidence, null_requests
from toolgate.routing.router import Router, RouterConfig

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eval"
SETS = {
    "bfcl": ("bfcl-single-turn/tools.jsonl", "bfcl-single-turn/queries.jsonl"),
    "metatool": ("metatool/tools.jsonl", "metatool/queries-single-tool.jsonl"),
}
# The decision is off while features are read: a rejected route would have no rows.
READING = RouterConfig(no_tool_threshold=None)


def set_features(name: str, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features of the set's queries, whether each has gold, and the null requests'."""
    tools, queries = SETS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        catalog = Catalog.load(DATA / tools, lenient=True, rename_duplicates=True)
    router = Router.from_catalog(catalog, config=READING)
    null = router._parts.null
    assert null is not None

    def row(text: str) -> tuple[float, ...]:
        ranked = router.route(text, top_k=10, adaptive=False).tools
        return features(null, [t.dense for t in ranked], [t.bm25 for t in ranked], text)

    items = [json.loads(line) for line in (DATA / queries).read_text().splitlines()[:limit]]
    rows = np.array([row(item["query"]) for item in items])
    gold = np.array([bool(item.get("gold")) for item in items])
    return rows, gold, np.array([row(text) for text in null_requests()])


def fit(x: np.ndarray, y: np.ndarray, weight: np.ndarray, l2: float = 1e-2) -> np.ndarray:
    """Weighted logistic regression by Newton's method: the bias, then one weight a feature."""
    xb = np.c_[np.ones(len(x)), x]
    beta = np.zeros(xb.shape[1])
    for _ in range(100):
        p = 1 / (1 + np.exp(-xb @ beta))
        grad = xb.T @ (weight * (p - y)) + l2 * np.r_[0, beta[1:]]
        hess = (xb * (weight * p * (1 - p))[:, None]).T @ xb + l2 * np.eye(len(beta))
        beta -= np.linalg.solve(hess, grad)
    return beta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=3000, help="queries read per set")
    parser.add_argument("--false-rejections", type=float, default=0.01)
    args = parser.parse_args()
    read = {name: set_features(name, args.limit if name != "bfcl" else 10**9) for name in SETS}
    xs, ys = [], []
    for rows, gold, null_rows in read.values():
        xs += [rows, null_rows]
        ys += [~gold, np.ones(len(null_rows), bool)]
    x, y = np.vstack(xs), np.concatenate(ys).astype(float)
    weight = np.where(y == 1, (y == 0).sum() / max(1.0, y.sum()), 1.0)
    beta = fit(x, y, weight)
    confidence = {
        name: (np.array([no_tool_confidence(beta, r) for r in rows]), gold)
        for name, (rows, gold, _) in read.items()
    }
    cut = max(
        float(np.quantile(c[gold], 1 - args.false_rejections)) for c, gold in confidence.values()
    )
    print(f"NO_TOOL_WEIGHTS = {tuple(round(float(b), 2) for b in beta)}")
    print(f"no_tool_threshold = {cut:.2f}")
    for name, (c, gold) in confidence.items():
        rejected = c >= round(cut, 2)
        irrelevant = f"{rejected[~gold].mean():.3f}" if (~gold).any() else "-"
        print(
            f"{name}: relevant {int(gold.sum())}, false rejected {rejected[gold].mean():.4f}; "
            f"irrelevant {int((~gold).sum())}, rejected {irrelevant}"
        )


if __name__ == "__main__":
    main()
