"""Adaptive selection: top_k is a ceiling, and what a turn shows follows the evidence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from toolgate.catalog.catalog import Catalog
from toolgate.cli.commands import demo_catalog
from toolgate.errors import InvalidInputError
from toolgate.routing.config import RouterConfig
from toolgate.routing.feedback import LiftedRow
from toolgate.routing.router import Router
from toolgate.routing.selection import select, with_clause_slots

RATIO = {"keep_ratio": 0.9, "clause_tools": 2}


def test_select_keeps_the_floor_then_what_scores_near_the_best() -> None:
    ranked = [("a", 1.0), ("b", 0.95), ("c", 0.89), ("d", 0.91)]
    assert select(ranked, [], ceiling=8, min_tools=1, **RATIO) == ["a", "b", "d"]
    assert select(ranked, [], ceiling=8, min_tools=3, **RATIO) == ["a", "b", "c", "d"]
    assert select(ranked, [], ceiling=2, min_tools=1, **RATIO) == ["a", "b"]
    assert select([], [], ceiling=8, min_tools=2, **RATIO) == []


def test_the_floor_past_the_best_tool_keeps_within_its_tokens() -> None:
    ranked = [("a", 1.0), ("b", 0.5), ("c", 0.4), ("d", 0.3)]
    cost = {"a": 500, "b": 100, "c": 50, "d": 10}.get
    pick = {"ceiling": 8, "min_tools": 4, "cost": cost, **RATIO}
    assert select(ranked, [], floor_tokens=None, **pick) == ["a", "b", "c", "d"]
    assert select(ranked, [], floor_tokens=650, **pick) == ["a", "b", "c"]
    # The best tool always, whatever it costs; the first tool that does not fit ends it.
    assert select(ranked, [], floor_tokens=0, **pick) == ["a"]
    assert select(ranked, [], floor_tokens=599, **pick) == ["a"]
    # Past the floor, a tool scoring near the best is still shown.
    near = [("a", 1.0), ("b", 0.95)]
    assert select(near, [], floor_tokens=0, **pick) == ["a", "b"]


def test_the_selection_keeps_within_its_tokens() -> None:
    ranked = [("a", 1.0), ("b", 0.99), ("c", 0.98), ("d", 0.97)]
    cost = {"a": 900, "b": 300, "c": 200, "d": 100}.get
    pick = {"ceiling": 3, "min_tools": 4, "cost": cost, **RATIO}
    assert select(ranked, [], selection_tokens=None, **pick) == ["a", "b", "c"]
    # A tool that does not fit is passed over, and a smaller one after it may fit.
    assert select(ranked, [], selection_tokens=1150, **pick) == ["a", "c"]
    assert select(ranked, [], selection_tokens=1300, **pick) == ["a", "b", "d"]
    assert select(ranked, [], selection_tokens=10, **pick) == ["a"]  # the best, always


def test_the_floor_counts_compact_schema_tokens(router: Router) -> None:
    query = "what is the weather forecast for Lisbon"
    plain = router.route(query, top_k=6, adaptive=False)
    lean = router.with_config(RouterConfig(min_tools=4, floor_tokens=0, keep_ratio=1.0))
    assert lean.route(query, top_k=6).ids == plain.ids[:1]
    tokens = [router.catalog[i].token_count("openai", compact=True) for i in plain.ids[:2]]
    roomy = router.with_config(RouterConfig(min_tools=4, floor_tokens=None, keep_ratio=1.0))
    assert roomy.route(query, top_k=6).ids == plain.ids[:4]
    assert all(t > 0 for t in tokens)


def test_select_covers_every_clause_before_the_tail() -> None:
    ranked = [("a", 1.0), ("b", 0.99), ("c", 0.98)]
    clauses = [[("a", 1.0), ("x", 0.5)], [("y", 0.8), ("z", 0.7), ("w", 0.1)]]
    # Each clause's best; a clause's second only when it scores near its best.
    assert select(ranked, clauses, ceiling=8, min_tools=1, **RATIO) == ["a", "y", "b", "c"]
    near = [[("y", 0.8), ("z", 0.79)]]
    assert select(ranked, near, ceiling=8, min_tools=1, **RATIO) == ["a", "y", "z", "b", "c"]
    # The ceiling cuts the tail first: clause picks come before it.
    assert select(ranked, clauses, ceiling=2, min_tools=1, **RATIO) == ["a", "y"]
    # Each clause's best comes before the rest of the floor.
    assert select(ranked, clauses, ceiling=3, min_tools=3, **RATIO) == ["a", "y", "b"]
    off = {"keep_ratio": 0.9, "clause_tools": 0}
    assert select(ranked, clauses, ceiling=8, min_tools=1, **off) == ["a", "b", "c"]


TOOLS = {
    "weather": {
        "tools": [
            {"name": "get_forecast", "description": "Weather forecast for a city, by day."},
            {"name": "get_air_quality", "description": "Air quality index for a city."},
        ]
    },
    "mail": {
        "tools": [
            {"name": "send_email", "description": "Send an email to a person."},
            {"name": "list_inbox", "description": "List the messages in the inbox."},
        ]
    },
    "calendar": {
        "tools": [
            {"name": "create_event", "description": "Put an event on the calendar."},
            {"name": "list_events", "description": "List the events on the calendar."},
        ]
    },
    "files": {
        "tools": [
            {"name": "read_file", "description": "Read a text file from disk."},
            {"name": "write_file", "description": "Write a text file to disk."},
            {"name": "delete_file", "description": "Delete a file from disk."},
        ]
    },
}


@pytest.fixture(scope="module")
def router() -> Router:
    return Router.from_catalog(Catalog.load(TOOLS), cache=None)


def test_top_k_is_a_ceiling(router: Router) -> None:
    query = "what is the weather forecast for Lisbon"
    plain = router.route(query, top_k=6, adaptive=False)
    shown = router.route(query, top_k=6)
    assert len(plain) == 6
    floor = router.config.min_tools  # these schemas are small: the whole floor fits
    assert floor <= len(shown) < 6  # the tail scores well below the best
    assert shown.ids == plain.ids[: len(shown)]
    best = shown.tools[0].score
    assert all(t.score >= 0.9 * best for t in shown.tools[floor:])
    assert router.route(query, top_k=1).ids == plain.ids[:1]
    with pytest.raises(InvalidInputError, match="adaptive must be True, False or None, got a str"):
        router.route(query, adaptive="no")  # type: ignore[arg-type]


def test_each_clause_of_a_multi_intent_query_gets_its_best_tool(router: Router) -> None:
    # The file tools crowd the whole query's top 3; the last clause asks for another tool.
    query = "Read the file on disk, write the file to disk again, then email Ann"
    plain = router.route(query, top_k=3, adaptive=False)
    assert "mail/send_email" not in plain.ids
    shown = router.route(query, top_k=3)
    assert len(shown) <= 3
    assert ("mail/send_email", "clause") in [(t.id, t.reason) for t in shown.tools]
    assert shown.ids[0] == plain.ids[0]
    off = router.with_config(RouterConfig(clause_tools=0))
    assert "mail/send_email" not in off.route(query, top_k=3).ids


def test_clause_slots_give_each_clause_its_best_tool_in_the_ranking(router: Router) -> None:
    query = "Read the file on disk, write the file to disk again, then email Ann"
    plain = router.route(query, top_k=3, adaptive=False)
    assert "mail/send_email" not in plain.ids
    slotted = router.with_config(RouterConfig(clause_slots=1))
    ranked = slotted.route(query, top_k=3, adaptive=False)
    assert ranked.ids[:2] == plain.ids[:2]  # the query's own best two stay first
    assert ("mail/send_email", "clause") in [(t.id, t.reason) for t in ranked.tools]
    assert len(ranked) == 3
    # Slots read the clauses even when nothing else does.
    alone = RouterConfig(clause_slots=1, clause_weight=0.0, clause_fusion=0.0, clause_tools=0)
    assert "mail/send_email" in router.with_config(alone).route(query, top_k=3, adaptive=False).ids
    # A query of one clause ranks as it did.
    single = "what is the weather forecast for Lisbon"
    assert (
        slotted.route(single, top_k=4, adaptive=False).ids
        == router.route(single, top_k=4, adaptive=False).ids
    )


def test_with_clause_slots_orders_head_then_clauses_then_the_rest() -> None:
    row = lambda n, score: LiftedRow(n, score, 0.0, 0.0)  # noqa: E731
    ranked = [row(1, 1.0), row(2, 0.9), row(3, 0.8), row(4, 0.7)]
    clauses = [[row(7, 0.6), row(3, 0.5)], [row(1, 1.0), row(8, 0.4)]]
    rows, added = with_clause_slots(ranked, clauses, slots=1, k=4)
    assert [r.row for r in rows] == [1, 2, 7, 3]
    assert added == [7]
    rows, added = with_clause_slots(ranked, clauses, slots=2, k=6)
    assert [r.row for r in rows] == [1, 2, 7, 3, 8, 4]
    assert rows[3] is ranked[2]  # a row the query ranked keeps the query's scores
    assert with_clause_slots(ranked, clauses, slots=0, k=2) == (ranked[:2], [])
    assert with_clause_slots(ranked, [], slots=1, k=3) == (ranked[:3], [])


def test_embedded_clause_vectors_add_each_clause_read_on_its_own(router: Router) -> None:
    query = "Read the file on disk, write the file to disk again, then email Ann"
    embedded = router.with_config(RouterConfig(clause_vectors="embedded"))
    pooled_vectors = router._pipeline.query_vectors
    vector, pooled = pooled_vectors(query)
    same, mixed = embedded._pipeline.query_vectors(query)
    np.testing.assert_array_equal(vector, same)  # the whole query's vector is untouched
    assert mixed.shape == pooled.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(mixed, axis=1), 1.0, atol=1e-5)
    own = pooled_vectors.embedder.embed(list(pooled_vectors.clause_texts(query)))
    unit = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    expected = unit + own
    np.testing.assert_allclose(
        mixed, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-5
    )
    single = "what is the weather forecast for Lisbon"
    np.testing.assert_array_equal(
        pooled_vectors(single)[1], embedded._pipeline.query_vectors(single)[1]
    )
    assert "mail/send_email" in embedded.route(query, top_k=6).ids


def test_named_and_pinned_tools_come_on_top_of_the_selection(router: Router) -> None:
    shown = router.route("read_file and tell me the weather forecast", top_k=2)
    assert ("files/read_file", "named") in [(t.id, t.reason) for t in shown.tools]


def test_selection_settings_are_checked_and_saved_with_the_router(tmp_path: Path) -> None:
    for bad, message in [
        ({"min_tools": 0}, "min_tools must be an integer >= 1"),
        ({"clause_tools": -1}, "clause_tools must be an integer >= 0"),
        ({"keep_ratio": 1.5}, r"keep_ratio must be in \[0, 1\]"),
        ({"keep_ratio": float("nan")}, r"keep_ratio must be in \[0, 1\]"),
        ({"adaptive": "yes"}, "adaptive must be True or False"),
        ({"floor_tokens": -1}, "floor_tokens must be an integer >= 0"),
        ({"selection_tokens": 1.5}, "selection_tokens must be an integer >= 0"),
        ({"clause_slots": -1}, "clause_slots must be an integer >= 0"),
        ({"clause_vectors": "mean"}, "clause_vectors must be 'pooled' or 'embedded', got 'mean'"),
    ]:
        with pytest.raises(InvalidInputError, match=message):
            RouterConfig(**bad)  # type: ignore[arg-type]
    config = RouterConfig(
        min_tools=4, floor_tokens=300, keep_ratio=0.8, clause_tools=1, adaptive=False,
        clause_slots=2, clause_vectors="embedded",
    )  # fmt: skip
    Router.from_catalog(Catalog.load(TOOLS), config=config, path=tmp_path, cache=None)
    saved = json.loads((tmp_path / "router.json").read_text())["config"]
    assert (saved["min_tools"], saved["floor_tokens"], saved["keep_ratio"]) == (4, 300, 0.8)
    assert (saved["clause_slots"], saved["clause_vectors"]) == (2, "embedded")
    assert Router.open(tmp_path).config == config


def test_with_config_changes_settings_but_not_the_index(router: Router) -> None:
    wide = router.with_config(RouterConfig(min_tools=4))
    assert len(wide.route("what is the weather forecast for Lisbon", top_k=6)) >= 4
    assert router.config.min_tools == RouterConfig().min_tools  # the original is untouched
    with pytest.raises(InvalidInputError, match="bm25_k1, index_dtype set how the index"):
        router.with_config(RouterConfig(bm25_k1=1.2, index_dtype="f32"))


def test_a_clause_that_needs_no_tool_gets_no_tool_of_its_own() -> None:
    demo = Router.from_catalog(demo_catalog())
    # A greeting in another language is a clause of its own; as the whole request it would
    # need no tool, so its nearest tool (the weather) has no place among the file tools.
    greeting = "Bonjour, j'ai une question."
    assert demo.route(greeting, top_k=10, adaptive=False).no_tool
    shown = demo.route(f"{greeting} Show me the files in my home directory.")
    assert shown.ids[0] == "filesystem/list_directory"
    assert not [t.id for t in shown if not t.id.startswith("filesystem/")]
    # A clause that asks for a tool still gets it.
    two = demo.route("Show me the files in my home directory, then post the list to Slack")
    assert any(t.startswith("slack/") for t in two.ids)


def test_decide_false_judges_no_clause_to_need_no_tool() -> None:
    # decide=False (a search the model made, a required call) says every part of the request
    # wants tools: a terse or odd clause keeps its tool, as with the decision turned off.
    query = "Bonjour, j'ai une question. Show me the files in my home directory."
    demo = Router.from_catalog(demo_catalog())
    undecided = Router.from_catalog(demo_catalog(), config=RouterConfig(no_tool_threshold=None))
    assert demo.route(query).ids != undecided.route(query).ids  # the clause's tool is left out
    assert demo.route(query, decide=False).ids == undecided.route(query).ids


def test_no_tool_drop_off_keeps_every_clause_s_tools() -> None:
    # no_tool_drop=False only says no_tool and keeps the tools: a clause it would judge to
    # need none keeps its tool too, as with the decision turned off.
    query = "Bonjour, j'ai une question. Show me the files in my home directory."
    kept = Router.from_catalog(demo_catalog(), config=RouterConfig(no_tool_drop=False))
    undecided = Router.from_catalog(demo_catalog(), config=RouterConfig(no_tool_threshold=None))
    assert Router.from_catalog(demo_catalog()).route(query).ids != undecided.route(query).ids
    assert kept.route(query).ids == undecided.route(query).ids
