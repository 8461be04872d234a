"""What ``toolgate calibrate`` reports: the points of each curve it measures and the
:class:`CalibrationReport` that holds them with the fitted config."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from toolgate.routing.router import RouterConfig

__all__ = [
    "AlphaPoint",
    "CalibrationPoint",
    "CalibrationReport",
    "CentringPoint",
    "NamePoint",
    "NoToolPoint",
    "SelectionPoint",
    "ServerPoint",
]


@dataclass(frozen=True)
class CalibrationPoint:
    """Precision, recall and F1 of routing at one (alpha, threshold)."""

    alpha: float
    threshold: float
    precision: float
    recall: float
    f1: float


@dataclass(frozen=True)
class AlphaPoint:
    """How one ``alpha`` orders the labelled queries' tools (fused scores, before a floor or
    any other step): nDCG and the share complete at ``top_k``."""

    alpha: float
    ndcg: float
    complete: float


@dataclass(frozen=True)
class SelectionPoint:
    """What one (min_tools, keep_ratio) shows on the labelled queries: the share complete,
    and the mean tools and compact schema tokens (OpenAI) per query."""

    min_tools: int
    keep_ratio: float
    complete: float
    tools: float
    schema_tokens: float


@dataclass(frozen=True)
class ServerPoint:
    """How one ``server_weight`` ranks the labelled queries: nDCG and the share complete at
    ``top_k``."""

    server_weight: float
    ndcg: float
    complete: float


@dataclass(frozen=True)
class NamePoint:
    """How one ``name_weight`` ranks the labelled queries: nDCG and the share complete at
    ``top_k``."""

    name_weight: float
    ndcg: float
    complete: float


@dataclass(frozen=True)
class CentringPoint:
    """How one ``row_centring`` ranks the labelled queries: nDCG and the share complete at
    ``top_k``."""

    row_centring: float
    ndcg: float
    complete: float


@dataclass(frozen=True)
class NoToolPoint:
    """The fitted "no tool needed" threshold: the share of queries with gold it rejects
    (at most the rate asked for) and of those without gold."""

    threshold: float
    false_rejections: float
    false_rejected: float
    irrelevant_rejected: float | None


@dataclass(frozen=True)
class CalibrationReport:
    """The best point, the whole curve, and the config that applies the best point; and the
    fitted selection with its curve, against the completeness of the plain top ``top_k``
    and the completeness it had to keep (``selection_target``: that less the tolerance)."""

    best: CalibrationPoint
    curve: tuple[CalibrationPoint, ...]
    queries: int
    top_k: int
    config: RouterConfig
    selection: SelectionPoint | None = None
    selection_curve: tuple[SelectionPoint, ...] = field(default=())
    top_k_complete: float | None = None
    selection_target: float | None = None
    no_tool: NoToolPoint | None = None
    server_curve: tuple[ServerPoint, ...] = field(default=())
    centring_curve: tuple[CentringPoint, ...] = field(default=())
    name_curve: tuple[NamePoint, ...] = field(default=())
    alpha_curve: tuple[AlphaPoint, ...] = field(default=())
    #: What was left at the router's own value, and why (too few labels to fit it).
    notes: tuple[str, ...] = field(default=())

    @property
    def selection_goal_met(self) -> bool | None:
        """Whether the fitted selection keeps ``selection_target`` (None: none was fitted).
        False means no point did, and the most complete one was taken."""
        if self.selection is None or self.selection_target is None:
            return None
        return self.selection.complete >= self.selection_target

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: best point, fitted values and the curves."""
        config = {
            "alpha": self.config.alpha,
            "threshold": self.config.threshold,
            "min_tools": self.config.min_tools,
            "keep_ratio": self.config.keep_ratio,
            "no_tool_threshold": self.config.no_tool_threshold,
            "server_weight": self.config.server_weight,
            "row_centring": self.config.row_centring,
            "name_weight": self.config.name_weight,
        }
        return {
            "queries": self.queries,
            "top_k": self.top_k,
            "best": asdict(self.best),
            "config": config,
            "curve": [asdict(point) for point in self.curve],
            "selection": asdict(self.selection) if self.selection else None,
            "top_k_complete": self.top_k_complete,
            "selection_target_complete": self.selection_target,
            "selection_goal_met": self.selection_goal_met,
            "selection_curve": [asdict(point) for point in self.selection_curve],
            "no_tool": asdict(self.no_tool) if self.no_tool else None,
            "server_curve": [asdict(point) for point in self.server_curve],
            "centring_curve": [asdict(point) for point in self.centring_curve],
            "name_curve": [asdict(point) for point in self.name_curve],
            "alpha_curve": [asdict(point) for point in self.alpha_curve],
            "notes": list(self.notes),
        }
