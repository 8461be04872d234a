"""Routing metrics against values worked out by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from toolgate.catalog.catalog import Catalog
from toolgate.errors import InvalidInputError
from toolgate.evaluation.evaluate import LabelledQuery, evaluate
from toolgate.evaluation.metrics import QueryOutcome, RoutingMetrics, distinct_gold, gold_hits


def test_gold_entries_match_by_name_or_by_id() -> None:
    ranked = ["a/search", "b/search", "b/fetch"]
    assert gold_hits(["search"], ranked) == [1]
    assert gold_hits(["b/search"], ranked) == [2]
    assert gold_hits(["fetch", "missing"], ranked) == [3, 0]


def test_summary_on_a_worked_example() -> None:
    metrics = RoutingMetrics()
    # q1: gold at rank 2; q2: two gold, ranks 1 and 7; q3: gold never routed; q4: irrelevant.
    metrics.add(QueryOutcome(("x",), ("s/a", "s/x"), 1.0))
    metrics.add(QueryOutcome(("p", "q"), ("s/p", "s/1", "s/2", "s/3", "s/4", "s/5", "s/q"), 2.0))
    metrics.add(QueryOutcome(("z",), ("s/a",), 3.0))
    metrics.add(QueryOutcome((), (), 4.0))
    report = metrics.summary()
    assert report["queries"] == 3
    assert report["recall@5"] == pytest.approx((1 + 0.5 + 0) / 3, abs=1e-4)
    assert report["recall@10"] == pytest.approx((1 + 1 + 0) / 3, abs=1e-4)
    assert report["complete@5"] == pytest.approx(1 / 3, abs=1e-4)  # q2's second gold is 7th
    assert report["complete@10"] == pytest.approx(2 / 3, abs=1e-4)
    ndcg_q1 = (1 / math.log2(3)) / 1
    ndcg_q2 = (1 + 1 / math.log2(8)) / (1 + 1 / math.log2(3))
    assert report["ndcg@10"] == pytest.approx((ndcg_q1 + ndcg_q2) / 3, abs=1e-4)
    assert report["mrr"] == pytest.approx((0.5 + 1 + 0) / 3, abs=1e-4)
    assert report["irrelevant"] == 1
    assert report["irrelevant_rejected"] == 1.0
    assert report["route_ms_p50"] == pytest.approx(2.5)


def test_gold_names_may_contain_a_slash() -> None:
    # Without names, a name is what follows the first '/' of the id (``nasa`` + ``nasa/apod``).
    assert gold_hits(["nasa/apod"], ["x/apod", "nasa/nasa/apod"]) == [2]
    assert gold_hits(["apod"], ["nasa/nasa/apod"]) == [0]
    assert gold_hits(["nasa/nasa/apod", "nasa/apod"], ["nasa/nasa/apod"]) == [1, 1]


def test_given_names_decide_where_a_scoped_server_ends() -> None:
    ranked = ["@acme/xero/get_report", "nasa/nasa/apod"]
    names = ["get_report", "nasa/apod"]
    assert gold_hits(["get_report", "nasa/apod"], ranked, names) == [1, 2]
    assert gold_hits(["xero/get_report"], ranked, names) == [0]
    assert gold_hits(["@acme/xero/get_report"], ranked, names) == [1]
    outcome = QueryOutcome(("get_report",), tuple(ranked), 1.0, tuple(names))
    metrics = RoutingMetrics([outcome])
    assert metrics.summary()["mrr"] == 1.0


def test_names_must_line_up_with_ids() -> None:
    with pytest.raises(InvalidInputError, match="ranked_names has 1 entries for 2 ranked ids"):
        gold_hits(["a"], ["s/a", "s/b"], ["a"])


def test_queries_said_to_need_no_tool_count_as_rejected() -> None:
    metrics = RoutingMetrics()
    metrics.add(QueryOutcome(("x",), ("s/x",), 1.0))
    metrics.add(QueryOutcome(("y",), (), 1.0, no_tool=True))  # a relevant query rejected
    metrics.add(QueryOutcome(("z",), ("s/z",), 1.0, no_tool=True))  # kept its tools
    metrics.add(QueryOutcome((), ("s/a",), 1.0))  # irrelevant, routed
    metrics.add(QueryOutcome((), ("s/a",), 1.0, no_tool=True))  # irrelevant, said so
    report = metrics.summary()
    assert report["false_rejected"] == pytest.approx(2 / 3, abs=1e-4)
    assert report["irrelevant_rejected"] == 0.5
    assert report["recall@10"] == pytest.approx(2 / 3, abs=1e-4)


RANKING_FIGURES = (
    "recall@5", "recall@10", "complete@5", "complete@10", "ndcg@10", "mrr", "false_rejected",
)  # fmt: skip


def test_ranking_figures_without_a_relevant_query_are_null() -> None:
    """No query with gold: nothing measured the ranking, and 0.0 would read as a miss."""
    report = RoutingMetrics([QueryOutcome((), ("s/a",), 1.0)]).summary()
    assert {key: report[key] for key in RANKING_FIGURES} == dict.fromkeys(RANKING_FIGURES)


def test_rejection_without_an_irrelevant_query_is_null() -> None:
    report = RoutingMetrics([QueryOutcome(("a",), ("s/a",), 1.0)]).summary()
    assert report["irrelevant_rejected"] is None


#: Two tools named ``x`` (``a/x`` and ``b/x``) and one named ``y``.
TWO_XS = Catalog.from_tools({"a": {"tools": [{"name": "x"}, {"name": "y"}]},
                             "b": {"tools": [{"name": "x"}]}})  # fmt: skip


@pytest.mark.parametrize(
    ("gold", "distinct"),
    [
        (("a/x", "a/x"), ("a/x",)),  # the same id twice
        (("a/y", "y"), ("a/y",)),  # an id and the name of that tool only
        (("a/x", "x"), ("a/x", "x")),  # "x" accepts b/x too: another requirement
        (("zz", "zz", "a/y"), ("zz", "a/y")),  # an unknown entry, kept once
    ],
)
def test_gold_entries_accepting_the_same_tools_count_once(
    gold: tuple[str, ...], distinct: tuple[str, ...]
) -> None:
    assert distinct_gold(gold, TWO_XS) == distinct


@dataclass
class FixedRoute:
    ids: tuple[str, ...]
    no_tool: bool = False


class FixedRouter:
    """Routes every query to the same tools."""

    def __init__(self, catalog: Catalog, ids: tuple[str, ...]) -> None:
        self.catalog = catalog
        self._ids = ids

    def route(self, query: str, **options: Any) -> FixedRoute:
        return FixedRoute(self._ids)


def test_a_repeated_gold_tool_ranked_first_scores_a_perfect_ndcg() -> None:
    """The ideal ranking puts the one tool first: nDCG 1, not (1) / (1 + 1/log2 3)."""
    router = FixedRouter(TWO_XS, ("a/y", "b/x"))
    queries = [LabelledQuery("1", "q", ("a/y", "a/y")), LabelledQuery("2", "q", ("a/y", "y"))]
    report = evaluate(router, queries)  # type: ignore[arg-type]
    assert report["ndcg@10"] == 1.0
