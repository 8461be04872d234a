"""What calibrate() fits: values that do not depend on what was fitted before."""

from __future__ import annotations

from dataclasses import replace

import pytest

from toolgate import Router
from toolgate.errors import InvalidInputError
from toolgate.evaluation.calibrate import calibrate, fit_no_tool
from toolgate.evaluation.evaluate import LabelledQuery

TOOLS = {
    "wx": {"tools": [
        {"name": "get_forecast", "description": "Weather forecast for a city."},
        {"name": "get_air_quality", "description": "Air quality index for a city."},
    ]},
    "mail": {"tools": [
        {"name": "send_email", "description": "Send an email to someone."},
        {"name": "search_mail", "description": "Search the mailbox for messages."},
    ]},
    "cal": {"tools": [
        {"name": "create_event", "description": "Add an event to a calendar."},
        {"name": "find_free_slots", "description": "Find free time in calendars."},
    ]},
}  # fmt: skip
QUERIES = [
    LabelledQuery("1", "will it rain in Oslo tomorrow", ("get_forecast",)),
    LabelledQuery("2", "is the air clean enough to run outside", ("get_air_quality",)),
    LabelledQuery("3", "email the report to Ann", ("send_email",)),
    LabelledQuery("4", "did Bob write to me about the invoice", ("search_mail",)),
    LabelledQuery("5", "find a free hour for Ann and book it", ("find_free_slots", "create_event")),
    LabelledQuery("6", "put the dentist on my calendar", ("create_event",)),
    LabelledQuery("7", "tell me a joke about cats", ()),
]


@pytest.fixture(scope="module")
def router() -> Router:
    return Router.from_tools(TOOLS)


def test_calibrating_again_does_not_depend_on_the_no_tool_threshold_fitted(
    router: Router,
) -> None:
    """The ranking settings and the selection were fitted under the router's own "no tool
    needed" threshold: calibrating again a router saved by ``calibrate
    --false-rejections`` fitted them with the requests it now rejects showing no tool at any
    setting (60 MetaTool queries at 0.39: the plain top k's completeness read 0.78 instead of
    0.87, and another selection was fitted)."""
    # Six queries with gold fit a selection when one may cost completeness 0.2.
    fresh = calibrate(router, QUERIES, tolerance=0.2)
    fitted_before = replace(router.config, no_tool_threshold=0.0)
    again = calibrate(router.with_config(fitted_before), QUERIES, tolerance=0.2)
    assert fresh.top_k_complete is not None
    assert fresh.top_k_complete > 0
    assert again.top_k_complete == fresh.top_k_complete
    assert again.selection == fresh.selection
    assert again.selection_curve == fresh.selection_curve
    assert again.centring_curve == fresh.centring_curve
    assert again.server_curve == fresh.server_curve
    assert again.name_curve == fresh.name_curve


def test_calibrate_refuses_queries_whose_gold_names_no_tool(router: Router) -> None:
    """``toolgate calibrate`` refused such a set, calibrate() fitted on it: F1 0 at every
    point, and a selection of one tool (min_tools 1, keep_ratio 0.7) reported as meeting its
    goal, since nothing was complete in the plain top k either."""
    queries = [
        LabelledQuery("a", "is it raining", ("get_wether",)),
        LabelledQuery("b", "what is two plus two", ()),
    ]
    message = r"no gold entry of the queries names a tool of the catalog \(a: 'get_wether'\)"
    with pytest.raises(InvalidInputError, match=message):
        calibrate(router, queries)


@pytest.mark.parametrize("rate", [0.5, 0.34, 0.0])
def test_calibrate_keeps_the_router_s_no_tool_threshold_when_too_few_queries_resolve_the_rate(
    router: Router, rate: float
) -> None:
    """From 2 queries with gold a rate of 0.5 fitted 0.0054, and a lone ``select:`` query
    0.0001: thresholds that reject nearly every request in use. Six queries resolve no rate
    (one moves it by 0.17), and no sample resolves 0."""
    report = calibrate(router, QUERIES, false_rejections=rate)
    assert report.config.no_tool_threshold == router.config.no_tool_threshold
    assert report.no_tool is None
    note = next(n for n in report.notes if n.startswith("no_tool_threshold not fitted"))
    assert "6 queries with gold" in note
    assert str(router.config.no_tool_threshold) in note
    assert ("no sample" if rate == 0 else "label at least 20") in note


def test_calibrate_fits_a_false_rejection_rate_of_1_from_any_set(router: Router) -> None:
    """Every threshold rejects at most all the queries: the lowest, 0, is read off none of
    their confidences, so no sample is too small for it."""
    report = calibrate(router, QUERIES[:2], false_rejections=1.0)
    assert report.config.no_tool_threshold == 0.0
    assert report.no_tool is not None
    assert report.no_tool.false_rejected == 1.0
    assert not [n for n in report.notes if n.startswith("no_tool")]


def test_fit_no_tool_reads_only_queries_the_decision_applies_to(router: Router) -> None:
    """A ``select:`` query, one naming a tool and one with a ``+term`` word are never
    rejected in use (routing/pipeline.py), but were counted: a ``select:`` read as confidence
    0, and a named tool's confidence could set the threshold and count as a false rejection
    it never is."""
    asked = [
        LabelledQuery("s", "select:send_email", ("send_email",)),
        LabelledQuery("n", "use send_email to thank Ann", ("send_email",)),
        LabelledQuery("t", "+mail anything from Bob", ("search_mail",)),
        LabelledQuery("i", "what does get_forecast cost", ()),
    ]
    decided = router.with_config(replace(router.config, no_tool_threshold=0.0))
    assert not any(decided.route(item.query).no_tool for item in asked)
    for rate in (0.0, 0.34, 0.5):
        alone = fit_no_tool(router, QUERIES, rate, top_k=5)
        assert fit_no_tool(router, [*asked, *QUERIES], rate, top_k=5) == alone


def test_fit_no_tool_refuses_queries_with_gold_the_decision_never_applies_to(
    router: Router,
) -> None:
    queries = [LabelledQuery("s", "select:send_email", ("send_email",))]
    with pytest.raises(InvalidInputError, match="no query with gold that the decision"):
        fit_no_tool(router, queries, 0.5, top_k=5)
