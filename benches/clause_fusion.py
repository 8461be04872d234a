"""Multi-intent ranking variants, replayed from each query's scores (issue 18, item 1).

    .venv/bin/python -m benches.clause_fusion

For each labelled set (MetaTool multi-tool in full, seeded samples of MetaTool single-tool
and BFCL single-turn) every query's whole-query cosine and BM25, and each clause's cosine
(its pooled vector, :mod:`toolgate.embedding.clauses`) and BM25 (its text), are read once;
then each variant ranks from them in numpy. ``default`` is the router's own dense signal
(``_toolgate.dense_signal``) fused with BM25, which replays ``route`` but for near copies.
The others add to it:

* ``clause fused max``: ``weight`` times each row's best fused score over the clauses, each
  clause fused from its own cosine and BM25 as the whole query is;
  ``6+ words`` reads only clauses of at least six words, and only when two are left;
* ``clause round robin``: the query's best 2, then each clause's best in turn.

Prints complete@5, complete@10 and nDCG@10 per set and variant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benches.quality import SEED, load_catalog, sample
from toolgate import _toolgate
from toolgate.evaluation.evaluate import load_queries
from toolgate.routing.router import Router

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "eval"
SETS = {
    "metatool multi-tool": ("metatool", "queries-multi-tool.jsonl", 1000),
    "metatool single-tool": ("metatool", "queries-single-tool.jsonl", 1500),
    "bfcl single-turn": ("bfcl-single-turn", "queries.jsonl", 800),
}


@dataclass(frozen=True)
class Scores:
    """One query's signals: the dense signal route fuses, BM25, and each clause's pair."""

    dense: np.ndarray
    bm25: np.ndarray
    clauses: list[tuple[np.ndarray, np.ndarray, str]]


def read_scores(router: Router, text: str) -> Scores:
    """The whole query's and each clause's cosine and BM25 for every row."""
    pipeline = router._pipeline  # the clause vectors are not part of the public API
    _, dense, bm25 = pipeline.scores(text)
    _, clauses = pipeline.query_vectors(text)
    texts = pipeline.query_vectors.clause_texts(text)
    index = pipeline._index
    clause_cos = [np.asarray(index.scores(np.ascontiguousarray(c))) for c in clauses]
    clause_bm25 = [np.asarray(pipeline._bm25.scores(t)) for t in texts]
    return Scores(dense, bm25, list(zip(clause_cos, clause_bm25, texts, strict=True)))


def _fuse(router: Router, dense: np.ndarray, bm25: np.ndarray) -> np.ndarray:
    config = router.config
    return _toolgate.fuse(
        dense, bm25, alpha=config.alpha, method=config.fusion, top=config.fusion_top
    )


def default(router: Router, s: Scores) -> list[int]:
    return list(np.argsort(-_fuse(router, s.dense, s.bm25), kind="stable"))


def fused_max(router: Router, s: Scores, weight: float = 0.5, words: int = 0) -> list[int]:
    fused = _fuse(router, s.dense, s.bm25)
    clauses = [_fuse(router, c, b) for c, b, text in s.clauses if len(text.split()) >= words]
    if len(clauses) >= 2:
        fused = fused + weight * np.max(clauses, axis=0)
    return list(np.argsort(-fused, kind="stable"))


def round_robin(router: Router, s: Scores, lead: int = 2) -> list[int]:
    order = default(router, s)
    lists = [list(np.argsort(-_fuse(router, c, b), kind="stable")) for c, b, _ in s.clauses]
    out = order[:lead]
    while lists and len(out) < 10:
        for ranked in lists:
            out.append(next(r for r in ranked if r not in out))
        out.append(next(r for r in order if r not in out))
    return out + [r for r in order if r not in out]


VARIANTS: dict[str, Callable[[Router, Scores], list[int]]] = {
    "default": default,
    "clause fused max (0.5)": fused_max,
    "clause fused max (1.0)": lambda router, s: fused_max(router, s, 1.0),
    "clause fused max (0.5), clauses of 6+ words": lambda router, s: fused_max(router, s, 0.5, 6),
    "clause round robin": round_robin,
}


def figures(orders: list[list[int]], golds: list[list[set[int]]]) -> tuple[float, float, float]:
    """complete@5, complete@10, nDCG@10."""
    c5 = c10 = ndcg = 0.0
    for order, gold in zip(orders, golds, strict=True):
        place = {row: i + 1 for i, row in enumerate(order[:10])}
        ranks = [min((place.get(r, 0) for r in rows if r in place), default=0) for rows in gold]
        c5 += all(0 < r <= 5 for r in ranks)
        c10 += all(0 < r <= 10 for r in ranks)
        hits = sorted({r for r in ranks if r})
        ideal = sum(1 / math.log2(i + 2) for i in range(min(len(ranks), 10)))
        ndcg += sum(1 / math.log2(r + 1) for r in hits) / ideal
    n = len(orders)
    return round(c5 / n, 4), round(c10 / n, 4), round(ndcg / n, 4)


def main() -> None:
    """Print each variant's figures on each set."""
    print("set | variant | complete@5 | complete@10 | nDCG@10")
    for name, (folder, file, n) in SETS.items():
        catalog, _ = load_catalog(DATA / folder / "tools.jsonl")
        router = Router.from_catalog(catalog)
        ids = list(router._pipeline._outline.ids)
        names = [catalog[tool_id].name for tool_id in ids]
        queries = sample([q for q in load_queries(DATA / folder / file) if q.gold], n, SEED)
        scores = [read_scores(router, q.query) for q in queries]
        labels = list(zip(ids, names, strict=True))
        golds = [[{r for r, ref in enumerate(labels) if g in ref} for g in q.gold] for q in queries]
        for variant, rank in VARIANTS.items():
            result = figures([rank(router, s) for s in scores], golds)
            print(f"{name} | {variant} | " + " | ".join(f"{x:.4f}" for x in result))


if __name__ == "__main__":
    main()
