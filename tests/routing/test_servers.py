"""Servers as a second-level signal: a tool gains with its server's nearness to the query."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from toolgate.catalog.catalog import Catalog
from toolgate.errors import InvalidInputError
from toolgate.evaluation.calibrate import fit_server_weight
from toolgate.evaluation.evaluate import LabelledQuery
from toolgate.routing.config import RouterConfig
from toolgate.routing.feedback import LiftedRow
from toolgate.routing.router import Router
from toolgate.routing.servers import ServerVectors

# The same generic tool on three servers whose names say nothing: only a server's other
# tools tell which one a request means.
GENERIC = {"name": "delete_item", "description": "Delete an item by its id."}
TOOLS = {
    "s1": {
        "tools": [
            {"name": "send_email", "description": "Send an email to a person."},
            {"name": "list_inbox", "description": "List the messages in the inbox."},
            GENERIC,
        ]
    },
    "s2": {
        "tools": [
            {"name": "read_file", "description": "Read a text file from disk."},
            {"name": "write_file", "description": "Write a text file to disk."},
            GENERIC,
        ]
    },
    "s3": {
        "tools": [
            {"name": "create_event", "description": "Put an event on the calendar."},
            GENERIC,
        ]
    },
}
LIFTED = replace(RouterConfig(), server_weight=0.35)


@pytest.fixture(scope="module")
def router() -> Router:
    return Router.from_catalog(Catalog.load(TOOLS), cache=None)


def test_the_generic_tool_of_the_server_the_request_is_about_ranks_first(router: Router) -> None:
    query = "remove the meeting on my calendar"
    plain = router.route(query, top_k=2, adaptive=False)
    assert plain.ids[0] == "s3/create_event"
    assert plain.ids[1] != "s3/delete_item"  # the copies tie: the ranking cannot tell
    lifted = router.with_config(LIFTED).route(query, top_k=2, adaptive=False)
    assert lifted.ids == ["s3/create_event", "s3/delete_item"]
    on_disk = router.with_config(LIFTED).route("delete the old text file on disk", top_k=3)
    assert on_disk.ids[:3] == ["s2/read_file", "s2/write_file", "s2/delete_item"]


def test_the_lift_keeps_the_ranking_within_top_k_and_adds_the_server_cosine(
    router: Router,
) -> None:
    query = "delete the message from Ann in my inbox"
    plain = router.route(query, top_k=9, adaptive=False)
    lifted = router.with_config(LIFTED).route(query, top_k=3, adaptive=False)
    assert len(lifted) == 3
    assert lifted.ids[0] == "s1/list_inbox"
    # Every score gained between 0 and the weight: cosines of unit vectors are at most 1.
    before = {tool.id: tool.score for tool in plain.tools}
    for tool in lifted.tools:
        assert 0 < tool.score - before[tool.id] <= LIFTED.server_weight + 1e-6


def test_one_server_has_nothing_to_tell_apart() -> None:
    assert ServerVectors.of(np.eye(2, dtype=np.float32).__getitem__, ["a", "a"]) is None
    single = Router.from_catalog(Catalog.load({"s1": TOOLS["s1"]}), cache=None)
    query = "delete the message from Ann"
    assert (
        single.with_config(LIFTED).route(query, top_k=3).tools == single.route(query, top_k=3).tools
    )


def test_server_vectors_are_the_unit_mean_of_their_rows() -> None:
    rows = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    servers = ServerVectors.of(rows.__getitem__, ["b", "a", "b"])
    assert servers is not None
    assert servers.names == ("a", "b")
    scores = servers.scores(np.array([1, 0, 0], dtype=np.float32))
    np.testing.assert_allclose(scores, [0.0, 1 / np.sqrt(2)], rtol=1e-6)


def test_the_server_weight_is_saved_with_the_router(tmp_path: Path) -> None:
    Router.from_catalog(Catalog.load(TOOLS), config=LIFTED, path=tmp_path, cache=None)
    saved = json.loads((tmp_path / "router.json").read_text())["config"]
    assert saved["server_weight"] == 0.35
    opened = Router.open(tmp_path)
    assert opened.config == LIFTED
    assert opened.route("remove the meeting on my calendar", top_k=2).ids[1] == "s3/delete_item"


def test_a_near_copy_lifted_above_its_original_becomes_the_original() -> None:
    rows = np.array([[1, 0], [0, 1]], dtype=np.float32)
    servers = ServerVectors.of(rows.__getitem__, ["a", "b"])
    assert servers is not None
    ranked = [LiftedRow(0, 1.0, 0.9, 0.0), LiftedRow(1, 0.9, 0.9, 0.0, copy_of=0)]
    lifted = servers.lifted(ranked, np.array([0, 1], dtype=np.float32), weight=0.5)
    assert [(r.row, r.copy_of) for r in lifted] == [(1, None), (0, 1)]
    assert [r.fused for r in lifted] == pytest.approx([1.4, 1.0])
    # Not lifted past it, a copy stays the copy.
    kept = servers.lifted(ranked, np.array([1, 0], dtype=np.float32), weight=0.5)
    assert [(r.row, r.copy_of) for r in kept] == [(0, None), (1, 0)]


@pytest.mark.parametrize("weight", [-0.1, float("nan"), float("inf"), "0.3"])
def test_a_bad_server_weight_is_refused(weight: object) -> None:
    with pytest.raises(InvalidInputError, match="server_weight must be a finite number >= 0"):
        RouterConfig(server_weight=weight)  # type: ignore[arg-type]


def test_calibrate_keeps_a_server_weight_only_where_it_ranks_better(router: Router) -> None:
    # The generic tool each request means is its server's: only the server signal tells.
    meant = [
        LabelledQuery("1", "remove the meeting on my calendar", ("s3/delete_item",), ()),
        LabelledQuery("2", "delete the old text file on disk", ("s2/delete_item",), ()),
        LabelledQuery("3", "delete the message from Ann in my inbox", ("s1/delete_item",), ()),
    ]
    # Three queries: z=0 leaves the margin alone to judge (ranking_choice tests the noise).
    weight, points, notes = fit_server_weight(router, meant, top_k=3, z=0.0)
    assert notes == ()
    assert [p.server_weight for p in points] == [0.0, 0.2, 0.35]
    # The best nDCG, the smallest weight on a tie.
    assert weight == min(p.server_weight for p in points if p.ndcg == max(q.ndcg for q in points))
    chosen = next(p for p in points if p.server_weight == weight)
    assert chosen.ndcg >= points[0].ndcg + 0.005
    assert chosen.complete == 1.0 > points[0].complete
    # Requests the ranking already gets right gain nothing: no server signal.
    plain = [LabelledQuery("4", "send an email to a person", ("s1/send_email",), ())]
    assert fit_server_weight(router, plain, top_k=2)[0] == 0.0
    with pytest.raises(InvalidInputError, match="weights must hold 0"):
        fit_server_weight(router, meant, top_k=2, weights=(0.2,))
    single = Router.from_catalog(Catalog.load({"s1": TOOLS["s1"]}), cache=None)
    assert fit_server_weight(single, meant, top_k=2) == (0.0, (), ())
