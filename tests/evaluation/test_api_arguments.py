"""evaluate() and calibrate() say which argument is wrong, as the CLI does for its options,
before any routing: a wrong one failed later with an unrelated traceback, or gave a wrong
answer without a word."""

from __future__ import annotations

import math
from typing import Any

import pytest

from toolgate import Router
from toolgate.cli.commands import demo_catalog
from toolgate.errors import InvalidInputError
from toolgate.evaluation.calibrate import calibrate
from toolgate.evaluation.evaluate import LabelledQuery, evaluate
from toolgate.evaluation.learning import evaluate_learning

QUERIES = [
    LabelledQuery("1", "open an issue about the login bug", ("create_issue",)),
    LabelledQuery("2", "what will the weather be tomorrow", ("get_forecast",)),
]


class NoRoute:
    """A router that must never be asked: the arguments are checked first."""

    catalog = demo_catalog()

    @property
    def config(self) -> Any:
        raise AssertionError("read the router before checking the arguments")

    def route(self, query: str, **options: Any) -> Any:
        raise AssertionError("routed before checking the arguments")


@pytest.fixture(scope="module")
def router() -> Router:
    return Router.from_catalog(demo_catalog())


@pytest.mark.parametrize(
    ("queries", "message"),
    [
        ("queries.jsonl", r"queries must be a list of LabelledQuery \(load_queries"),
        ([{"qid": "1", "query": "q", "gold": ["a"]}], r"queries\[0\] must be a LabelledQuery"),
        ([], "queries is empty"),
        (None, "queries must be a list of LabelledQuery"),
    ],
)
def test_query_sets_that_are_no_list_of_labelled_queries(queries: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        evaluate(NoRoute(), queries)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=message):
        calibrate(NoRoute(), queries)  # type: ignore[arg-type]


def test_a_generator_of_queries_is_read_once(router: Router) -> None:
    """calibrate looked for gold in a generator, then fitted on what was left of it."""
    report = calibrate(router, (q for q in QUERIES), selection=False, centring=False)
    assert report.queries == len(QUERIES)
    assert evaluate(router, (q for q in QUERIES))["queries"] == len(QUERIES)  # type: ignore[arg-type]


@pytest.mark.parametrize("gold", ["create_issue", ("create_issue", None)])
def test_a_labelled_query_refuses_gold_that_is_no_list_of_names(gold: Any) -> None:
    """A string was read letter by letter: every figure 0, without a word."""
    with pytest.raises(InvalidInputError, match=r"query '1': gold"):
        LabelledQuery("1", "open an issue", gold)


def test_a_labelled_query_takes_lists_as_json_gives_them() -> None:
    item = LabelledQuery("1", "open an issue", ["create_issue"], ["earlier"])  # type: ignore[arg-type]
    assert (item.gold, item.history) == (("create_issue",), ("earlier",))
    assert hash(item)


@pytest.mark.parametrize("top_k", [0, -1, 2.5, "5", True, None])
def test_top_k_must_be_a_count(top_k: object) -> None:
    with pytest.raises(InvalidInputError, match="top_k must be an integer >= 1"):
        evaluate(NoRoute(), QUERIES, top_k=top_k)  # type: ignore[arg-type]
    if top_k is not None:  # calibrate's None is the router's own top_k
        with pytest.raises(InvalidInputError, match="top_k must be an integer >= 1"):
            calibrate(NoRoute(), QUERIES, top_k=top_k)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tolerance": 1.5}, r"tolerance must be in \[0, 1\], got 1.5"),
        ({"tolerance": True}, r"tolerance must be in \[0, 1\], got True"),
        ({"false_rejections": math.nan}, r"false_rejections must be in \[0, 1\], got nan"),
        ({"false_rejections": -0.1}, r"false_rejections must be in \[0, 1\]"),
        ({"alphas": "0.5"}, r"alphas must be a list of numbers in \[0, 1\], got '0.5'"),
        ({"alphas": [0.5, 2.0]}, r"alphas entries must be numbers in \[0, 1\], got 2.0"),
        ({"thresholds": 0.3}, r"thresholds must be a list of numbers in \[-1, 1\]"),
        ({"thresholds": [0.3, math.inf]}, r"thresholds entries must be numbers in \[-1, 1\]"),
        ({"thresholds": ()}, "thresholds is empty"),
        ({"selection": "no"}, "selection must be True or False, got a str"),
        ({"centring": 1}, "centring must be True or False, got a int"),
        ({"progress": None}, "progress must be True or False, got a NoneType"),
    ],
)
def test_calibrate_names_a_wrong_option_before_any_sweep(
    options: dict[str, Any], message: str
) -> None:
    """false_rejections was checked only after the whole sweep; the others not at all."""
    with pytest.raises(InvalidInputError, match=message):
        calibrate(NoRoute(), QUERIES, **options)  # type: ignore[arg-type]


def test_evaluate_learning_checks_its_queries() -> None:
    with pytest.raises(InvalidInputError, match="queries must be a list of LabelledQuery"):
        evaluate_learning(NoRoute(), "queries.jsonl", 0.5)  # type: ignore[arg-type]


def test_evaluate_refuses_a_progress_that_is_no_flag() -> None:
    """ "no" was true: a progress bar on stderr."""
    with pytest.raises(InvalidInputError, match="progress must be True or False"):
        evaluate(NoRoute(), QUERIES, progress="no")  # type: ignore[arg-type]
