"""The gateway's learning queue: lessons learned in order on one thread, bounded, never
waited for by the one submitting them; and its starter, which tries a failed store once per
retry window, never holding a request up behind another's try."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import weakref
from typing import Any

import pytest

from toolgate.errors import InvalidInputError
from toolgate.gateway.learning import LearningStarter
from toolgate.routing.learned_store import StoreError
from toolgate.routing.learning_queue import LearningQueue, Lesson


class _Router:
    """Records each feedback; the one for ``hold`` waits until the test lets it go."""

    def __init__(self, hold: str = "", fail: type[Exception] | None = None) -> None:
        self.hold = hold
        self.fail = fail
        self.learned: list[str] = []
        self.holding = threading.Event()
        self.release = threading.Event()

    def feedback(self, query: str, *, used: list[str]) -> int:
        if query == self.hold:
            self.holding.set()
            self.release.wait(timeout=10)
        if self.fail is not None:
            raise self.fail(f"cannot learn {query!r}")
        self.learned.append(query)
        return len(used)


def _lesson(router: Any, query: str) -> Lesson:
    return Lesson(router, query, "default/send_email")


def test_a_full_queue_drops_and_counts_and_never_waits() -> None:
    router = _Router(hold="first")
    dropped: list[int] = []
    queue = LearningQueue(max_lessons=2, on_drop=lambda: dropped.append(1))
    try:
        assert queue.submit(_lesson(router, "first"))
        assert router.holding.wait(timeout=10)  # the worker holds "first": two may wait
        assert queue.submit(_lesson(router, "second"))
        assert queue.submit(_lesson(router, "third"))
        assert not queue.submit(_lesson(router, "fourth"))
    finally:
        router.release.set()
    assert queue.join(timeout=10)
    assert router.learned == ["first", "second", "third"]
    assert (queue.dropped, len(dropped)) == (1, 1)


def test_the_queue_bounds_the_characters_it_holds() -> None:
    router = _Router(hold="x")
    queue = LearningQueue(max_chars=10)
    try:
        assert queue.submit(_lesson(router, "x"))
        assert router.holding.wait(timeout=10)
        assert queue.submit(_lesson(router, "a" * 10))
        assert not queue.submit(_lesson(router, "b"))
    finally:
        router.release.set()
    assert queue.join(timeout=10)
    assert queue.dropped == 1


def test_a_failed_lesson_is_logged_and_the_next_ones_learned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = LearningQueue()
    with caplog.at_level(logging.WARNING, logger="toolgate.gateway"):
        queue.submit(_lesson(_Router(fail=StoreError), "locked"))
        queue.submit(_lesson(_Router(fail=ValueError), "a bug"))
        router = _Router()
        queue.submit(_lesson(router, "after"))
        assert queue.join(timeout=10)
    assert router.learned == ["after"]
    assert "cannot learn 'locked'" in caplog.text
    assert "cannot learn 'a bug'" in caplog.text


def test_close_learns_the_waiting_lessons_and_takes_no_more() -> None:
    router = _Router(hold="first")
    queue = LearningQueue()
    assert queue.close(timeout=10)  # no lesson yet: no worker to stop
    queue = LearningQueue()
    queue.submit(_lesson(router, "first"))
    assert router.holding.wait(timeout=10)
    queue.submit(_lesson(router, "second"))
    closing = threading.Thread(target=queue.close)
    closing.start()
    router.release.set()
    closing.join(timeout=10)
    assert router.learned == ["first", "second"]
    assert not queue.submit(_lesson(router, "late"))
    assert queue.dropped == 1


def test_close_drops_and_counts_the_lessons_a_stalled_store_holds_past_its_timeout() -> None:
    router = _Router(hold="first")
    dropped: list[int] = []
    queue = LearningQueue(on_drop=lambda: dropped.append(1))
    try:
        queue.submit(_lesson(router, "first"))
        assert router.holding.wait(timeout=10)
        queue.submit(_lesson(router, "second"))
        queue.submit(_lesson(router, "third"))
        assert not queue.close(timeout=0.05)  # returns, the worker still held
        assert (len(queue), queue.dropped, len(dropped)) == (0, 2, 2)
    finally:
        router.release.set()
    assert queue.join(timeout=10)
    assert router.learned == ["first"]


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, 10**400])
def test_a_wait_past_what_threads_take_is_a_wait_for_ever(timeout: float) -> None:
    # Python's locks take at most threading.TIMEOUT_MAX: infinity raised OverflowError.
    router = _Router()
    queue = LearningQueue()
    queue.submit(_lesson(router, "first"))
    assert queue.join(timeout=timeout)
    assert queue.close(timeout=timeout)
    assert router.learned == ["first"]


@pytest.mark.parametrize("timeout", [float("nan"), -1.0, "5"])
def test_a_wait_that_is_no_seconds_is_refused(timeout: Any) -> None:
    queue = LearningQueue()
    queue.submit(_lesson(_Router(), "first"))
    for wait in (queue.join, queue.close):
        with pytest.raises(InvalidInputError, match="timeout must be"):
            wait(timeout)


def test_a_worker_waiting_for_lessons_holds_none_of_those_it_learned() -> None:
    # The last lesson kept its router alive while the worker waited: a router replaced
    # since (evicted, refreshed) kept its index files open until the next call came.
    router = _Router()
    queue = LearningQueue()
    try:
        queue.submit(_lesson(router, "only"))
        assert queue.join(timeout=10)
        assert router.learned == ["only"]
        gone = weakref.ref(router)
        del router
        assert gone() is None
    finally:
        queue.close(timeout=10)


def test_a_failing_store_is_warned_of_once_until_it_answers_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing, answering = _Router(fail=StoreError), _Router()
    queue = LearningQueue(log=logging.getLogger("toolgate.test"))
    with caplog.at_level(logging.WARNING, logger="toolgate.test"):
        for router, query in [(failing, "a"), (failing, "b"), (answering, "c"), (failing, "d")]:
            queue.submit(_lesson(router, query))
        assert queue.join(timeout=10)
    warned = [r.getMessage() for r in caplog.records if r.name == "toolgate.test"]
    assert len(warned) == 2
    assert "cannot learn 'a'" in warned[0]
    assert "cannot learn 'd'" in warned[1]


class _TellingLock:
    """A lock that tells, by ``contended``, when a thread finds it held."""

    def __init__(self, contended: threading.Event) -> None:
        self._lock = threading.Lock()
        self.contended = contended

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        self.contended.set()
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_requests_meeting_a_store_being_tried_route_without_it_at_once() -> None:
    trying, contended = threading.Event(), threading.Event()
    tries: list[str] = []

    class _Unreachable:
        """A router whose store connects slowly, then is refused."""

        memory = None

        def __init__(self, name: str) -> None:
            self.name = name

        def learn(self, _store: object) -> None:
            tries.append(self.name)
            trying.set()
            contended.wait(timeout=10)  # the second request arrives while this one tries
            raise StoreError("connection refused")

    starter = LearningStarter(store=object(), retry_s=30.0)  # type: ignore[arg-type]
    starter._starting = _TellingLock(contended)  # type: ignore[assignment]
    first = threading.Thread(target=starter.start, args=(_Unreachable("first"),))
    first.start()
    assert trying.wait(timeout=10)
    starter.start(_Unreachable("second"))  # type: ignore[arg-type]
    first.join(timeout=10)
    starter.start(_Unreachable("third"))  # type: ignore[arg-type]
    assert tries == ["first"]  # once in the retry window, not once per request


# In a process of its own, as a pre-forking server's master whose queue learns: a worker
# forked while the queue's thread holds one lesson and another waits learns its own lessons
# (the master's stay the master's). Exits 0 if both learned theirs, 3 if the worker did not.
_FORKED = """
import os, signal, sys, threading
from toolgate.routing.learning_queue import LearningQueue, Lesson

