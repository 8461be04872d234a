"""Routing quality on every labelled set in ``../shared/data/eval``.

Three configurations, each over the same sampled queries with ``top_k=10``:

* ``BM25 alone`` (``alpha=0``, no threshold, near copies left in place), as Claude Code's
  ToolSearch ranks;
* ``dense alone`` (``alpha=1``, rows as embedded, the same): MiniLM cosine, as Tool Attention
  ranks;
* ``toolgate default``: :class:`toolgate.RouterConfig` as shipped.

Figures are :func:`toolgate.evaluation.evaluate.evaluate`'s (the ``toolgate eval`` contract). On
BFCL the
threshold curve sweeps the default router's cosine floor and reports recall and complete@10 on
relevant queries against the share of irrelevant queries routed to nothing.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from toolgate.catalog.catalog import Catalog
from toolgate.evaluation.evaluate import LabelledQuery, evaluate, load_queries
from toolgate.routing.result import RouteResult
from toolgate.routing.router import Router, RouterConfig

SEED = 42
TOP_K = 10
#: The signals alone are the ranking by one signal and nothing else of toolgate's.
_ALONE = RouterConfig(
    threshold=None, near_copy_cosine=None, name_weight=0.0, adaptive=False, no_tool_threshold=None
)
CONFIGS = {
    "BM25 alone": replace(_ALONE, alpha=0.0),
    "dense alone": replace(_ALONE, alpha=1.0, row_centring=0.0),
    "toolgate default": RouterConfig(),
}
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


def routers_for(catalog: Catalog, embedder: Any) -> dict[str, Router]:
    """One router per configuration in :data:`CONFIGS`, sharing ``embedder``."""
    return {
        name: Router.from_catalog(catalog, config=config, embedder=embedder)
        for name, config in CONFIGS.items()
    }


def quality_rows(
    set_name: str,
    routers: Mapping[Any, Router],
    queries: list[LabelledQuery],
    *,
    key: str = "config",
) -> list[dict[str, Any]]:
    """One row of ``toolgate eval`` figures per router, for the set ``set_name``; the router's
    name in ``routers`` (a configuration, or a setting's value) goes in the column ``key``."""
    rows = []
    for name, router in routers.items():
        figures = evaluate(router, queries, top_k=TOP_K)
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
