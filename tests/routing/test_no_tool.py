""" "No tool needed": the decision on the demo catalog, its settings, and the null scores a
saved router keeps."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.routing.sealed import write_sealed
from toolgate import IndexFormatError, InvalidInputError
from toolgate.catalog.catalog import Catalog
from toolgate.cli.commands import demo_catalog
from toolgate.embedding.embedder import Embedder
from toolgate.routing import no_tool
from toolgate.routing.no_tool import (
    GAP_RANK,
    NullScores,
    features,
    no_tool_confidence,
    null_requests,
    null_vectors,
)
from toolgate.routing.router import Router, RouterConfig
from toolgate.routing.store import MANIFEST

CHIT_CHAT = ("hi, how are you?", "thank you!", "🙂")
TOOL_REQUESTS = (
    "what's the weather forecast for Lisbon this weekend?",
    "post the release notes to the #eng slack channel",
    "open an issue about the flaky login test in acme/webapp",
)


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Router:
    path = tmp_path_factory.mktemp("no-tool")
    return Router.from_catalog(demo_catalog(), path=path, cache=None, embedder=embedder)


@pytest.mark.parametrize("query", CHIT_CHAT)
def test_chit_chat_needs_no_tool_and_routes_none(router: Router, query: str) -> None:
    result = router.route(query)
    assert result.no_tool
    assert result.no_tool_confidence is not None
    assert result.no_tool_confidence >= (router.config.no_tool_threshold or 0.0)
    assert result.ids == []
    assert "no_tool=True" in repr(result)


@pytest.mark.parametrize("query", TOOL_REQUESTS)
def test_a_tool_request_is_routed_as_before(router: Router, query: str) -> None:
    result = router.route(query)
    assert not result.no_tool
    assert result.no_tool_confidence is not None
    assert result.no_tool_confidence < (router.config.no_tool_threshold or 1.0)
    assert len(result) >= router.config.min_tools


def test_chit_chat_is_more_confidently_toolless_than_any_tool_request(router: Router) -> None:
    lowest = min(router.route(q).no_tool_confidence or 0.0 for q in CHIT_CHAT)
    highest = max(router.route(q).no_tool_confidence or 0.0 for q in TOOL_REQUESTS)
    assert lowest > highest


def test_decide_false_never_rejects_but_reports_the_confidence(router: Router) -> None:
    decided = router.route("thank you!")
    searched = router.route("thank you!", decide=False)
    assert decided.no_tool
    assert not searched.no_tool
    assert searched.no_tool_confidence == decided.no_tool_confidence
    assert len(searched) >= 1


def test_without_dropping_the_decision_keeps_the_tools(router: Router) -> None:
    view = router.with_config(replace(router.config, no_tool_drop=False))
    result = view.route("hi, how are you?")
    assert result.no_tool
    assert len(result) >= 1


@pytest.mark.parametrize("top_k", [1, 2, 5, 20])
def test_the_decision_does_not_depend_on_top_k(router: Router, top_k: int) -> None:
    # The gap feature reads the ranking at GAP_RANK, where the weights were fitted: a
    # smaller top_k must not shrink the gap and reject requests that need a tool.
    for query in (*CHIT_CHAT, *TOOL_REQUESTS):
        fitted = router.route(query, top_k=GAP_RANK, adaptive=False)
        asked = router.route(query, top_k=top_k, adaptive=False)
        assert asked.no_tool_confidence == pytest.approx(fitted.no_tool_confidence)
        assert asked.no_tool == fitted.no_tool
        shown = min(top_k, GAP_RANK)
        assert asked.ids[:shown] == fitted.ids[:shown]


def test_no_threshold_turns_the_decision_off(router: Router) -> None:
    view = router.with_config(replace(router.config, no_tool_threshold=None))
    result = view.route("hi, how are you?")
    assert not result.no_tool
    assert result.no_tool_confidence == router.route("hi, how are you?").no_tool_confidence


def test_a_named_tool_is_never_no_tool(router: Router) -> None:
    result = router.route("hi! get_forecast")
    assert not result.no_tool
    assert "weather/get_forecast" in result.ids


@pytest.mark.parametrize(
    "shut_out",
    [{}, {"deny": ["add_reaction"]}, {"deny": ["slack/*"], "state": {"scopes": ["slack:write"]}}],
    ids=["gated", "denied", "server-denied"],
)
def test_a_learned_tool_the_route_shuts_out_does_not_say_a_tool_is_needed(
    router: Router, shut_out: dict[str, object]
) -> None:
    learner = router.with_config(router.config)  # a view: what it learns stays its own
    learner.learn(":memory:")
    for _ in range(3):
        learner.feedback("thank you!", used=["slack/add_reaction"])  # requires slack:write
    shown = learner.route("thank you!", state={"scopes": ["slack:write"]})
    assert not shown.no_tool
    assert shown.tools[0].id == "slack/add_reaction"
    assert shown.tools[0].reason == "learned"
    # Shut out, the lift names nothing the route may show: the ranking alone decides.
    result = learner.route("thank you!", **shut_out)  # type: ignore[arg-type]
    assert result.no_tool
    assert result.ids == []


def test_select_queries_are_not_judged(router: Router) -> None:
    result = router.route("select:get_forecast")
    assert not result.no_tool
    assert result.no_tool_confidence is None


def test_pinned_tools_stay_when_no_tool_is_needed(embedder: Embedder) -> None:
    tools = list(demo_catalog())
    tools[0] = replace(tools[0], pinned=True)
    router = Router.from_catalog(Catalog.from_tools(tools), cache=None, embedder=embedder)
    result = router.route("hi, how are you?")
    assert result.no_tool
    assert result.ids == [tools[0].id]
    assert result.tools[0].reason == "pinned"


def test_the_result_dict_carries_the_decision(router: Router) -> None:
    shown = json.loads(router.route("🙂").to_json())
    assert shown["no_tool"] is True
    assert 0.0 < shown["no_tool_confidence"] <= 1.0


def test_the_null_scores_are_saved_and_reopened(router: Router) -> None:
    directory = Path(router._parts.index.path).parent
    manifest = json.loads((directory / MANIFEST).read_text())
    assert manifest["null_scores"] == router._parts.null.to_dict()  # type: ignore[union-attr]
    reopened = Router.open(directory)
    assert reopened._parts.null == router._parts.null
    query = "hi, how are you?"
    assert reopened.route(query).no_tool_confidence == router.route(query).no_tool_confidence


def test_a_manifest_without_null_scores_measures_them_on_first_route(
    router: Router, tmp_path: Path, embedder: Embedder
) -> None:
    router.save(tmp_path)
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    del manifest["null_scores"]
    write_sealed(tmp_path / MANIFEST, manifest)
    old = Router.open(tmp_path, embedder=embedder)
    assert old._parts.null is None
    query = "thank you!"
    assert old.route(query).no_tool_confidence == router.route(query).no_tool_confidence


def test_the_settings_survive_a_save(router: Router, tmp_path: Path) -> None:
    config = replace(router.config, no_tool_weights=(1.0, -1.0, 0.0, 0.5, 0.0),
                     no_tool_threshold=0.5, no_tool_drop=False)  # fmt: skip
    router.with_config(config).save(tmp_path)
    assert Router.open(tmp_path).config == config


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("no_tool_weights", (1.0, 2.0)),
        ("no_tool_weights", [4.0, -1.0, 0.0, 0.0, -1.0]),
        ("no_tool_weights", (1.0, float("nan"), 0.0, 0.0, 0.0)),
        ("no_tool_threshold", 1.5),
        ("no_tool_threshold", -0.1),
        ("no_tool_threshold", float("inf")),
        ("no_tool_drop", 1),
    ],
)
def test_bad_settings_are_refused_by_name(setting: str, value: object) -> None:
    with pytest.raises(InvalidInputError, match=setting):
        RouterConfig(**{setting: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        {"cosine_mean": 0.2, "cosine_std": 0.1, "bm25_mean": 1.0},
        {"cosine_mean": 0.2, "cosine_std": 0.0, "bm25_mean": 1.0, "bm25_std": 1.0},
        {"cosine_mean": "x", "cosine_std": 0.1, "bm25_mean": 1.0, "bm25_std": 1.0},
        [0.2, 0.1, 1.0, 1.0],
    ],
)
def test_malformed_null_scores_are_an_index_format_error(value: object) -> None:
    with pytest.raises(IndexFormatError, match="null_scores"):
        NullScores.from_dict(value)  # type: ignore[arg-type]


def test_a_better_match_lowers_the_confidence() -> None:
    null = NullScores(0.3, 0.1, 1.0, 0.5)
    weights = RouterConfig().no_tool_weights
    weak = features(null, [0.35, 0.3, 0.28], [1.0, 0.5, 0.2], "do the thing please")
    strong = features(null, [0.75, 0.3, 0.28], [6.0, 0.5, 0.2], "do the thing please")
    assert no_tool_confidence(weights, strong) < no_tool_confidence(weights, weak)
    assert features(null, [], [], "hi")[0] < weak[0]  # nothing ranked: as weak as it gets


def test_the_null_requests_are_packaged() -> None:
    requests = null_requests()
    assert len(requests) >= 50
    assert not any(text.startswith("#") for text in requests)


def test_a_catalog_smaller_than_the_gap_rank_still_routes_a_fitting_request(
    embedder: Embedder,
) -> None:
    document = {"tools": [{"name": "create_issue", "description": "Open an issue."}]}
    router = Router.from_tools(document, cache=None, embedder=embedder)
    assert router.route("an issue").ids == ["default/create_issue"]
    assert router.route("🙂").no_tool


def test_routers_built_at_once_embed_the_null_requests_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A gateway's first requests, each building its tools' router in a thread, each embedded
    # the 107 null requests (about 1 s of model time) where one embedding serves them all.
    monkeypatch.setattr(no_tool, "_NULL_VECTORS", {})
    runs: list[int] = []

    def embed(texts: list[str]) -> np.ndarray:
        runs.append(len(texts))
        time.sleep(0.2)  # the others ask meanwhile
        return np.ones((len(texts), 384), np.float32)

    start = threading.Barrier(4)

    def build(_: int) -> np.ndarray:
        start.wait()
        return null_vectors("model-a", embed)

    with ThreadPoolExecutor(max_workers=4) as pool:
        found = list(pool.map(build, range(4)))
    assert runs == [len(null_requests())]
    assert all(vectors is found[0] for vectors in found)


def test_one_models_slow_null_requests_do_not_hold_up_another_models(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One lock for every model: a router of another model waited for the first model's
    # embedding (a model being downloaded or loaded) before it could build.
    monkeypatch.setattr(no_tool, "_NULL_VECTORS", {})
    embedding, let_go = threading.Event(), threading.Event()

    def slow(texts: list[str]) -> np.ndarray:
        embedding.set()
        assert let_go.wait(timeout=30)
        return np.ones((len(texts), 384), np.float32)

    def fast(texts: list[str]) -> np.ndarray:
        return np.zeros((len(texts), 768), np.float32)

    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(null_vectors, "model-a", slow)
        assert embedding.wait(timeout=30)
        other = pool.submit(null_vectors, "model-b", fast)
        try:
            assert other.result(timeout=5).shape == (len(null_requests()), 768)
            assert not first.done()  # still embedding meanwhile
        finally:
            let_go.set()
        assert first.result(timeout=30).shape == (len(null_requests()), 384)


def test_a_new_process_with_a_warm_cache_embeds_no_null_request(
    embedder: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every new process building a router (toolgate route --tools, a serverless function's
    # cold start) ran the model over the 107 null requests, about 1 s, past the embedding
    # cache that held the catalog's own texts.
    cache = tmp_path / "embeddings.sqlite3"
    monkeypatch.setattr(no_tool, "_NULL_VECTORS", {})
    first = Router.from_catalog(demo_catalog(), cache=cache, embedder=embedder)
    monkeypatch.setattr(no_tool, "_NULL_VECTORS", {})  # as in a new process
    ran: list[str] = []
    run = embedder._embed_uncached

    def counted(texts: list[str]) -> np.ndarray:
        ran.extend(texts)
        return run(texts)

    monkeypatch.setattr(embedder, "_embed_uncached", counted)
    again = Router.from_catalog(demo_catalog(), cache=cache, embedder=embedder)
    assert ran == []
    assert again._parts.null == first._parts.null