class Router:
    def __init__(self):
        self.learned, self.holding, self.release = [], threading.Event(), threading.Event()

    def feedback(self, query, *, used):
        if query == "held":
            self.holding.set()
            self.release.wait(10)
        self.learned.append(query)

router = Router()
queue = LearningQueue()
queue.submit(Lesson(router, "held", "default/send_email"))
router.holding.wait(10)
queue.submit(Lesson(router, "waiting", "default/send_email"))
pid = os.fork()
if pid == 0:
    signal.alarm(20)
    router.learned.clear()
    learned = queue.submit(Lesson(router, "worker's", "default/send_email")) and queue.join(10)
    os._exit(0 if learned and router.learned == ["worker's"] else 3)
router.release.set()
queue.join(10)
status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
sys.exit(status if router.learned == ["held", "waiting"] else 5)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_worker_learns_on_a_thread_of_its_own() -> None:
    # The queue's thread was the master's: the worker's lessons waited for it for ever.
    run = subprocess.run([sys.executable, "-c", _FORKED], timeout=120, check=False)
    assert run.returncode == 0


# A pre-forking server's master whose filter learns in its request threads: one of them in
# the failures' log (its lock held) when a worker is forked. Exits 0 once the worker logged
# a failure, killed by the alarm if it waited on the lock for ever.
_FORKED_FAILURES = """
import logging, os, signal, sys
from toolgate.routing.learned_store import StoreError
from toolgate.routing.learning_queue import LearningFailures

failures = LearningFailures(logging.getLogger("toolgate.gateway"))
failures._lock.acquire()  # as a request thread inside failed() at the fork
pid = os.fork()
if pid == 0:
    signal.alarm(10)
    failures.failed(StoreError("the disk is full"))
    os._exit(0)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_worker_logs_failures_whatever_the_lock_held_at_the_fork() -> None:
    # A plain lock held by another thread at the fork stays held in the child for good.
    run = subprocess.run([sys.executable, "-c", _FORKED_FAILURES], timeout=120, check=False)
    assert run.returncode == 0


# A master that warned of its store's failure forks a worker, whose store fails too: the
# worker's log is its own (a file per worker, say), so it warns again. Exits 0 if it did.
_FORKED_WARNED = """
import logging, os, sys
from toolgate.routing.learned_store import StoreError
from toolgate.routing.learning_queue import LearningFailures

levels = []
log = logging.getLogger("toolgate.gateway")
log.setLevel(logging.DEBUG)
log.addHandler(logging.Handler())
log.handlers[0].emit = lambda record: levels.append(record.levelno)
failures = LearningFailures(log)
failures.failed(StoreError("the disk is full"))
pid = os.fork()
if pid == 0:
    levels.clear()
    failures.failed(StoreError("the disk is full"))
    os._exit(0 if levels == [logging.WARNING] else 3)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_worker_warns_of_its_own_first_failure() -> None:
    # The kinds of error the master had warned of were the child's too: its log said the
    # failure at debug level only.
    run = subprocess.run([sys.executable, "-c", _FORKED_WARNED], timeout=120, check=False)
    assert run.returncode == 0
