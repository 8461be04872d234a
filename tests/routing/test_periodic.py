"""Upkeep started by routes when due: one run at a time, each run setting the next."""

from __future__ import annotations

import math
import threading
import weakref

from toolgate.routing.periodic import Periodic


def test_one_run_at_a_time_and_each_sets_the_next() -> None:
    entered, release = threading.Event(), threading.Event()
    runs: list[float] = []

    def work(now: float) -> float:
        runs.append(now)
        entered.set()
        release.wait(10)
        return now + 60.0

    upkeep = Periodic(work, "test-upkeep", due_at=10.0, retry_s=60.0)
    assert upkeep.start_if_due(9.0) is None  # not due
    running = upkeep.start_if_due(10.0)
    assert running is not None
    assert entered.wait(10)
    assert upkeep.due_at == math.inf
    assert upkeep.start_if_due(12.0) is None  # still one run at a time
    release.set()
    running.join()
    assert runs == [10.0]
    assert upkeep.due_at == 70.0
    assert upkeep.start_if_due(69.0) is None
    later = upkeep.start_if_due(70.0)
    assert later is not None
    later.join()
    assert runs == [10.0, 70.0]


def test_a_run_in_flight_is_not_a_forked_childs() -> None:
    upkeep = Periodic(lambda now: now + 1.0, "test-upkeep", due_at=0.0, retry_s=1.0)
    upkeep._running, upkeep.due_at = True, math.inf  # as a parent's run leaves it at a fork
    upkeep._forked()
    thread = upkeep.start_if_due(5.0)
    assert thread is not None
    thread.join()
    assert upkeep.due_at == 6.0


def test_a_run_that_raises_is_tried_again_after_retry_s() -> None:
    runs: list[float] = []

    def work(now: float) -> float:
        runs.append(now)
        if len(runs) == 1:
            raise RuntimeError("an error the work did not expect")
        return now + 60.0

    upkeep = Periodic(work, "test-upkeep", due_at=0.0, retry_s=30.0)
    hook, threading.excepthook = threading.excepthook, lambda args: None  # type: ignore[assignment]
    try:
        thread = upkeep.start_if_due(5.0)
        assert thread is not None
        thread.join()
    finally:
        threading.excepthook = hook
    assert upkeep.due_at == 35.0  # not inf: upkeep that stopped for good would never run again
    again = upkeep.start_if_due(35.0)
    assert again is not None
    again.join()
    assert runs == [5.0, 35.0]


def test_a_time_set_while_it_runs_is_kept_when_sooner() -> None:
    entered, release = threading.Event(), threading.Event()

    def work(now: float) -> float:
        entered.set()
        release.wait(10)
        return now + 600.0  # the next due time for the marks it read

    upkeep = Periodic(work, "test-upkeep", due_at=0.0, retry_s=60.0)
    running = upkeep.start_if_due(10.0)
    assert running is not None
    assert entered.wait(10)
    upkeep.due_at = 25.0  # a store's new mark with a shorter lease, made while it runs
    release.set()
    running.join()
    assert upkeep.due_at == 25.0  # overwritten, the new lease would lapse before its renewal


def test_the_object_whose_upkeep_it_runs_is_not_kept_alive() -> None:
    class Owner:
        def __init__(self) -> None:
            self.upkeep = Periodic(self.work, "test-upkeep", due_at=0.0, retry_s=1.0)

        def work(self, now: float) -> float:
            return now + 1.0

    owner = Owner()
    upkeep = owner.upkeep
    gone = weakref.ref(owner)
    del owner  # no cycle through the upkeep: freed at once, without the cyclic collector
    assert gone() is None
    thread = upkeep.start_if_due(0.0)
    assert thread is not None
    thread.join()
    assert upkeep.due_at == 1.0  # retried later: nothing to run
