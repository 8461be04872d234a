"""Learning from use: feedback, forgetting, the bounds, the lift, and a hostile flood; every
store test runs on SQLite and on a real throwaway PostgreSQL server."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import re
import time
import tracemalloc
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import toolgate
from tests.fixtures.postgres import postgres_server
from toolgate import InvalidInputError
from toolgate.catalog.catalog import Catalog
from toolgate.cli.commands import demo_catalog
from toolgate.embedding.embedder import Embedder
from toolgate.routing import learned_postgres, learned_store
from toolgate.routing.co_use import CO_USE_MAX_TOOLS, CoUse
from toolgate.routing.feedback import LearnConfig
from toolgate.routing.learned_postgres import PostgresStore
from toolgate.routing.learned_store import (
    LearnedStore,
    SqliteStore,
    StoreError,
    StoreWarning,
    open_store,
    query_key,
)
from toolgate.routing.router import Router
from toolgate.telemetry.recorder import Telemetry
from toolgate.telemetry.sinks import MemorySink

QUERY = "please do the thing with my repository tickets"
TARGET = "search/search_news"  # far from QUERY in the ranking before learning


@pytest.fixture(scope="module")
def router(embedder: Embedder) -> Router:
    return Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with postgres_server() as address:
        yield address


@pytest.fixture(params=["sqlite", "postgres"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The address of an empty store of each kind."""
    if request.param == "sqlite":
        yield str(tmp_path_factory.mktemp("learned") / "learned.sqlite3")
        return
    address = request.getfixturevalue("postgres")
    import psycopg

    with psycopg.connect(address, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS learned, learned_versions, learned_meta")
    yield address


@pytest.fixture
def learner(router: Router, store: str) -> Iterator[Router]:
    router.learn(store)
    yield router
    router._pipeline.learning.memory = None


def rank_of(router: Router, query: str, tool: str, k: int = 10) -> int | None:
    ids = router.route(query, top_k=k, adaptive=False).ids
    return ids.index(tool) if tool in ids else None


def test_feedback_lifts_the_tool_for_that_request_and_like_ones(learner: Router) -> None:
    like = "do the thing with the tickets of my repository"
    before = rank_of(learner, QUERY, TARGET, k=36)  # the store is empty yet
    assert before is not None
    assert before > 4, before
    before_like = rank_of(learner, like, TARGET, k=36)
    assert learner.feedback(QUERY, used=[TARGET]) == 1
    result = learner.route(QUERY, top_k=5, adaptive=False)
    assert TARGET in result.ids
    assert dict(zip(result.ids, (t.reason for t in result.tools), strict=True))[TARGET] == "learned"
    after_like = rank_of(learner, like, TARGET, k=36)
    assert before_like is not None
    assert after_like is not None
    assert after_like < before_like


def test_memory_is_kept_in_the_store_and_read_by_another_router(
    learner: Router, store: str, embedder: Embedder
) -> None:
    learner.feedback(QUERY, missed=[TARGET])
    other = Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)
    memory = other.learn(store)
    assert len(memory) == 1
    assert TARGET in other.route(QUERY, top_k=5, adaptive=False).ids


def test_no_query_text_is_stored(learner: Router, store: str) -> None:
    learner.feedback(QUERY, used=[TARGET])
    rows = open_store(store).load(learner.memory.scope)  # type: ignore[union-attr]
    assert [row.tool for row in rows] == [TARGET]
    assert rows[0].key == query_key(QUERY)
    assert QUERY.encode() not in rows[0].key
    assert rows[0].vector.shape == (384,)


def test_a_repeated_query_adds_weight_not_rows(learner: Router) -> None:
    for _ in range(5):
        learner.feedback(QUERY, used=[TARGET])
    memory = learner.memory
    assert memory is not None
    assert len(memory) == 1
    assert memory._rows.weights.tolist() == [memory.config.max_weight]


def test_forget_a_tool_and_a_server(learner: Router, store: str) -> None:
    learner.feedback(QUERY, used=[TARGET, "github/list_issues"])
    learner.feedback("book a table for two", used=["slack/post_message"])
    assert learner.forget(tool=TARGET) == 1
    assert TARGET not in learner.route(QUERY, top_k=5, adaptive=False).ids
    assert learner.forget(server="github") == 1
    memory = learner.memory
    assert memory is not None
    assert [row.tool for row in open_store(store).load(memory.scope)] == ["slack/post_message"]
    with pytest.raises(InvalidInputError, match="one of tool= or server="):
        learner.forget()


