"""Routing quality on every labelled set in ``../shared/data/eval``.

Three rankings, each over the same sampled queries with ``top_k=10``:

* ``BM25 alone``: BM25 over each tool's fields and nothing else, as Claude Code's ToolSearch
  ranks (:class:`benches.plain.PlainBm25`);
* ``dense alone``: plain MiniLM cosine on ``name: description``, as Tool Attention ranks (B3's
  ranking, :class:`benches.plain.PlainCosine`);
* ``toolgate default``: a router with :class:`toolgate.RouterConfig` as shipped.

Figures are :func:`toolgate.evaluation.evaluate.evaluate`'s (the ``toolgate eval`` contract). On
BFCL the
threshold curve sweeps the default router's cosine floor and reports recall and complete@10 on
relevant queries against the share of irrelevant queries routed to nothing.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benches.plain import PlainBm25, PlainCosine, PlainRanking
from toolgate.catalog.catalog import Catalog
from toolgate.evaluation.evaluate import LabelledQuery, evaluate, load_queries
from toolgate.routing.result import RouteResult
from toolgate.routing.router import Router

SEED = 42
TOP_K = 10
#: The rankings of the quality tables, in their order (:func:`routers_for`).
RANKINGS = ("BM25 alone", "dense alone", "toolgate default")
THRESHOLDS = (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


@dataclass(frozen=True)
class EvalSet:
    """A labelled set: its catalog file and one queries file."""

    name: str
    tools: Path
    queries: Path


def eval_sets(root: Path) -> list[EvalSet]:
    """Every (catalog, queries file) pair under ``root`` (``../shared/data/eval``)."""
    sets = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        for queries in sorted(folder.glob("queries*.jsonl")):
            suffix = queries.stem.removeprefix("queries").strip("-")
            name = f"{folder.name} {suffix}".strip()
            sets.append(EvalSet(name, folder / "tools.jsonl", queries))
    return sets


def load_catalog(path: Path) -> tuple[Catalog, int]:
    """The catalog at ``path`` as ``toolgate eval`` loads it (repeated ids kept under a renamed
    server, malformed tools skipped), and how many tools were skipped."""
    with warnings.catch_warnings():
        # Lenient loading warns once naming every skipped tool; the count is reported instead.
        warnings.simplefilter("ignore")
        catalog = Catalog.load(path, lenient=True, rename_duplicates=True)
    if path.suffix != ".jsonl":
        return catalog, 0
    with path.open(encoding="utf-8") as handle:
        lines = sum(1 for line in handle if line.strip())
    return catalog, lines - len(catalog)


def sample(queries: Sequence[LabelledQuery], n: int, seed: int = SEED) -> list[LabelledQuery]:
    """Up to ``n`` queries drawn without replacement, in file order (reproducible)."""
    if len(queries) <= n:
        return list(queries)
    picked = sorted(random.Random(seed).sample(range(len(queries)), n))
    return [queries[i] for i in picked]


class _WithThreshold:
    """A router whose ``route`` uses a fixed cosine floor (for the threshold sweep)."""

    def __init__(self, router: Router, threshold: float) -> None:
        self._router = router
        self._threshold = threshold

    @property
    def catalog(self) -> Catalog:
        """The wrapped router's catalog (``evaluate`` reads tool names from it)."""
        return self._router.catalog

    def route(self, query: str, **options: Any) -> RouteResult:
        return self._router.route(query, threshold=self._threshold, **options)


def routers_for(
    catalog: Catalog, embedder: Any, *, cache: bool = True
) -> dict[str, Router | PlainRanking]:
    """The :data:`RANKINGS` of ``catalog``: the plain baselines and a default router, the
    embedding ones sharing ``embedder`` (and the embedding cache unless ``cache`` is off)."""
    return {
        "BM25 alone": PlainBm25(catalog),
        "dense alone": PlainCosine(catalog, embedder, cache=cache),
        "toolgate default": Router.from_catalog(catalog, embedder=embedder, cache=cache),
    }


def quality_rows(
    set_name: str,
    routers: Mapping[Any, Router | PlainRanking],
    queries: list[LabelledQuery],
    *,
    key: str = "config",
) -> list[dict[str, Any]]:
    """One row of ``toolgate eval`` figures per router, for the set ``set_name``; the router's
    name in ``routers`` (a configuration, or a setting's value) goes in the column ``key``."""
    rows = []
    for name, router in routers.items():
        figures = evaluate(router, queries, top_k=TOP_K)  # type: ignore[arg-type]
        rows.append({"set": set_name, key: name, **figures})
    return rows


def threshold_curve(
    router: Router, queries: list[LabelledQuery], thresholds: Sequence[float] = THRESHOLDS
) -> list[dict[str, Any]]:
    """Quality and irrelevant-query rejection at each cosine floor."""
    rows = []
    for threshold in thresholds:
        figures = evaluate(_WithThreshold(router, threshold), queries, top_k=TOP_K)
        rows.append({"threshold": threshold, **figures})
    return rows


def load_sample(eval_set: EvalSet, n: int) -> tuple[list[LabelledQuery], int]:
    """``n`` sampled queries of ``eval_set`` and the size of the whole file."""
    queries = load_queries(eval_set.queries)
    return sample(queries, n), len(queries)
