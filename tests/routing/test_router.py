"""The Router end to end on the built-in demo catalog, with the real embedding model."""

from __future__ import annotations

import ast
import copy
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pytest

from tests.routing.sealed import reseal, write_sealed
from tests.shared_data import DATA, require
from toolgate import (
    CatalogError,
    IndexFormatError,
    IndexIncompatibleError,
    InvalidInputError,
    _toolgate,
)
from toolgate.catalog.catalog import Catalog
from toolgate.catalog.text import TEXT_VERSION
from toolgate.cli.commands import demo_catalog
from toolgate.embedding.cache import EmbeddingCache
from toolgate.embedding.embedder import Embedder
from toolgate.embedding.long_texts import PREFIX_CHARS
from toolgate.evaluation.calibrate import calibrate, fit_name_weight
from toolgate.evaluation.evaluate import LabelledQuery, load_queries
from toolgate.routing.query_vectors import MEMO_CHARS
from toolgate.routing.router import Router, RouterConfig, default_embedder
from toolgate.telemetry.events import RouteEvent
from toolgate.telemetry.sinks import JsonFileSink
from toolgate.telemetry.usage import UsageStats
from toolgate.verify import Verdict


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return default_embedder(RouterConfig().precision)


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Router:
    path = tmp_path_factory.mktemp("router")
    return Router.from_catalog(demo_catalog(), path=path, cache=None, embedder=embedder)