def test_feedback_after_another_replicas_forget_is_stored_again(
    learner: Router, store: str, embedder: Embedder
) -> None:
    learner.feedback(QUERY, used=[TARGET])
    replica = Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)
    replica.learn(store).forget(tool=TARGET)
    learner.feedback(QUERY, used=[TARGET])  # its memory still holds the forgotten row
    memory = learner.memory
    assert memory is not None
    rows = open_store(store).load(memory.scope)
    assert [(row.tool, row.weight) for row in rows] == [(TARGET, 1.0)]
    assert memory._seqs == [rows[0].seq]


def test_a_replica_reads_what_another_learned_and_forgot(
    learner: Router, store: str, embedder: Embedder
) -> None:
    replica = Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)
    memory = replica.learn(store, config=LearnConfig(reload_s=60.0))
    learner.feedback(QUERY, used=[TARGET])
    assert TARGET not in replica.route(QUERY, top_k=5, adaptive=False).ids
    later = memory._clock() + 60.0
    assert memory.keep_fresh(later - 1.0) is None  # not due: routes read no store
    memory.keep_fresh(later).join()  # type: ignore[union-attr]
    assert TARGET in replica.route(QUERY, top_k=5, adaptive=False).ids
    learner.forget(tool=TARGET)  # forgotten on one replica: on every one, a reload later
    memory.keep_fresh(later + 60.0).join()  # type: ignore[union-attr]
    assert len(memory) == 0
    assert TARGET not in replica.route(QUERY, top_k=5, adaptive=False).ids


def test_damaged_rows_are_skipped_with_one_warning(
    learner: Router, store: str, embedder: Embedder
) -> None:
    learner.feedback(QUERY, used=[TARGET])
    memory = learner.memory
    assert memory is not None
    sound = b"\x01" * 384
    damaged: list[tuple[bytes, Any, Any]] = [
        (b"\x01" * 10, 0.1, 1.0),
        (sound, float("inf"), 1.0),
        # Finite as the store's 64-bit floats, not as the index's 32-bit ones.
        (sound, 1e39, 1.0),
        (sound, 0.1, 1e300),
        # Codes of 127 times this scale are past float32's range.
        (b"\x7f" * 384, 3e38, 1.0),
    ]
    if not store.startswith("postgresql://"):  # a PostgreSQL column holds no text scale
        damaged.append((sound, "abc", 1.0))
    raw = open_store(store)
    sql = raw._sql(
        "INSERT INTO learned (scope, tool, server, query_key, codes, scale, weight, at) "
        "VALUES (?, ?, 'search', ?, ?, ?, ?, 0.0)"
    )
    for codes, scale, weight in damaged:
        raw._insert(sql, (memory.scope, TARGET, b"k" * 16, codes, scale, weight))
    replica = Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)
    with pytest.warns(StoreWarning, match=f"skipped {len(damaged)} damaged rows") as caught:
        replica_memory = replica.learn(store)
    assert len(caught) == 1
    assert repr(raw) in str(caught[0].message)
    assert len(replica_memory) == 1
    assert replica.feedback("book a table for two", used=["slack/post_message"]) == 1


def test_bounds_evict_the_oldest(router: Router, store: str) -> None:
    config = LearnConfig(rows_per_tool=3, max_rows=5)
    memory = router.learn(store, config=config)
    try:
        for n in range(6):
            router.feedback(f"find news about topic number {n}", used=[TARGET])
        assert len(memory) == 3
        for n in range(4):
            router.feedback(f"list my open issues, page {n}", used=["github/list_issues"])
        assert len(memory) == 5
        assert len(open_store(store).load(memory.scope)) == 5
        counts = dict(zip(*np.unique(memory._rows.tools, return_counts=True), strict=True))
        assert sorted(counts.values()) == [2, 3]
    finally:
        router._pipeline.learning.memory = None


