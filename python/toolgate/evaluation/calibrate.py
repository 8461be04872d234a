"""Fit the router's threshold and fusion weight on labelled queries, maximising F1.

As the Tool Attention paper describes: sweep the ISO (cosine) threshold over [0.10, 0.50] in
steps of 0.02 and keep the value that maximises F1 of the routed set against the gold tools;
here the fusion weight ``alpha`` is swept alongside it. F1 is micro-averaged over (query, tool)
pairs: a routed tool matching no gold entry is a false positive, a gold entry matched by no
routed tool a false negative, so queries with empty gold reward routing nothing. Those only
ever add false positives, so a set needs at least one query with gold tools to be fitted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from toolgate import _toolgate
from toolgate.errors import InvalidInputError
from toolgate.evaluation.evaluate import LabelledQuery, progress_bar
from toolgate.evaluation.metrics import gold_hits
from toolgate.routing.router import Router, RouterConfig

__all__ = ["CalibrationPoint", "CalibrationReport", "calibrate", "check_fittable"]

THRESHOLDS = tuple(round(0.10 + 0.02 * i, 2) for i in range(21))
ALPHAS = tuple(round(0.1 * i, 1) for i in range(11))


@dataclass(frozen=True)
class CalibrationPoint:
    """Precision, recall and F1 of routing at one (alpha, threshold)."""

    alpha: float
    threshold: float
    precision: float
    recall: float
    f1: float


@dataclass(frozen=True)
class CalibrationReport:
    """The best point, the whole curve, and the config that applies the best point."""

    best: CalibrationPoint
    curve: tuple[CalibrationPoint, ...]
    queries: int
    top_k: int
    config: RouterConfig

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: best point, fitted values and the curve."""
        return {
            "queries": self.queries,
            "top_k": self.top_k,
            "best": asdict(self.best),
            "config": {"alpha": self.config.alpha, "threshold": self.config.threshold},
            "curve": [asdict(point) for point in self.curve],
        }


@dataclass
class _Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    def point(self, alpha: float, threshold: float) -> CalibrationPoint:
        precision = self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0
        recall = self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0
        f1 = 2 * self.tp / (2 * self.tp + self.fp + self.fn) if self.tp + self.fp + self.fn else 1.0
        return CalibrationPoint(
            alpha, threshold, round(precision, 4), round(recall, 4), round(f1, 4)
        )


def calibrate(
    router: Router,
    queries: Sequence[LabelledQuery],
    *,
    alphas: Sequence[float] = ALPHAS,
    thresholds: Sequence[float] = THRESHOLDS,
    top_k: int | None = None,
    progress: bool = False,
) -> CalibrationReport:
    """Sweep ``alphas`` x ``thresholds`` over ``queries`` and return the F1-best point.

    Each query is embedded once; every point reuses its dense and BM25 scores.
    """
    check_fittable(queries)
    k = top_k or router.config.top_k
    counts = {(a, t): _Counts() for a in alphas for t in thresholds}
    ids = router.catalog.ids
    names = [tool.name for tool in router.catalog.tools]
    for item in progress_bar(queries, progress, "calibrating"):
        cosine, dense, sparse = router._scores(item.query)
        for alpha in alphas:
            fused = _toolgate.fuse(
                dense,
                sparse,
                alpha=alpha,
                method=router.config.fusion,
                top=router.config.fusion_top,
            )
            order = np.lexsort((np.arange(len(fused)), -fused))[:k]
            for threshold in thresholds:
                rows = [row for row in order if cosine[row] >= threshold]
                routed = [ids[row] for row in rows]
                _count(counts[(alpha, threshold)], item.gold, routed, [names[r] for r in rows])
    curve = tuple(counts[key].point(*key) for key in counts)
    best = max(curve, key=lambda p: (p.f1, p.recall, -p.threshold))
    config = replace(router.config, alpha=best.alpha, threshold=best.threshold)
    return CalibrationReport(best, curve, len(queries), k, config)


def check_fittable(queries: Sequence[LabelledQuery], source: str = "the query set") -> None:
    """Raise :class:`InvalidInputError` unless some query in ``queries`` has gold tools.

    Without one, F1 has no true positive to find: every point that routes nothing ties at 1.0,
    so the fitted threshold would be arbitrary. ``source`` names the set in the message.
    """
    if not queries:
        raise InvalidInputError(f"no queries in {source}")
    if not any(item.gold for item in queries):
        raise InvalidInputError(
            f"no query in {source} has gold tools; calibrate needs at least one (queries with"
            " empty gold only add false positives)"
        )


def _count(counts: _Counts, gold: Sequence[str], routed: list[str], names: list[str]) -> None:
    ranks = gold_hits(gold, routed, names)
    found = sum(1 for rank in ranks if rank > 0)
    counts.tp += found
    counts.fn += len(ranks) - found
    matched_positions = {rank for rank in ranks if rank > 0}
    counts.fp += len(routed) - len(matched_positions)
