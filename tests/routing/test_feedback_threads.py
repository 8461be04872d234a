"""Learning from use under threads: routes never wait on the learned store's I/O, a store
that fails leaves the memory as the store is, and a worker forked during a write learns."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
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


# In a process of its own, as a pre-forking server's master: a thread's feedback waits on the
# store (another process holds its write lock) when a worker is forked. The worker then
# learns too; exits 0 if it did, 4 if it hung (killed by its alarm).
_FORKED_WRITER = """
import os, signal, subprocess, sys, threading, time
import numpy as np
from toolgate.routing.feedback import LearnedMemory
from toolgate.routing.learned_store import SqliteStore

path = sys.argv[1]
store = SqliteStore(path)
memory = LearnedMemory(store, "s", ["a/x", "a/y"], lambda: ["a"] * 2, lambda: ["x", "y"], 4)
hold = "import sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None); " \\
    "db.execute('BEGIN IMMEDIATE'); print(flush=True); sys.stdin.readline()"
other = subprocess.Popen([sys.executable, "-c", hold, path], stdin=-1, stdout=-1, text=True)
other.stdout.readline()  # the other process holds the store's write lock
vector = np.ones(4, np.float32)
writer = threading.Thread(target=memory.learn, args=(vector, [0], b"k"))
writer.start()
deadline = time.monotonic() + 10
while not memory._writing.locked() and time.monotonic() < deadline:
    time.sleep(0.01)
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    os._exit(0 if memory.learn(vector, [1], b"j") == 1 else 3)
time.sleep(0.5)
other.communicate("\\n")
writer.join()
status = os.waitpid(pid, 0)[1]
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 4)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_worker_forked_during_a_write_learns(tmp_path: Path) -> None:
    # The writer's thread held the memory's writer lock at the fork: the worker has no such
    # thread to release it.
    _run_forked(_FORKED_WRITER, tmp_path)


# In a process of its own: a worker forked while a thread of the master reads the store again
# for a memory. That read is not the worker's: its next route reads the store itself. Exits 0
# if it did, 3 if the worker never reads the store again, 4 if it hung.
_FORKED_RELOAD = """
import os, signal, sys, threading
import numpy as np
from toolgate.routing.feedback import LearnConfig, LearnedMemory
from toolgate.routing.learned_store import SqliteStore

class Slow(SqliteStore):
    reading, release, hold = threading.Event(), threading.Event(), False

    def load(self, scope, **kwargs):
        if self.hold:
            self.reading.set()
            self.release.wait(10)
        return super().load(scope, **kwargs)

store = Slow(sys.argv[1])
config = LearnConfig(reload_s=60.0)
memory = LearnedMemory(store, "s", ["a/x", "a/y"], lambda: ["a"] * 2, lambda: ["x", "y"], 4,
                       config=config)
memory.learn(np.ones(4, np.float32), [0], b"k")
store.hold = True
later = memory._clock() + 60.0
reading = memory.keep_fresh(later)
store.reading.wait(10)
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    store.hold = False
    thread = memory.keep_fresh(later)
    if thread is None:
        os._exit(3)
    thread.join()
    os._exit(0 if len(memory) == 1 else 5)
store.release.set()
reading.join()
status = os.waitpid(pid, 0)[1]
sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 4)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_worker_forked_during_a_reload_reads_the_store_again(tmp_path: Path) -> None:
    # The reading thread was the master's: the worker kept its "a read is running" mark, and
    # so never read the store again (what other replicas learned or forgot never reached it).
    _run_forked(_FORKED_RELOAD, tmp_path)


def _run_forked(script: str, tmp_path: Path) -> None:
    """Runs ``script`` (a master forking a worker) in a process of its own, on a store in
    ``tmp_path``: it exits 0 if the worker did its part, 4 if the worker hung."""
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "learned.sqlite3")],
        timeout=120,
        check=False,
    )
    assert run.returncode != 4, "the forked worker hung"
    assert run.returncode == 0