def test_a_flood_across_many_tools_evicts_from_the_fullest_first(
    router: Router, store: str
) -> None:
    """A flood spread over many tools (each within its rate cap) fills ``max_rows``: the rows
    evicted are of the tools holding the most, so a tool with few lessons keeps them."""
    config = LearnConfig(rows_per_tool=4, max_rows=12, rate_per_tool=1e9)
    memory = router.learn(store, config=config)
    quiet = "weather/get_forecast"
    flooded = ["slack/post_message", "github/create_issue", "filesystem/read_file",
               "calendar/list_events", "postgres/run_query"]  # fmt: skip
    try:
        for n in range(2):  # the oldest rows of all
            router.feedback(f"will it rain in Lisbon on day {n}", used=[quiet])
        for n in range(6):
            for tool in flooded:
                router.feedback(f"flood {n} for {tool}", used=[tool])
        stored = [row.tool for row in open_store(store).load(memory.scope)]
        assert len(memory) == len(stored) == 12
        assert stored.count(quiet) == 2  # kept: the flooded tools gave up their rows
        assert [stored.count(tool) for tool in flooded] == [2] * len(flooded)
    finally:
        router._pipeline.learning.memory = None


def _version(n: int) -> Catalog:
    """The demo catalog with one description edited: a version of its own for each ``n``."""
    document = json.loads((Path(toolgate.__file__).parent / "data/demo_catalog.json").read_text())
    document["github"]["tools"][0]["description"] += f" (version {n})"
    return Catalog.load(document)


class _Memory:
    """Stands for a memory that uses a scope."""


def _stored_scopes(store: str) -> set[str]:
    return {scope for (scope,) in open_store(store)._execute("SELECT DISTINCT scope FROM learned")}


def test_the_store_keeps_the_rows_of_the_most_recent_versions(router: Router, store: str) -> None:
    current = router.refresh(_version(0))
    current.learn(store, config=LearnConfig(max_versions=2))
    scopes = []
    for n in range(1, 5):
        current.feedback(QUERY, used=[TARGET])
        scopes.append(current.memory.scope)  # type: ignore[union-attr]
        current = current.refresh(_version(n))  # the memory follows, to the new version
        gc.collect()  # the router of the version before is gone
    current.feedback(QUERY, used=[TARGET])
    scopes.append(current.memory.scope)  # type: ignore[union-attr]
    assert len(set(scopes)) == 5
    assert _stored_scopes(store) == set(scopes[-2:])


def test_no_version_a_router_of_this_process_learns_with_is_pruned(
    router: Router, store: str
) -> None:
    config = LearnConfig(max_versions=1)
    older, old = router.refresh(_version(1)), router.refresh(_version(2))
    for each in (older, old):
        each.learn(store, config=config)  # a store opened for each, as replicas would
        each.feedback(QUERY, used=[TARGET])
    kept = {older.memory.scope, old.memory.scope}  # type: ignore[union-attr]
    new = router.refresh(_version(3))
    new.learn(store, config=config)
    assert _stored_scopes(store) == kept
    del older
    gc.collect()
    router.refresh(_version(4)).learn(store, config=config)
    assert _stored_scopes(store) == {old.memory.scope}  # type: ignore[union-attr]


