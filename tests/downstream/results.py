"""The result types docs/api.md names, imported from ``toolgate`` ("Everything public is
importable from toolgate") to annotate a user's own functions."""

from __future__ import annotations

from toolgate import (
    BudgetDecision,
    DuplicateGroup,
    FilteredRequest,
    GatedOut,
    Promotion,
    RoutedTool,
    Router,
    RouteResult,
)


def best(result: RouteResult) -> RoutedTool | None:
    return result.tools[0] if result.tools else None


def kept_out(result: RouteResult) -> list[GatedOut]:
    return list(result.gated_out)


def decision(promotion: Promotion) -> BudgetDecision:
    return promotion.decision


def copies(router: Router) -> list[DuplicateGroup]:
    return list(router.near_duplicates())


def sent(filtered: FilteredRequest) -> int:
    return len(filtered.kept)
