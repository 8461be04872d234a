"""Retrieval metrics for routing: recall@k, complete@k, nDCG@k, MRR, irrelevant-query rejection.

complete@k is the share of queries whose every gold tool is in the top k.

A gold entry is either a bare tool name, which any tool of that name satisfies, or a
``server/name`` id, which only that tool satisfies. Relevance is binary, and entries that
accept the same tools are one requirement (:func:`distinct_gold`). Both server and tool
names may contain ``/`` (``@scope/server``, ``nasa/apod``), so an id alone does not say where
the name starts: callers that know the routed tools' names pass them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toolgate.errors import InvalidInputError

if TYPE_CHECKING:
    from toolgate.catalog.catalog import Catalog

__all__ = ["QueryOutcome", "RoutingMetrics", "accepted_tools", "distinct_gold", "gold_hits"]


def distinct_gold(gold: Sequence[str], catalog: Catalog) -> tuple[str, ...]:
    """``gold`` without the entries that accept the same tools of ``catalog`` as an earlier one.

    An entry accepts the tool it is the id of and every tool of its name (:func:`gold_hits`):
    ``["a/x", "a/x"]``, or ``["a/x", "x"]`` where only ``a/x`` is named ``x``, ask for one
    tool, and counting it twice would lower nDCG (its ideal counts entries) and weigh recall.
    An entry that names no tool is kept, each spelling once.

    >>> from toolgate.catalog.catalog import Catalog
    >>> catalog = Catalog.from_tools({"a": {"tools": [{"name": "x"}]}})
    >>> distinct_gold(["a/x", "x", "a/x", "zz"], catalog)
    ('a/x', 'zz')
    """
    seen: set[object] = set()
    out = []
    for entry in gold:
        tools = accepted_tools(entry, catalog)
        key: object = frozenset(tools) if tools else entry
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return tuple(out)


def accepted_tools(entry: str, catalog: Catalog) -> list[str]:
    """The ids of the tools of ``catalog`` that the gold ``entry`` accepts: the tool it is
    the id of and every tool of its name (:func:`gold_hits`), in catalog order.

    >>> from toolgate.catalog.catalog import Catalog
    >>> catalog = Catalog.from_tools({"a": {"tools": [{"name": "x"}]}})
    >>> accepted_tools("x", catalog), accepted_tools("a/x", catalog), accepted_tools("y", catalog)
    (['a/x'], ['a/x'], [])
    """
    tools = [tool.id for tool in catalog.with_name(entry)]
    if entry in catalog and entry not in tools:
        tools.append(entry)
    return tools


def gold_hits(
    gold: Sequence[str],
    ranked_ids: Sequence[str],
    ranked_names: Sequence[str] | None = None,
) -> list[int]:
    """For each gold entry, the 1-based rank of the first routed tool matching it (0 if none).

    An entry matches a tool when it equals the tool's id or the tool's name. ``ranked_names``
    gives each routed tool's name, in the order of ``ranked_ids``; without it the name is taken
    as what follows the first ``/`` of the id, which is exact only when no server name has a
    ``/`` in it.

    >>> gold_hits(["nasa/apod", "search"], ["nasa/nasa/apod", "web/search"])
    [1, 2]
    """
    names = _names(ranked_ids) if ranked_names is None else list(ranked_names)
    if len(names) != len(ranked_ids):
        raise InvalidInputError(
            f"ranked_names has {len(names)} entries for {len(ranked_ids)} ranked ids"
        )
    ranks = []
    for entry in gold:
        matching = (i + 1 for i, tid in enumerate(ranked_ids) if entry in (tid, names[i]))
        ranks.append(next(matching, 0))
    return ranks


def _names(ranked_ids: Sequence[str]) -> list[str]:
    """Names guessed from ids: after the first ``/``; an id without one is its own name."""
    return [tool_id.partition("/")[2] or tool_id for tool_id in ranked_ids]


@dataclass(frozen=True)
class QueryOutcome:
    """One query's gold set, what was ranked (best first) and how long routing took.

    ``ranked_names`` are the ranked tools' names (see :func:`gold_hits`), when known.
    ``shown_ids`` (and ``shown_names``) are what the router's default selection shows, when
    measured: the ranking is judged on ``ranked_ids``, the request on ``shown_ids``.
    A query whose route said no tool is needed, or routed nothing, counts as rejected.
    """

    gold: tuple[str, ...]
    ranked_ids: tuple[str, ...]
    route_ms: float
    ranked_names: tuple[str, ...] | None = None
    shown_ids: tuple[str, ...] | None = None
    shown_names: tuple[str, ...] | None = None
    #: Whether the route said the query needs no tool (``RouteResult.no_tool``).
    no_tool: bool = False


def _recall(ranks: list[int], k: int) -> float:
    return sum(1 for r in ranks if 0 < r <= k) / len(ranks)


def _complete(ranks: list[int], k: int) -> float:
    """1 when every gold entry is in the top ``k``, else 0."""
    return 1.0 if all(0 < r <= k for r in ranks) else 0.0


def ndcg(ranks: list[int], k: int) -> float:
    """nDCG at ``k`` of one query whose gold entries sit at ``ranks`` (:func:`gold_hits`)."""
    # Binary gains at distinct ranks; several gold entries can match one tool only once.
    hit_ranks = sorted({r for r in ranks if 0 < r <= k})
    dcg = sum(1.0 / math.log2(r + 1) for r in hit_ranks)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(ranks), k)))
    return dcg / ideal


def _mrr(ranks: list[int]) -> float:
    found = [r for r in ranks if r > 0]
    return 1.0 / min(found) if found else 0.0


@dataclass
class RoutingMetrics:
    """Accumulates :class:`QueryOutcome` s and reports the ``toolgate eval`` figures."""

    outcomes: list[QueryOutcome] = field(default_factory=list)

    def add(self, outcome: QueryOutcome) -> None:
        """Record one routed query."""
        self.outcomes.append(outcome)

    def summary(self) -> dict[str, float | int | None]:
        """The figures of the ``toolgate eval --json`` contract; a figure no outcome defines
        (the ranking figures without a query with gold, ``irrelevant_rejected`` without one
        without) is ``None``, JSON's null, not a 0 that reads as measured."""
        relevant = [o for o in self.outcomes if o.gold]
        irrelevant = [o for o in self.outcomes if not o.gold]
        ranks = [gold_hits(o.gold, o.ranked_ids, o.ranked_names) for o in relevant]
        n = len(relevant)

        def mean(values: list[float]) -> float | None:
            return round(sum(values) / n, 4) if n else None

        times = sorted(o.route_ms for o in self.outcomes)
        shown = [o for o in relevant if o.shown_ids is not None]
        default: dict[str, float | int | None] = {}
        if shown:
            default["complete@default"] = round(
                sum(all(gold_hits(o.gold, o.shown_ids or (), o.shown_names)) for o in shown)
                / len(shown),
                4,
            )
            default["tools@default"] = round(
                sum(len(o.shown_ids or ()) for o in shown) / len(shown), 2
            )
        return {
            "queries": n,
            "recall@5": mean([_recall(r, 5) for r in ranks]),
            "recall@10": mean([_recall(r, 10) for r in ranks]),
            "complete@5": mean([_complete(r, 5) for r in ranks]),
            "complete@10": mean([_complete(r, 10) for r in ranks]),
            "ndcg@10": mean([ndcg(r, 10) for r in ranks]),
            "mrr": mean([_mrr(r) for r in ranks]),
            "route_ms_p50": _percentile(times, 50),
            "route_ms_p95": _percentile(times, 95),
            "irrelevant": len(irrelevant),
            "irrelevant_rejected": (
                round(sum(1 for o in irrelevant if _rejected(o)) / len(irrelevant), 4)
                if irrelevant
                else None
            ),
            # Relevant queries routed to nothing: each is a request left without its tool.
            "false_rejected": mean([1.0 if _rejected(o) else 0.0 for o in relevant]),
            **default,
        }


def _rejected(outcome: QueryOutcome) -> bool:
    return outcome.no_tool or not outcome.ranked_ids


def _percentile(sorted_values: list[float], pct: float) -> float | None:
    """The ``pct`` percentile in ms, rounded (``None`` of no value)."""
    if not sorted_values:
        return None
    position = (len(sorted_values) - 1) * pct / 100
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    value = sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)
    return round(value, 3)