def test_a_version_another_process_uses_is_kept_while_its_lease_runs(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    replica, here = open_store(store), open_store(store)
    now = time.time()
    monkeypatch.setattr(learned_store, "_holder", "another process")
    # Its memory of v1 (dropped at once here, where it would count as this process's).
    assert replica.use("model@v1", _Memory(), keep=1, lease_s=60.0, now=now) == []
    vector = np.ones(384, np.float32)
    replica.insert("model@v1", TARGET, "search", b"k" * 16, vector, now + 30.0)  # renews it
    monkeypatch.undo()
    assert here.use("model@v2", _Memory(), keep=1, lease_s=60.0, now=now + 89.0) == []
    assert "model@v1" in here.use("model@v3", _Memory(), keep=1, lease_s=60.0, now=now + 91.0)
    assert replica.load("model@v1") == []


def test_two_stores_of_one_process_on_one_file_keep_each_others_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative, absolute = SqliteStore("learned.sqlite3"), SqliteStore(tmp_path / "learned.sqlite3")
    held, now = _Memory(), time.time()
    absolute.use("model@held", held, keep=1, lease_s=60.0, now=now)
    absolute.insert("model@held", TARGET, "search", b"k" * 16, np.ones(384, np.float32), now)
    assert relative.use("model@newer", _Memory(), keep=1, lease_s=60.0, now=now + 1.0) == []
    assert len(absolute.load("model@held")) == 1


def test_a_store_keeps_nothing_of_the_versions_its_dropped_memories_held() -> None:
    # A gateway that learns opens a memory for each distinct tools array it is sent (a
    # catalog version each) and drops it with the array's router: a store serving it for
    # days must not keep something of every version it ever saw.
    store = SqliteStore(":memory:")

    def open_and_drop(n: int) -> None:
        store.use(f"model@v{n}", _Memory(), keep=4, lease_s=60.0, now=float(n))

    for n in range(50):  # statements prepared, first allocations made
        open_and_drop(n)
    tracemalloc.start()
    try:
        for n in range(50, 2_050):
            open_and_drop(n)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 50_000  # not a record per version (2,000 of them, 200 bytes or more each)


class _FailingMarks(SqliteStore):
    """A store whose marks of use fail while ``failing`` (a full disk, a lock timeout)."""

    failing = False

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]]:
        with super()._transaction() as run:

            def marking(sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
                if self.failing and sql.startswith("INSERT INTO learned_versions"):
                    raise StoreError("the disk is full")
                return run(sql, args)

            yield marking


def _learn_one(store: LearnedStore, at: float) -> int:
    return store.insert("model@v1", TARGET, "search", b"k" * 16, np.ones(384, np.float32), at)


def test_a_row_stored_is_not_failed_by_its_marks_renewal() -> None:
    store = _FailingMarks(":memory:")
    store.use("model@v1", _Memory(), keep=8, lease_s=60.0, now=0.0)
    store.failing = True
    assert _learn_one(store, 30.0) == 1
    assert len(store.load("model@v1")) == 1


def test_a_failed_renewal_is_tried_again_with_the_next_row() -> None:
    store = _FailingMarks(":memory:")
    store.use("model@v1", _Memory(), keep=8, lease_s=60.0, now=0.0)
    store.failing = True
    with contextlib.suppress(StoreError):  # the old code raised it here
        _learn_one(store, 30.0)
    store.failing = False
    _learn_one(store, 31.0)
    assert store._execute("SELECT used_at FROM learned_versions") == [(31.0,)]


def test_a_version_stamped_far_ahead_is_pruned_in_its_turn(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process whose clock read a year ahead (set right since) marked a version and learned
    # a row in it: the mark never expired and the row ranked it the most recent for a year,
    # so it stayed and took a slot from a version really used.
    now, year = time.time(), 365 * 86_400.0
    _as_another_process(monkeypatch, "a process a year ahead")
    ahead = open_store(store)
    ahead.use("model@v1", _Memory(), keep=8, lease_s=60.0, now=now + year)
    _learn_one(ahead, now + year)
    _as_another_process(monkeypatch, "a process on time")
    here = open_store(store)
    assert here.use("model@v2", _Memory(), keep=1, lease_s=60.0, now=now) == ["model@v1"]
    assert here.load("model@v1") == []


def test_a_clock_stepped_back_renews_its_marks_at_once() -> None:
    # Else the renewal waited until the clock read its last due time again: for a clock
    # stepped back a year, a year without marks, which the others now expire.
    store, held = SqliteStore(":memory:"), _Memory()
    store.use("model@v1", held, keep=8, lease_s=60.0, now=1000.0)
    renewal = store.keep_alive(1000.0 - 3600.0)
    assert renewal is not None
    renewal.join(timeout=30)
    assert store._execute("SELECT used_at FROM learned_versions") == [(-2600.0,)]
    _learn_one(store, -5000.0)  # a row learned after another step back renews it too
    assert store._execute("SELECT used_at FROM learned_versions") == [(-5000.0,)]


def test_ranking_the_versions_reads_no_row_of_the_table() -> None:
    # It runs under the write lock at every memory's open: a scan took 25 ms at 160k rows.
    store = SqliteStore(":memory:")
    plan = store._execute("EXPLAIN QUERY PLAN " + learned_store._BY_RECENT_USE, (0.0,))
    assert [step for step in plan if str(step[-1]).split()[:2] == ["SCAN", "learned"]] == []


def _as_another_process(monkeypatch: pytest.MonkeyPatch, holder: str) -> None:
    """What follows runs as another process would: another holder, none of these memories."""
    monkeypatch.setattr(learned_store, "_holder", holder)
    monkeypatch.setattr(learned_store, "_in_use", weakref.WeakKeyDictionary())


def test_a_version_a_memory_only_routes_on_keeps_its_lease(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, held, now = open_store(store), _Memory(), time.time()
    here.use("model@v1", held, keep=1, lease_s=60.0, now=now)
    assert here.keep_alive(now + 10.0) is None  # not due: a route only compares times
    renewal = here.keep_alive(now + 45.0)  # routing, learning nothing
    assert renewal is not None
    renewal.join(timeout=30)
    _as_another_process(monkeypatch, "another process")
    other = open_store(store)
    assert other.use("model@v2", _Memory(), keep=1, lease_s=60.0, now=now + 100.0) == []


class _Routed(SqliteStore):
    """Counts the routes that asked to keep its leases alive."""

    routes = 0

    def keep_alive(self, now: float) -> None:
        self.routes += 1


def test_a_route_keeps_its_memorys_lease_alive(router: Router) -> None:
    store = _Routed(":memory:")
    router.learn(store)
    try:
        router.route(QUERY, top_k=3)
        assert store.routes == 1
    finally:
        router._pipeline.learning.memory = None


def test_a_replica_whose_clock_runs_ahead_prunes_no_version_in_use(
    postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS learned, learned_versions, learned_meta")
    now = time.time()
    _as_another_process(monkeypatch, "a replica on time")
    on_time = PostgresStore(postgres)
    on_time.use("model@v1", _Memory(), keep=1, lease_s=60.0, now=now)
    on_time.insert("model@v1", TARGET, "search", b"k" * 16, np.ones(384, np.float32), now)
    _as_another_process(monkeypatch, "a replica an hour ahead")
    monkeypatch.setattr(learned_postgres, "_now", lambda: time.time() + 3600.0)
    ahead = PostgresStore(postgres)
    assert ahead.use("model@v2", _Memory(), keep=1, lease_s=60.0, now=now + 3600.0) == []


def test_a_replica_whose_clock_is_set_right_after_it_connected_prunes_no_version_in_use(
    postgres: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A machine that boots a day ahead and connects before NTP steps its clock back: an
    # offset measured on the old reading made every mark of its a day old, so another
    # replica pruned the version it was using, and the rows it learned there with it.
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as db:
        db.execute("DROP TABLE IF EXISTS learned, learned_versions, learned_meta")
    ahead = [86_400.0]
    monkeypatch.setattr(learned_postgres, "_now", lambda: time.time() + ahead[0])
    _as_another_process(monkeypatch, "a replica set right")
    set_right, held = PostgresStore(postgres), _Memory()
    ahead[0] = 0.0  # NTP steps the clock back a day
    set_right.use("model@v1", held, keep=1, lease_s=60.0, now=time.time())
    _learn_one(set_right, time.time())
    _as_another_process(monkeypatch, "a replica on time")
    on_time = PostgresStore(postgres)
    assert on_time.use("model@v2", _Memory(), keep=1, lease_s=60.0, now=time.time()) == []
    assert len(on_time.load("model@v1")) == 1


def test_rate_cap_refuses_a_flood(router: Router) -> None:
    clock = [0.0]
    memory = router.learn(":memory:", config=LearnConfig(rate_per_tool=10))
    memory._clock = lambda: clock[0]
    try:
        recorded = sum(router.feedback(f"news item {n}", used=[TARGET]) for n in range(50))
        assert recorded == 10
        assert memory.refused == 40
        clock[0] += 60.0  # a minute later the bucket is full again
        assert router.feedback("news item again", used=[TARGET]) == 1
    finally:
        router._pipeline.learning.memory = None


def test_a_flood_for_one_tool_moves_no_unrelated_route(router: Router) -> None:
    """A hostile caller floods one tool with feedback for many requests of its own: routes
    for unrelated requests keep their better-matching tools above it."""
    unrelated = [
        "what's the weather forecast for Lisbon this weekend?",
        "post a message to the #general channel",
        "read the file README.md in my project",
    ]
    before = {query: router.route(query, top_k=5, adaptive=False).ids for query in unrelated}
    memory = router.learn(":memory:", config=dataclasses.replace(LearnConfig(), rate_per_tool=1e9))
    try:
        flood = [f"{word} news" for word in ("latest", "breaking", "today's", "world", "tech")]
        for _ in range(40):
            for query in flood:
                router.feedback(query, used=[TARGET])
        assert len(memory) == len(flood)
        for query in unrelated:
            after = router.route(query, top_k=5, adaptive=False).ids
            assert after[0] == before[query][0] != TARGET
            if TARGET in after:
                assert after.index(TARGET) > 0
        assert router.route("latest news", top_k=5, adaptive=False).ids[0] == TARGET
    finally:
        router._pipeline.learning.memory = None


ISSUES = "github/list_issues"
SLOTS = "calendar/find_free_slots"  # far down the ranking of an issue query
ISSUE_QUERY = "list the open issues in my repository"


def test_tools_used_together_lift_each_other(
    learner: Router, store: str, embedder: Embedder
) -> None:
    before = rank_of(learner, ISSUE_QUERY, SLOTS, k=30)
    assert before is not None
    assert before > 8, before
    # Requests far from ISSUE_QUERY: no stored query is near it, so no nearest-query lift.
    learner.feedback("weekly triage report", used=[ISSUES, SLOTS])
    assert rank_of(learner, ISSUE_QUERY, SLOTS, k=30) == before  # one request is no pattern
    learner.feedback("standup digest for the team", used=[ISSUES, SLOTS])
    result = learner.route(ISSUE_QUERY, top_k=5, adaptive=False)
    assert result.ids[0] == ISSUES
    assert (SLOTS, "co-used") in [(t.id, t.reason) for t in result.tools]
    # Only where a tool it was used with is among the route's best.
    weather = "what's the air quality in Oslo"
    assert SLOTS not in learner.route(weather, top_k=5, adaptive=False).ids
    other = Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)
    other.learn(store)  # another replica reads the pairs from the store
    assert SLOTS in other.route(ISSUE_QUERY, top_k=5, adaptive=False).ids
    learner.forget(tool=SLOTS)
    assert rank_of(learner, ISSUE_QUERY, SLOTS, k=30) == before


def test_an_opened_router_learns_pairs_without_reading_its_catalog(
    tmp_path: Path, embedder: Embedder
) -> None:
    Router.from_catalog(demo_catalog(), path=tmp_path / "router", cache=None, embedder=embedder)
    store = str(tmp_path / "learned.sqlite3")
    writer = Router.open(tmp_path / "router", embedder=embedder)
    writer.learn(store)
    for request in ("weekly triage report", "standup digest for the team"):
        writer.feedback(request, used=[ISSUES, SLOTS])
    (tmp_path / "router" / "catalog.json").unlink()  # routing never needs it
    reader = Router.open(tmp_path / "router", embedder=embedder)
    reader.learn(store)
    assert SLOTS in reader.route(ISSUE_QUERY, top_k=5, adaptive=False).ids


def test_co_use_counts_only_tools_of_other_names_in_small_requests() -> None:
    names = ["search", "search", "fetch", *(f"t{n}" for n in range(10))]
    co_use = CoUse(names.__getitem__)
    for key, row in [(b"a", 0), (b"a", 1), (b"a", 2), (b"b", 0), (b"b", 2), (b"b", 1)]:
        co_use.add(key, row)
    # Two servers' "search" tools served one request as alternatives, not together.
    assert co_use.lifts([0], weight=0.5, least=2) == {2: 0.5}
    assert co_use.lifts([2], weight=0.5, least=2) == {0: 0.5, 1: 0.5}
    assert co_use.lifts([0], weight=0.5, least=3) == {}
    # A request of more than CO_USE_MAX_TOOLS tools makes no pair, until it is back under.
    crowd = range(3, 3 + CO_USE_MAX_TOOLS + 1)
    for row in crowd:
        co_use.add(b"c", row)
    assert co_use.lifts([3], weight=1.0, least=1) == {}
    co_use.remove(b"c", crowd[-1])
    assert co_use.lifts([3], weight=1.0, least=1) == dict.fromkeys(crowd[1:-1], 1.0)
    for row in crowd[:-1]:
        co_use.remove(b"c", row)
    co_use.remove(b"a", 2)
    co_use.remove(b"b", 2)
    assert not co_use
    co_use.remove(b"nothing", 1)  # what was never added is no error


def test_verify_learns_when_asked(router: Router) -> None:
    memory = router.learn(":memory:", from_verify=True)
    try:
        result = router.route(QUERY, top_k=36, adaptive=False)
        verdict = router.verify({"name": "search_news", "arguments": {"query": "x"}}, result)
        assert verdict.ok, verdict
        assert memory._rows.tools.tolist() == [router._parts.outline.ids.index(TARGET)]
        router.learn(":memory:")  # from_verify off
        assert router.verify({"name": "search_news", "arguments": {"query": "x"}}, result).ok
        assert len(router.memory or ()) == 0
    finally:
        router._pipeline.learning.memory = None


def test_verify_learns_from_a_call_checked_against_the_promotion(router: Router) -> None:
    memory = router.learn(":memory:", from_verify=True)
    try:
        promotion = router.promote(router.route(QUERY, top_k=36, adaptive=False))
        assert promotion.query == QUERY
        # The query stays out of what telemetry logs.
        assert QUERY not in repr(promotion)
        assert QUERY not in json.dumps(promotion.to_dict())
        search = {"name": promotion.search_tool_name, "arguments": {"query": "weather"}}
        assert router.verify(search, promotion).ok  # the tool_search tool: nothing to learn
        assert len(memory) == 0
        call = {"name": "search_news", "arguments": {"query": "x"}}
        assert router.verify(call, promotion).ok
        assert memory._rows.tools.tolist() == [router._parts.outline.ids.index(TARGET)]
        # A select: route names its tools: no request to learn from.
        selected = router.promote(router.route("select:search_news"))
        assert selected.query == ""
        assert router.verify(call, selected).ok
        assert len(memory) == 1
    finally:
        router._pipeline.learning.memory = None


def test_checked_is_verifys_check_alone_reported_when_its_caller_says(router: Router) -> None:
    # An MCP proxy reports the verdict its call ends with (refused after its check passed,
    # its tool gone since), and learns from it itself: the check is the router's, its
    # report deferred, nothing learned.
    memory = router.learn(":memory:", from_verify=True)
    sink = MemorySink()
    router.telemetry = Telemetry([sink])
    try:
        result = router.route(QUERY, top_k=36, adaptive=False)
        call = {"name": "search_news", "arguments": {"query": "x"}}
        verdict, report = router.checked(call, result, turn_id="t1")
        assert verdict == router.verify(call, result)  # reported: one event
        assert len(memory) == 1  # learned by verify only
        assert len(sink.of_kind("verify")) == 1
        refused = dataclasses.replace(verdict, ok=False, error="tool_not_available")
        report(refused)
        event = sink.of_kind("verify")[-1]
        assert (event.turn_id, event.ok, event.latency_ms > 0) == ("t1", False, True)
        with pytest.raises(InvalidInputError, match="catalog version other"):
            router.checked(call, dataclasses.replace(result, catalog_version="other"))
    finally:
        router._pipeline.learning.memory = None
        router.telemetry = None


def test_bad_feedback_is_refused(router: Router) -> None:
    router.learn(":memory:")
    try:
        with pytest.raises(InvalidInputError, match="no tool 'nope/nothing'"):
            router.feedback(QUERY, used=["nope/nothing"])
        with pytest.raises(InvalidInputError, match="used must be a list of tool ids"):
            router.feedback(QUERY, used=TARGET)
        with pytest.raises(InvalidInputError, match="missed entries must be tool ids, got 3"):
            router.feedback(QUERY, missed=[3])  # type: ignore[list-item]
        with pytest.raises(InvalidInputError, match="query"):
            router.feedback("  ", used=[TARGET])
        with pytest.raises(InvalidInputError, match="neighbours"):
            LearnConfig(neighbours=0)
        with pytest.raises(InvalidInputError, match="co_use_weight must be a number >= 0"):
            LearnConfig(co_use_weight=-1.0)
        with pytest.raises(InvalidInputError, match="co_use_min must be an integer >= 1"):
            LearnConfig(co_use_min=0)
    finally:
        router._pipeline.learning.memory = None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda r: r.feedback(QUERY, used=None), "used must be a list of tool ids, got NoneType"),
        (lambda r: r.feedback(QUERY, missed=3), "missed must be a list of tool ids, got int"),
        (lambda r: r.feedback(QUERY, used={TARGET: 1}), "used must be a list of tool ids, got"),
        (lambda r: r.forget(tool=3), "forget's tool= must be a non-empty string, got 3"),
        (lambda r: r.forget(server=""), "forget's server= must be a non-empty string, got ''"),
        (
            lambda r: r.forget(tool="a\ud800"),
            "forget's tool= holds a lone surrogate at character 1",
        ),
        (
            lambda r: r.forget(server="\udce9"),
            "forget's server= holds a lone surrogate at character 0",
        ),
        (lambda r: LearnConfig(weight=True), "weight must be a positive number, got True"),
        (lambda r: LearnConfig(floor=10**400), "floor must be in"),
        (lambda r: LearnConfig(weight=10**5000), "weight must be a positive number, got an int"),
        (lambda r: LearnConfig(neighbours=10**30), "neighbours must be at most"),
        (lambda r: LearnConfig(max_versions=0), "max_versions must be an integer >= 1"),
        (lambda r: LearnConfig(version_lease_s=-1.0), "version_lease_s must be a positive"),
        (lambda r: LearnConfig(reload_s=0.0), "reload_s must be a positive"),
    ],
)
def test_what_is_not_feedback_is_named(router: Router, call: Any, message: str) -> None:
    """Arguments of the wrong kind are errors naming them, learning or not: a stray ``None``
    must not escape as a TypeError, nor a number match no tool and forget nothing."""
    for learning in (False, True):
        if learning:
            router.learn(":memory:")
        try:
            with pytest.raises(InvalidInputError, match=re.escape(message)):
                call(router)
        finally:
            router._pipeline.learning.memory = None


def test_a_forget_after_a_refresh_while_the_store_was_down_forgets_in_that_store(
    router: Router,
) -> None:
    store = _Down(":memory:")
    router.learn(store)
    try:
        router.feedback(QUERY, used=[TARGET])
        store.down = True
        with pytest.warns(StoreWarning, match="connection refused"):
            new = router.refresh(_version(8))
        store.down = False
        # The store the new version learns into, though its memory is not read yet: the
        # rows of every version go, as for a router whose memory is.
        new.forget(tool=TARGET)
        assert store.load(router.memory.scope) == []  # type: ignore[union-attr]
        assert new.memory is not None
        assert new.memory.store is store
    finally:
        router._pipeline.learning.memory = None


def test_sqlite_is_the_default_store() -> None:
    assert isinstance(open_store(":memory:"), SqliteStore)
    assert isinstance(open_store(open_store(":memory:")), LearnedStore)
    with pytest.raises(InvalidInputError, match="learned store"):
        open_store(3)  # type: ignore[arg-type]


class _Down(SqliteStore):
    """A store whose database stops answering once ``down`` is set (a PostgreSQL server
    that went away after the memory was read)."""

    down = False

    def use(self, scope: str, user: object, **bounds: Any) -> list[str]:
        if self.down:
            raise StoreError("the learned memory at postgresql://db/x: connection refused")
        return super().use(scope, user, **bounds)


def test_a_refresh_while_the_store_is_down_routes_without_the_memory(router: Router) -> None:
    store = _Down(":memory:")
    router.learn(store, config=LearnConfig(rows_per_tool=4))
    try:
        store.down = True
        with pytest.warns(StoreWarning, match="connection refused"):
            new = router.refresh(_version(7))  # an MCP server's tools changed: not a failure
        assert new.memory is None
        assert new.route(QUERY, top_k=3).ids
        store.down = False
        assert new.feedback(QUERY, used=[TARGET]) == 1  # into the store it followed
        assert new.memory is not None
        assert new.memory.store is store
        assert new.memory.config.rows_per_tool == 4
    finally:
        router._pipeline.learning.memory = None
