"""Learning from use under threads: routes never wait on the learned store's I/O, and a
store that fails leaves the memory as the store is."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from toolgate.cli.commands import demo_catalog
from toolgate.embedding.embedder import Embedder
from toolgate.routing import feedback
from toolgate.routing.learned_store import SqliteStore, StoreError
from toolgate.routing.router import Router

QUERY = "please do the thing with my repository tickets"
TARGET = "search/search_news"
OTHER = "github/create_issue"


@pytest.fixture(scope="module")
def router(embedder: Embedder) -> Router:
    return Router.from_catalog(demo_catalog(), cache=None, embedder=embedder)


@pytest.fixture(autouse=True)
def _forgets(router: Router) -> Iterator[None]:
    yield
    router._pipeline.learning.memory = None


class _Held(SqliteStore):
    """A store whose writes, once ``hold`` is set, wait until the test lets them go: as
    behind another process's write lock, up to the busy timeout."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.hold = threading.Event()
        self.writing = threading.Event()
        self.release = threading.Event()
        self.written = threading.Event()

    def _insert(self, sql: str, args: Any) -> int:
        if not self.hold.is_set():
            return super()._insert(sql, args)
        self.writing.set()
        self.release.wait(timeout=10)  # bounded: code that makes routes wait here goes on
        try:
            return super()._insert(sql, args)
        finally:
            self.written.set()


def test_routes_do_not_wait_for_a_store_write(router: Router) -> None:
    store = _Held()
    memory = router.learn(store)
    router.feedback("weekly triage report", used=[OTHER, TARGET])  # co-use to look up
    router.route(QUERY, top_k=5, adaptive=False)  # the query's vector is memoised
    store.hold.set()
    writer = threading.Thread(target=router.feedback, args=(QUERY,), kwargs={"used": [TARGET]})
    writer.start()
    try:
        assert store.writing.wait(timeout=10)
        router.route(QUERY, top_k=5, adaptive=False)
        routed_during_the_write = not store.written.is_set()
    finally:
        store.release.set()
        writer.join()
    assert routed_during_the_write
    assert len(memory) == 3


class _Failing(SqliteStore):
    """A store whose writes fail once ``failing`` is set (a full disk, a lock held too long)."""

    failing = False

    def _insert(self, sql: str, args: Any) -> int:
        if self.failing:
            raise StoreError("cannot write the learned memory: disk full")
        return super()._insert(sql, args)

    def _change(self, sql: str, args: Any) -> int:
        if self.failing:
            raise StoreError("cannot write the learned memory: disk full")
        return super()._change(sql, args)


def test_a_store_that_fails_leaves_the_memory_as_the_store_is(router: Router) -> None:
    store = _Failing(":memory:")
    memory = router.learn(store)
    router.feedback(QUERY, used=[TARGET])
    store.failing = True
    with pytest.raises(StoreError, match="disk full"):
        router.feedback(QUERY, used=[TARGET])  # a repeat: more weight on its row
    with pytest.raises(StoreError, match="disk full"):
        router.feedback("weekly triage report", used=[OTHER])  # a new row
    assert memory._rows.weights.tolist() == [1.0]
    assert [row.weight for row in store.load(memory.scope)] == [1.0]
    assert not memory.has_co_use()


class _Telling:
    """A lock that tells, by ``waiting``, when a thread has to wait for it."""

    def __init__(self, waiting: threading.Event) -> None:
        self._lock = threading.Lock()
        self.waiting = waiting

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self.waiting.set()
            self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_threads_racing_the_first_feedback_share_one_memory(
    router: Router, monkeypatch: pytest.MonkeyPatch
) -> None:
    opening, second = threading.Event(), threading.Event()
    # The second thread is at the start: waiting its turn, or opening a store of its own.
    router._pipeline.learning._starting = _Telling(second)  # type: ignore[assignment]
    opened: list[object] = []

    def open_store(store: object) -> SqliteStore:
        opened.append(store)
        if len(opened) == 1:
            opening.set()
            second.wait(timeout=10)
        else:
            second.set()
        return SqliteStore(":memory:")

    monkeypatch.setattr(feedback, "open_store", open_store)
    threads = [
        threading.Thread(target=router.feedback, args=(f"query {n}",), kwargs={"used": [TARGET]})
        for n in range(2)
    ]
    threads[0].start()
    assert opening.wait(timeout=10)
    threads[1].start()
    for thread in threads:
        thread.join()
    assert len(opened) == 1
    assert router.memory is not None
    assert len(router.memory) == 2