def test_the_model_is_loaded_once_whatever_the_progress_bar(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Router (bar left to decide) and a ToolFilter or McpRouter (no bar) in one process
    # each loaded the model: 78 MB more of the same weights.
    def load_again(**options: object) -> NoReturn:
        raise AssertionError(f"the model was loaded again: {options}")

    monkeypatch.setattr("toolgate.routing.build.Embedder", load_again)
    quiet = default_embedder(RouterConfig().precision, progress=False)
    assert (quiet.progress, embedder.progress) == (False, None)
    text = "find the weather in Lisbon"
    assert np.array_equal(quiet.embed(text), embedder.embed(text))


def test_ids_are_server_slash_name_in_rank_order(router: Router) -> None:
    query = "what's the weather forecast for Lisbon this weekend?"
    result = router.route(query, top_k=5, threshold=None, adaptive=False)
    assert len(result) == 5
    assert result.ids[0] == "weather/get_forecast"
    assert all(tool_id in router.catalog for tool_id in result.ids)
    assert result.scores == sorted(result.scores, reverse=True)


def test_a_tool_named_in_the_query_is_always_included(router: Router) -> None:
    result = router.route("use explain_query on my slow report", top_k=1)
    assert "postgres/explain_query" in result.ids
    named = next(t for t in result if t.id == "postgres/explain_query")
    assert named.reason == "named"


@pytest.mark.parametrize(
    "pasted",
    [
        "```python\nplan = explain_query(sql)\nprint(plan)\n```",
        "~~~\nexplain_query(sql)\n~~~\n",
        "```\nexplain_query(sql)",  # never closed: a fence runs to the end
    ],
)
def test_a_name_in_a_pasted_code_block_is_not_a_request_for_it(router: Router, pasted: str) -> None:
    # The block is material the user pasted; the request is the text around it.
    # It may still rank on its words; it is not forced in as named.
    result = router.route(f"what is the weather in Paris tomorrow?\n\n{pasted}", top_k=3)
    assert "named" not in {t.reason for t in result}
    inline = router.route("what is the weather in Paris? run ```explain_query``` too", top_k=1)
    assert {t.id: t.reason for t in inline}["postgres/explain_query"] == "named"


def _everything(router: Router) -> dict[str, list[str]]:
    """A state meeting every precondition of every tool."""
    return {
        "scopes": [s for t in router.catalog for s in t.requires_scopes],
        "tools_run": [r for t in router.catalog for r in t.requires_tools],
        "milestones": [m for t in router.catalog for m in t.requires_milestones],
    }


def test_every_tool_found_by_its_exact_name(router: Router) -> None:
    everything = _everything(router)
    for tool in router.catalog:
        assert tool.id in router.route(tool.name, top_k=3, state=everything).ids, tool.id


def test_select_returns_the_named_tools_in_order_and_reports_unknown(router: Router) -> None:
    result = router.route("select:list_directory, read_file, no_such_tool")
    assert result.form == "select"
    assert result.ids == ["filesystem/list_directory", "filesystem/read_file"]
    assert result.unknown == ("no_such_tool",)


def test_words_after_select_that_name_no_tool_are_routed_as_text(router: Router) -> None:
    words = "select: a good issue template please"
    result = router.route(words, top_k=3)
    assert result.form == "text"
    assert result.notes == ("'select:' named no tool and reads as words: routed as text",)
    assert result.unknown == ()
    assert result.ids[0] == "github/get_issue"
    assert result.ids == router.route(words, top_k=3, forms=False).ids  # as a person's text
    assert "routed as text" in repr(result)


def test_a_repr_stays_short_whatever_the_query_names(router: Router) -> None:
    """Every name a select gave that no tool has was in the repr, in full: a model's long
    search made a log line of megabytes."""
    names = [f"no_tool_{n}_" + "x" * 10_000 for n in range(1_000)]
    result = router.route("select:" + ",".join(names))
    assert len(result.unknown) == 1_000
    shown = repr(result)
    assert len(shown) < 1_000
    assert shown.startswith("RouteResult([], gated=0, unknown=['no_tool_0_xxx")
    assert shown.endswith(", +995])")


def test_a_select_that_names_no_tool_says_so(router: Router) -> None:
    # Names, not words: the model asked for these tools, so it is told they do not exist
    # rather than handed others.
    result = router.route("select:no_such_tool, nor_this")
    assert (result.form, result.ids, result.notes) == ("select", [], ())
    assert result.unknown == ("no_such_tool", "nor_this")
    assert repr(result) == "RouteResult([], gated=0, unknown=['no_such_tool', 'nor_this'])"
    # Words beside a name that names a tool: a select, the words reported.
    mixed = router.route("select: read_file, a good template")
    assert (mixed.form, mixed.ids) == ("select", ["filesystem/read_file"])
    assert mixed.unknown == ("a good template",)


def test_select_still_applies_the_gate(router: Router) -> None:
    result = router.route("select:write_file")
    assert result.ids == []
    assert [g.id for g in result.gated_out] == ["filesystem/write_file"]
    assert router.route("select:write_file", state={"scopes": ["fs:write"]}).ids == [
        "filesystem/write_file"
    ]


def test_required_term_restricts_to_names_containing_it(router: Router) -> None:
    result = router.route("+slack message", top_k=10)
    assert result.form == "required"
    assert result.ids
    assert all(tool_id.startswith("slack/") for tool_id in result.ids)


def test_state_gates_tools_and_explains_why(router: Router) -> None:
    query = "merge the approved pull request 42 in acme/webapp"
    closed = router.route(query, top_k=5)
    assert "github/merge_pull_request" not in closed.ids
    gated = {g.id: g for g in closed.gated_out}
    assert set(gated["github/merge_pull_request"].missing) == {
        "scope:github:write",
        "milestone:review_approved",
    }
    half_open = router.route(query, top_k=5, state={"scopes": ["github:write"]})
    assert "github/merge_pull_request" not in half_open.ids
    assert half_open.gated_out[0].missing == ("milestone:review_approved",)
    state = {"scopes": ["github:write"], "milestones": ["review_approved"]}
    assert router.route(query, top_k=5, state=state).ids[0] == "github/merge_pull_request"


def test_tool_run_before_is_a_precondition(router: Router) -> None:
    query = "cancel_event for the team offsite"
    scopes = {"scopes": ["calendar:write"]}
    assert "calendar/cancel_event" not in router.route(query, state=scopes).ids
    after = {"scopes": ["calendar:write"], "tools_run": ["calendar/list_events"]}
    assert "calendar/cancel_event" in router.route(query, state=after).ids


def test_allow_and_deny_patterns(router: Router) -> None:
    query = "search for something"
    allowed = router.route(query, top_k=10, allow=["search/*"])
    assert allowed.ids
    assert all(i.startswith("search/") for i in allowed.ids)
    denied = router.route(query, top_k=10, deny=["search/*", "search_files"])
    assert not any(i.startswith("search/") or i.endswith("/search_files") for i in denied.ids)
    assert denied.n_out_of_scope == 4


def test_threshold_is_a_cosine_floor_and_can_route_nothing(router: Router) -> None:
    result = router.route("forecast for Paris", top_k=10, threshold=0.3)
    assert result.ids
    assert all(tool.dense >= 0.3 for tool in result)
    assert router.route("forecast for Paris", threshold=1.01).ids == []


def test_history_shifts_an_ambiguous_follow_up(router: Router) -> None:
    follow_up = "and for next week?"
    plain = router.route(follow_up, top_k=3, threshold=None, adaptive=False)
    history = ["which meetings do I have on my calendar between Monday and Friday?"]
    blended = router.route(follow_up, top_k=3, threshold=None, history=history, adaptive=False)
    assert "calendar/list_events" not in plain.ids
    assert "calendar/list_events" in blended.ids


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top_k": 0}, "top_k"),
        ({"top_k": "3"}, "top_k"),
        ({"state": {"scope": ["x"]}}, "unknown keys"),
        ({"state": {"scopes": "github:write"}}, "list of strings"),
        ({"allow": "github/*"}, "list of patterns"),
        ({"history": "earlier"}, "list of turns"),
        ({"include": 5}, "include must be a list of tool ids or names, got int"),
        ({"decide": "no"}, "decide must be True or False, got a str"),
        ({"forms": None}, "forms must be True or False, got a NoneType"),
        # The core cannot encode it: an error escaped toolgate's tree.
        ({"include": ["\ud800"]}, r"include entries .*\(a lone surrogate at character 0\)"),
    ],
)
def test_bad_arguments_are_named(router: Router, kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        router.route("list my issues", **kwargs)


@pytest.mark.parametrize("config", [None, {"top_k": 3}])
def test_with_config_names_a_config_of_another_type(router: Router, config: Any) -> None:
    kind = type(config).__name__
    with pytest.raises(InvalidInputError, match=f"config must be a RouterConfig, got {kind}"):
        router.with_config(config)


@pytest.mark.parametrize("config", [{"top_k": 3}, {}, "fast"])
def test_from_tools_names_a_config_of_another_type(embedder: Embedder, config: Any) -> None:
    """A dict was read as settings it has no attributes for, and an empty one as no config."""
    kind = type(config).__name__
    with pytest.raises(
        InvalidInputError, match=f"config must be a RouterConfig or None, got {kind}"
    ):
        Router.from_tools(demo_catalog(), config=config, embedder=embedder, cache=None)


def test_learn_names_a_config_of_another_type(router: Router) -> None:
    with pytest.raises(InvalidInputError, match="config must be a LearnConfig or None, got dict"):
        router.with_config(router.config).learn(":memory:", config={"rate_per_tool": 1})


def test_empty_queries_are_rejected(router: Router) -> None:
    with pytest.raises(InvalidInputError, match="empty"):
        router.route("   ")
    with pytest.raises(InvalidInputError, match="names no tool"):
        router.route("select:")


@pytest.mark.parametrize("query", ["\u200b", "\u200e\u200f", " \ufeff\u2060 ", "\u00ad\u202e"])
def test_queries_of_invisible_characters_are_empty(router: Router, query: str) -> None:
    # A zero-width space or a direction mark shows nothing: routed, it would rank noise.
    with pytest.raises(InvalidInputError, match="empty"):
        router.route(query)
    with pytest.raises(InvalidInputError, match="names no tool"):
        router.route(f"select:\u200b,{query}")
    assert router.route(f"\u200b{query}list issues{query}").ids == router.route("list issues").ids


# Each public path argument, and the name its errors give it.
PATH_ENTRIES = [
    (lambda router, bad: router.save(bad), "the router directory"),
    (lambda router, bad: router.publish(bad), "the router directory"),
    (lambda router, bad: Router.open(bad), "the router directory"),
    (lambda router, bad: router.with_config(router.config).learn(bad), "store"),
    (lambda router, bad: Embedder(cache=bad), "cache"),
    (lambda router, bad: EmbeddingCache(bad), "path"),
    (lambda router, bad: JsonFileSink(bad), "path"),
    (lambda router, bad: UsageStats.from_log(bad), "path"),
    (lambda router, bad: load_queries(bad), "path"),
]


@pytest.mark.parametrize(("entry", "named"), PATH_ENTRIES)
def test_a_path_with_a_lone_surrogate_is_invalid_input(
    router: Router, tmp_path: Path, entry: Any, named: str
) -> None:
    # No file name holds one: said of the argument, not a bare UnicodeEncodeError.
    with pytest.raises(InvalidInputError, match=f"^{named} .*lone surrogate at character"):
        entry(router, str(tmp_path / "a\ud800"))


class _BytesPath:
    """A path-like object whose path is bytes, as os.scandir(b"...") entries are."""

    def __fspath__(self) -> bytes:
        return b"/tmp/a"


@pytest.mark.parametrize(("entry", "named"), PATH_ENTRIES)
def test_a_path_like_of_bytes_is_invalid_input(router: Router, entry: Any, named: str) -> None:
    # pathlib takes only str paths: said of the argument, not a bare TypeError.
    with pytest.raises(InvalidInputError, match=f"^{named} must be a path of str, got bytes"):
        entry(router, _BytesPath())


def test_a_path_of_undecodable_bytes_is_still_a_path(router: Router, tmp_path: Path) -> None:
    # os.fsdecode gives undecodable bytes (a Latin-1 name) as surrogates: they encode back.
    path = tmp_path / os.fsdecode(b"caf\xe9")
    router.save(path)
    assert Router.open(path).catalog.ids == router.catalog.ids


def test_signals_read_a_query_as_route_does(router: Router) -> None:
    """A lone surrogate (a reply cut in an emoji) is repaired for the signals as for route()."""
    cosine, sparse = router.signals("list my \ud800 issues")
    expected_cosine, expected_sparse = router.signals("list my \ufffd issues")
    assert np.array_equal(cosine, expected_cosine)
    assert np.array_equal(sparse, expected_sparse)
    with pytest.raises(InvalidInputError, match="query must be a str, got bytes"):
        router.signals(b"list my issues")  # type: ignore[arg-type]


def test_an_empty_path_is_refused(
    router: Router, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty path was the current directory (save, open) or SQLite's throwaway database
    (learn): a slip that wrote files, or lost what was learned, without a word."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="router directory is an empty path"):
        router.save("")
    with pytest.raises(InvalidInputError, match="router directory is an empty path"):
        Router.open("")
    with pytest.raises(InvalidInputError, match="router directory is an empty path"):
        router.refresh(router.catalog, path="")
    with pytest.raises(InvalidInputError, match="learned store is an empty path"):
        router.with_config(router.config).learn("")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", [None, 5, b"router"])
def test_a_path_of_another_type_is_refused(router: Router, path: Any) -> None:
    # Each was a bare TypeError from pathlib.
    for call in (router.save, Router.open, router.publish):
        with pytest.raises(InvalidInputError, match="router directory must be a path, got"):
            call(path)


def test_reopened_router_gives_the_same_answers(router: Router, tmp_path: Path) -> None:
    router.save(tmp_path / "copy")
    # Routing never needs the full catalog: a broken one fails only where it is read.
    catalog = tmp_path / "copy" / "catalog.json"
    tools = json.loads(catalog.read_text())
    tools["tools"][0]["description"] = "tampered"
    catalog.write_text(json.dumps(tools))
    reopened = Router.open(tmp_path / "copy")
    assert len(reopened) == len(router)
    for query in ["open an issue about the crash", "post to slack", "select:read_file"]:
        a, b = router.route(query), reopened.route(query)
        assert a.ids == b.ids
        assert a.scores == pytest.approx(b.scores)
    with pytest.raises(IndexFormatError, match="catalog"):
        _ = reopened.catalog


def test_open_rejects_broken_directories(router: Router, tmp_path: Path) -> None:
    with pytest.raises(IndexFormatError, match=r"router\.json"):
        Router.open(tmp_path)
    router.save(tmp_path / "r")
    manifest = tmp_path / "r" / "router.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "format": 99}))
    with pytest.raises(IndexIncompatibleError, match="format 99, written by a newer toolgate"):
        Router.open(tmp_path / "r")  # not damage: a newer toolgate may use it
    manifest.write_text(json.dumps({**data, "format": 0}))
    with pytest.raises(IndexFormatError, match="format 0") as raised:
        Router.open(tmp_path / "r")
    assert not isinstance(raised.value, IndexIncompatibleError)
    write_sealed(manifest, data)
    catalog = tmp_path / "r" / "catalog.json"
    tools = json.loads(catalog.read_text())
    tools["tools"][0]["description"] = "tampered"
    catalog.write_text(json.dumps(tools))
    reopened = Router.open(tmp_path / "r")  # the catalog loads on first use, not at open
    with pytest.raises(IndexFormatError, match=r"not the catalog router\.json was written with"):
        _ = reopened.catalog
    reseal(tmp_path / "r")  # past the file's checksum, the tool's own fingerprint is checked
    with pytest.raises(IndexFormatError, match="catalog"):
        _ = Router.open(tmp_path / "r").catalog


def test_from_tools_contract() -> None:
    tools = [
        {"name": "get_weather", "description": "Current weather for a city."},
        {"name": "send_email", "description": "Send an email to a recipient."},
    ]
    router = Router.from_tools(tools, cache=None)
    ids = router.route("email my boss", top_k=5).ids
    assert ids[0].endswith("/send_email")
    assert all("/" in i for i in ids)


_ISSUE = "Open a new issue in a GitHub repository, with a title and a body."
MIRRORED = {
    "github": {
        "tools": [
            {"name": "create_issue", "description": _ISSUE},
            {"name": "close_issue", "description": "Close an issue in a GitHub repository."},
            {"name": "list_issues", "description": "List the open issues of a GitHub repository."},
            {"name": "add_issue_comment", "description": "Comment on an issue in a repository."},
        ]
    },
    "github-mirror": {"tools": [{"name": "create_issue", "description": _ISSUE}]},
    "mail": {"tools": [{"name": "send_email", "description": "Send an email to someone."}]},
}


def test_a_near_copy_goes_below_the_different_tools_that_fit() -> None:
    plain = Router.from_tools(MIRRORED, cache=None, config=RouterConfig(near_copy_cosine=None))
    router = Router.from_tools(MIRRORED, cache=None)
    assert [g.ids for g in router.near_duplicates()] == [
        ("github/create_issue", "github-mirror/create_issue")
    ]
    query = "open a new issue in my repository"
    before = plain.route(query, top_k=6, adaptive=False)
    assert before.ids[:2] == ["github/create_issue", "github-mirror/create_issue"]
    assert all(tool.copy_of is None for tool in before.tools)

    after = router.route(query, top_k=6, adaptive=False)
    assert sorted(after.ids) == sorted(before.ids)  # moved, not dropped
    # Only a tool of the same name counts as a copy: the other issue tools are different.
    assert [(t.id, t.copy_of) for t in after.tools if t.copy_of] == [
        ("github-mirror/create_issue", "github/create_issue")
    ]
    copy = next(tool for tool in after.tools if tool.id == "github-mirror/create_issue")
    place = after.ids.index(copy.id)
    # Below every different tool scoring at least half its score, above the others.
    assert all(tool.score >= copy.score / 2 for tool in after.tools[:place])
    assert all(tool.score < copy.score / 2 for tool in after.tools[place + 1 :])
    assert place >= 3
    assert after.ids[-1] == "mail/send_email"
    # Telemetry records which tool was moved down as whose copy.
    event = RouteEvent.from_result(after)
    assert event.copies == {"github-mirror/create_issue": "github/create_issue"}
    # With fewer places, a copy gives its place to a different tool that fits.
    top3 = router.route(query, top_k=3, adaptive=False)
    assert top3.ids[0] == "github/create_issue"
    assert "github-mirror/create_issue" not in top3.ids
    assert len(top3) == 3
    # A tool included whatever its score counts as placed above: its copy goes down.
    included = router.route(
        "file a bug report", top_k=6, include=["github/create_issue"], adaptive=False
    )
    assert included.tools[0].reason == "included"
    mirror = next(t for t in included.tools if t.id == "github-mirror/create_issue")
    assert mirror.copy_of == "github/create_issue"


def test_one_router_many_threads_same_answers(router: Router) -> None:
    queries = [
        "open an issue about the flaky test",
        "weather in Oslo",
        "+github list commits",
        "select:read_file",
        "which tables hold orders",
        "find a free slot for the team",
    ] * 8
    expected = [(r.ids, r.scores) for r in map(router.route, queries)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = [(r.ids, r.scores) for r in pool.map(router.route, queries)]
    assert got == expected


def test_config_is_validated() -> None:
    with pytest.raises(InvalidInputError, match="alpha"):
        RouterConfig(alpha=1.5)
    for weight in (-0.5, float("nan"), float("inf")):
        with pytest.raises(InvalidInputError, match="clause_weight"):
            RouterConfig(clause_weight=weight)
    with pytest.raises(InvalidInputError, match="precision"):
        RouterConfig(precision="fp16")
    for cosine in (0.0, 1.5, float("nan"), True):
        with pytest.raises(InvalidInputError, match="near_copy_cosine must be a cosine in"):
            RouterConfig(near_copy_cosine=cosine)


class _CountingEmbedder:
    """Wraps the real embedder and records every text it is asked to embed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.texts: list[str] = []
        self.model_id = inner.model_id
        self.dim = inner.dim

    def embed(self, texts: list[str]) -> Any:
        self.texts.extend(texts)
        return self.inner.embed(texts)


MULTI_INTENT = "what's the forecast for Lisbon this weekend, and then add a dinner to my calendar"


def _fused_order(router: Router, dense: np.ndarray, sparse: np.ndarray, k: int) -> list[str]:
    """The ids ``route`` returns for these signals when no tool is named, pinned or gated."""
    config = router.config
    fused = _toolgate.fuse(
        dense, sparse, alpha=config.alpha, method=config.fusion, top=config.fusion_top
    )
    return [router.catalog.ids[row] for row in np.lexsort((np.arange(len(fused)), -fused))[:k]]


def test_clause_vectors_enter_the_fused_ranking(router: Router) -> None:
    router = router.with_config(replace(router.config, clause_fusion=0.0))  # the vectors alone
    result = router.route(MULTI_INTENT, top_k=10, state=_everything(router), adaptive=False)
    cosine, dense, sparse = router._scores(MULTI_INTENT)
    assert not np.array_equal(dense, cosine), "the query has two clauses"
    assert result.ids == _fused_order(router, dense, sparse, 10)
    rows = {tool_id: row for row, tool_id in enumerate(router.catalog.ids)}
    config = router.config
    options = {"alpha": config.alpha, "method": config.fusion, "top": config.fusion_top}
    routed = [rows[tool_id] for tool_id in result.ids]
    with_clauses = _toolgate.fuse(dense, sparse, **options)[routed]
    without = _toolgate.fuse(cosine, sparse, **options)[routed]
    assert result.scores == pytest.approx(with_clauses.tolist(), abs=1e-6)
    assert not np.allclose(with_clauses, without, atol=1e-3), "the clauses change the scores"
    for tool in result:  # the reported dense score stays the whole-query cosine
        assert tool.dense == pytest.approx(float(cosine[rows[tool.id]]), abs=1e-6)


def test_dense_signal_names_bad_input(router: Router, tmp_path: Path) -> None:
    cosine, _ = router.signals(MULTI_INTENT)
    clauses = np.ones((2, 384), dtype=np.float32)
    rows = np.random.default_rng(3).standard_normal((len(cosine), 384)).astype(np.float32)
    index = _toolgate.Index.build(tmp_path / "m.tgm", rows)
    with pytest.raises(InvalidInputError, match=r"clauses has shape \(2, 5\)"):
        _toolgate.dense_signal(index, cosine, np.ones((2, 5), dtype=np.float32), 1.0)
    fortran_order = np.asfortranarray(clauses)  # contiguous, but not row after row
    with pytest.raises(InvalidInputError, match="not C-contiguous"):
        _toolgate.dense_signal(index, cosine, fortran_order, 1.0)
    with pytest.raises(InvalidInputError, match="cosines for an index"):
        _toolgate.dense_signal(index, cosine[1:], clauses, 1.0)
    with pytest.raises(InvalidInputError, match="clause_weight"):
        _toolgate.dense_signal(index, cosine, clauses, float("nan"))
    with pytest.raises(InvalidInputError, match=r"cosine\[0\] is NaN"):
        _toolgate.dense_signal(index, np.full_like(cosine, np.nan), clauses, 1.0)


def test_clause_weight_zero_or_an_embedder_without_token_states_leaves_the_cosine(
    router: Router, embedder: Embedder
) -> None:
    # Names off too: this compares the route with the fused order alone.
    config = RouterConfig(clause_weight=0, clause_fusion=0, name_weight=0)
    off = Router.from_catalog(router.catalog, embedder=embedder, config=config)
    counting = _CountingEmbedder(embedder)
    plain = Router.from_catalog(
        router.catalog,
        embedder=counting,  # type: ignore[arg-type]
        cache=None,
        config=RouterConfig(name_weight=0),
    )
    for other in (off, plain):
        cosine, dense, sparse = other._scores(MULTI_INTENT)
        np.testing.assert_array_equal(dense, cosine)
        routed = other.route(MULTI_INTENT, top_k=10, state=_everything(other), adaptive=False).ids
        assert routed == _fused_order(other, cosine, sparse, 10)
    assert MULTI_INTENT in counting.texts


def test_only_the_last_few_long_texts_are_memoised(router: Router, embedder: Embedder) -> None:
    # The memo keeps the texts it holds: 1024 long prompts or tool results would stay.
    counting = _CountingEmbedder(embedder)
    plain = Router.from_catalog(router.catalog, embedder=counting, cache=None)  # type: ignore[arg-type]
    short = "list my open issues"
    longs = [f"{short} {n}" + " and more" * MEMO_CHARS for n in range(6)]
    for query in (short, *longs, short, longs[0], longs[-1]):
        plain.route(query)
    assert counting.texts.count(short) == 1
    assert counting.texts.count(longs[0]) == 2  # five long ones came after it
    assert counting.texts.count(longs[-1]) == 1  # a route reads its query twice, embeds it once


def test_a_huge_query_is_routed_on_what_the_model_reads(router: Router) -> None:
    # A pasted log as an MCP host's or a library caller's query: BM25 ranked all its words
    # on every route (seconds for 10 MB), where the gateway alone cut it to what the
    # embedder reads.
    text = "What's the weather in Lisbon tomorrow? " + "disk full, retrying write\n" * 10_000
    result = router.route(text)
    assert result.query == text[:PREFIX_CHARS]
    assert result.ids == router.route(text[:PREFIX_CHARS]).ids


def test_query_vectors_lists_each_public_name_it_defines() -> None:
    # The tests import MEMO_CHARS: a public name __all__ leaves out is hidden from star
    # imports and from what documentation tools list.
    from toolgate.routing import query_vectors

    tree = ast.parse(Path(query_vectors.__file__).read_text("utf-8"))
    defined = {
        name
        for node in tree.body
        for name in (
            [node.name]
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            else [
                t.id
                for t in getattr(node, "targets", [getattr(node, "target", None)])
                if isinstance(t, ast.Name)
            ]
        )
        if not name.startswith("_")
    }
    assert {"MEMO_CHARS", "QueryVectors", "wants_clauses"} <= defined
    assert set(query_vectors.__all__) == defined


def test_a_tool_whose_name_the_request_holds_moves_up_past_close_scores(router: Router) -> None:
    query = "search the news about rust"
    on = router.route(query, top_k=8, adaptive=False)
    off = router.with_config(replace(router.config, name_weight=0.0)).route(
        query, top_k=8, adaptive=False
    )
    assert router.config.name_weight > 0, "on by default"
    assert set(on.ids) == set(off.ids)
    # search_files holds half its name ("search"); get_issue, scored a little higher, none.
    assert off.ids.index("github/get_issue") < off.ids.index("filesystem/search_files")
    assert on.ids.index("filesystem/search_files") < on.ids.index("github/get_issue")
    # The head stays, and every tool keeps its own fused score.
    assert on.ids[:3] == off.ids[:3]
    assert dict(zip(on.ids, on.scores, strict=True)) == dict(zip(off.ids, off.scores, strict=True))


def test_calibrate_takes_another_name_weight_only_where_it_ranks_better(router: Router) -> None:
    off = router.with_config(replace(router.config, name_weight=0.0))
    # search_files holds half its name; at 0 the fused order puts it fifth.
    named = [LabelledQuery("1", "search the news about rust", ("filesystem/search_files",))]
    # One query tells no gain from noise: z=0 leaves the margin alone to judge.
    weight, points, notes = fit_name_weight(off, named, top_k=5, z=0.0)
    assert [p.name_weight for p in points] == [0.0, 0.4, 0.6]
    assert weight > 0
    assert notes == ()
    chosen = next(p for p in points if p.name_weight == weight)
    assert chosen.ndcg >= points[0].ndcg + 0.005
    # Where the weights rank alike, the router's own stays.
    plain = [LabelledQuery("2", "what is the weather in Lisbon", ("weather/get_current_weather",))]
    assert fit_name_weight(router, plain, top_k=5)[0] == router.config.name_weight


def test_calibrate_keeps_the_name_weight_when_one_query_carries_the_gain(router: Router) -> None:
    """The margin alone took a value that one query's rank swap lifted over it (30-60
    MetaTool queries: alpha 0.6 and centring 0 for +0.012 in-sample, held-out nDCG fell)."""
    off = router.with_config(replace(router.config, name_weight=0.0))
    named = LabelledQuery("1", "search the news about rust", ("filesystem/search_files",))
    plain = [
        LabelledQuery(str(i), "what is the weather in Lisbon", ("weather/get_current_weather",))
        for i in range(2, 6)
    ]
    # Only the name weight is fitted: the router's own alpha, no server signal to gain.
    report = calibrate(off, [named, *plain], top_k=5, alphas=(), selection=False, centring=False)
    points = {p.name_weight: p.ndcg for p in report.name_curve}
    assert max(points.values()) >= points[0.0] + 0.005, "the gain beats the margin"
    assert report.config.name_weight == 0.0
    note = next(n for n in report.notes if n.startswith("name_weight not fitted"))
    # One winner among n queries is exactly 1 standard error: never significant.
    assert "on 5 queries with gold, only 1 standard errors" in note
    assert "kept the router's own (0.0)" in note


@pytest.mark.parametrize("weight", [-0.1, float("nan"), float("inf"), True, "0.4"])
def test_a_bad_name_weight_is_refused(weight: object) -> None:
    with pytest.raises(InvalidInputError, match="name_weight must be a finite number >= 0"):
        RouterConfig(name_weight=weight)  # type: ignore[arg-type]


# The words of the second clause name read_file, but the blended vector leans to Slack.
READ_THEN_POST = (
    "read the quarterly report file from my home folder, then post a short summary of it to "
    "the team channel on slack"
)


def test_each_long_clause_fused_on_its_own_lifts_the_second_intents_tool(
    router: Router,
) -> None:
    off = router.with_config(replace(router.config, clause_fusion=0.0))
    assert router.config.clause_fusion > 0, "on by default"

    def share(routed: Router) -> float:
        """read_file's score as a share of the best tool's: where it stands against Slack."""
        result = routed.route(READ_THEN_POST, top_k=10, adaptive=False)
        return result.tools[result.ids.index("filesystem/read_file")].score / result.scores[0]

    assert share(router) > share(off) + 0.05
    # Clauses under six words are fragments, not intents: the same words, cut short, score
    # as they do without clause fusion (which adds to every row's score when it applies).
    short = "read the report file, then post it to slack"
    assert len(router._pipeline.query_vectors.clause_texts(short)) == 2
    on = router.route(short, top_k=4, adaptive=False)
    assert on.scores == off.route(short, top_k=4, adaptive=False).scores
    long = off.route(READ_THEN_POST, top_k=4, adaptive=False).scores
    assert router.route(READ_THEN_POST, top_k=4, adaptive=False).scores[0] > long[0]


def test_clause_fusion_is_checked_and_saved_with_the_router(tmp_path: Path) -> None:
    for weight in (-0.5, float("nan"), float("inf"), "0.5"):
        with pytest.raises(InvalidInputError, match="clause_fusion must be a finite number >= 0"):
            RouterConfig(clause_fusion=weight)  # type: ignore[arg-type]
    config = RouterConfig(clause_fusion=0.25)
    Router.from_catalog(demo_catalog(), config=config, path=tmp_path, cache=None)
    saved = json.loads((tmp_path / "router.json").read_text())["config"]
    assert saved["clause_fusion"] == 0.25
    assert Router.open(tmp_path).config == config


def test_refresh_embeds_only_what_changed(router: Router, embedder: Embedder) -> None:
    counting = _CountingEmbedder(embedder)
    base = Router.from_catalog(router.catalog, embedder=counting, cache=None)  # type: ignore[arg-type]
    # Two views per tool (name/summary/parameters, and the whole description).
    assert len(counting.texts) == 2 * len(router.catalog)
    counting.texts.clear()
    changed = [
        {"name": "get_forecast", "description": "Hourly and daily forecast for any city."},
        {"name": "get_uv_index", "description": "Ultraviolet index for a city."},
    ]
    refreshed = base.replace_server("weather", changed)
    assert len(counting.texts) == 4  # two views each of the changed forecast and the UV tool
    assert "weather/get_current_weather" not in refreshed.catalog
    assert "weather/get_uv_index" in refreshed.catalog
    assert refreshed.route("UV index in Madrid", top_k=1).ids == ["weather/get_uv_index"]
    # Unchanged tools were read back, not embedded, and every row is centred on the new
    # catalog: the router scores as one built on it does.
    built = Router.from_catalog(refreshed.catalog, embedder=embedder, cache=None)
    query = "which tables hold orders"
    after = {t.id: t.dense for t in refreshed.route(query, top_k=5)}
    fresh = {t.id: t.dense for t in built.route(query, top_k=5)}
    assert after.keys() == fresh.keys()
    assert all(abs(after[key] - fresh[key]) < 1e-4 for key in after)


def test_refresh_takes_what_from_tools_takes_and_returns_a_new_router(
    embedder: Embedder, tmp_path: Path
) -> None:
    weather = [{"name": "get_weather", "description": "Current weather for a city."}]
    document = {"wx": {"tools": weather}}
    router = Router.from_tools(document, cache=None, embedder=embedder)
    more = [*weather, {"name": "get_forecast", "description": "The forecast for a city."}]
    refreshed = router.refresh({"wx": {"tools": more}})
    assert refreshed is not router
    assert router.catalog.ids == ["wx/get_weather"]  # this router is left as it was
    assert refreshed.catalog.ids == ["wx/get_weather", "wx/get_forecast"]
    # A list and a file, read with the same server rule as from_tools.
    assert router.refresh(more, server="wx").catalog.ids == refreshed.catalog.ids
    assert router.refresh(more).catalog.ids == ["default/get_weather", "default/get_forecast"]
    path = tmp_path / "wx.tools.json"
    path.write_text(json.dumps({"tools": more}))
    assert router.refresh(path).catalog.ids == refreshed.catalog.ids
    with pytest.raises(InvalidInputError, match="server= and lenient= apply to tools being read"):
        router.refresh(refreshed.catalog, server="wx")


def test_refresh_re_embeds_what_an_older_tool_text_embedded(
    router: Router, embedder: Embedder, tmp_path: Path
) -> None:
    counting = _CountingEmbedder(embedder)
    Router.from_catalog(router.catalog, path=tmp_path / "r", embedder=counting, cache=None)  # type: ignore[arg-type]
    manifest = tmp_path / "r" / "router.json"
    data = json.loads(manifest.read_text())
    assert data["text_version"] == TEXT_VERSION
    del data["text_version"]  # a router saved before the version was recorded
    write_sealed(manifest, data)
    counting.texts.clear()
    old = Router.open(tmp_path / "r", embedder=counting)  # type: ignore[arg-type]
    old.refresh(router.catalog)  # the same tools: all embedded again, from today's text
    assert len(counting.texts) == 2 * len(router.catalog)
    data["text_version"] = "2"
    write_sealed(manifest, data)
    with pytest.raises(IndexFormatError, match="text_version '2' is not an integer"):
        Router.open(tmp_path / "r")


def test_every_github_tool_found_by_its_exact_name() -> None:
    path = DATA / "catalogs" / "github-mcp-server.tools-list.json"
    require(path)
    router = Router.from_catalog(Catalog.load(path), cache=None)
    missing = [t.id for t in router.catalog if t.id not in router.route(t.name, top_k=3).ids]
    assert missing == []


def test_from_tools_takes_a_multi_server_document() -> None:
    document = {
        "wx": {"tools": [{"name": "get_weather", "description": "Weather for a city."}]},
        "mail": {"tools": [{"name": "send_email", "description": "Send an email."}]},
    }
    router = Router.from_tools(document, cache=None)
    assert sorted(router.catalog.ids) == ["mail/send_email", "wx/get_weather"]
    # server= names only the tools whose document names none.
    assert Router.from_tools(document, server="x", cache=None).catalog.ids == router.catalog.ids
    with pytest.raises(CatalogError, match="tools"):
        Router.from_tools(["not a tool"], cache=None)


def test_promote_sends_definitions_as_given_when_asked(embedder: Embedder) -> None:
    schema = {
        "$comment": "generated",
        "type": "object",
        "title": "lookupArguments",
        "properties": {"key": {"type": "string", "title": "Key"}},
        "required": [],
    }
    given = {"kv": {"tools": [{"name": "lookup", "description": "Look up a key.",
                               "inputSchema": schema}]}}  # fmt: skip
    router = Router.from_tools(given, embedder=embedder, cache=None)
    result = router.route("select:lookup")
    as_given = router.promote(result, compact=False, pool="none").tools[0]
    compacted = router.promote(result, pool="none").tools[0]
    assert as_given["function"]["parameters"] == schema
    assert "title" not in compacted["function"]["parameters"]


def test_a_required_term_asks_for_a_tool(router: Router) -> None:
    # A floor the decision passes here, so that "no tool" would answer the chit-chat.
    eager = router.with_config(replace(router.config, no_tool_threshold=0.5))
    assert eager.route("ok thanks").no_tool
    result = eager.route("+slack ok thanks")
    assert not result.no_tool  # "+slack" asks for a slack tool, as naming one does
    assert result.ids
    assert all(tool_id.startswith("slack/") for tool_id in result.ids)


def test_routers_given_no_embedder_share_one_model_freed_with_the_last(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import gc
    import weakref

    from toolgate.routing import build

    # A key of this test's own: another test's router may still hold the usual one.
    monkeypatch.setattr(build, "toolgate_home", lambda: tmp_path)
    first = Router.from_catalog(demo_catalog(), cache=None)
    second = Router.from_catalog(demo_catalog(), cache=None)
    model = first._pipeline.query_vectors.embedder
    assert second._pipeline.query_vectors.embedder is model
    gone = weakref.ref(model)
    del first, second, model
    gc.collect()
    assert gone() is None


def test_results_hash_as_they_compare(router: Router) -> None:
    """Frozen results go in sets and dict keys: they hashed their dict fields (timings, token
    counts, a call's arguments), a TypeError, and a verdict only when it passed."""
    result = router.route("open an issue about the flaky login test")
    promotion = router.promote(result)
    passed = Verdict(True, tool_id="github/create_issue", arguments={"labels": ["bug"]})
    for value in (result, promotion, promotion.decision, passed, Verdict(False, "unknown_tool")):
        twin = copy.deepcopy(value)  # equal, with dicts of its own
        assert twin == value
        assert hash(twin) == hash(value)
        assert len({value, twin}) == 1
    assert hash(passed) != hash(replace(passed, tool_id="github/get_issue"))
