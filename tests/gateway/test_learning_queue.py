"""The gateway's learning queue: lessons learned in order on one thread, bounded, never
waited for by the one submitting them."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from toolgate.gateway.learning import LearningQueue, Lesson
from toolgate.routing.learned_store import StoreError


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
