"""Upkeep that routes start when it falls due, in a thread of its own.

A learned memory reads its store again now and then, and a store renews the marks of the
catalog versions it holds: neither may cost a route more than a look at the clock, so the
first route past the due time starts the work in a thread and the others go on. One run at a
time: while it runs the due time is infinite; the run sets the next, unless one set meanwhile
is sooner.
"""

from __future__ import annotations

import inspect
import math
import threading
import weakref
from collections.abc import Callable

from toolgate.forks import fork_safe_lock, on_fork_in_child

__all__ = ["Periodic"]


class Periodic:
    """``work(now)`` run in a thread named ``name`` once :attr:`due_at` has passed; it
    returns the time it is next due (``math.inf``: not until someone sets :attr:`due_at`).
    Upkeep is best effort: a failed run says when to try again, and one that raises all the
    same is tried again ``retry_s`` later (left at inf, it would never run again)."""

    def __init__(
        self, work: Callable[[float], float], name: str, due_at: float, *, retry_s: float
    ) -> None:
        """See the class docstring."""
        #: When the work is next due, on the caller's clock (inf: running, or never due).
        self.due_at = due_at
        # A method is held weakly: its object holds this, and a cycle would keep a dropped
        # router's files open until the cyclic collector ran.
        self._work: Callable[[], Callable[[float], float] | None] = (
            weakref.WeakMethod(work) if inspect.ismethod(work) else lambda: work
        )
        self._name = name
        self._retry_s = retry_s
        self._starting = fork_safe_lock()
        self._running = False
        on_fork_in_child(self, Periodic._forked)

    def start_if_due(self, now: float) -> threading.Thread | None:
        """The thread running the work, started if it is due at ``now`` and not running;
        ``None`` otherwise. Not due, it compares two times."""
        if now < self.due_at:
            return None
        with self._starting:
            if self._running or now < self.due_at:
                return None
            self._running, self.due_at = True, math.inf
        thread = threading.Thread(target=self._run, args=(now,), name=self._name, daemon=True)
        thread.start()
        return thread

    def _run(self, now: float) -> None:
        due_at = now + self._retry_s  # kept if the work raises
        try:
            work = self._work()
            if work is not None:  # else its object is gone, and so is the need
                due_at = work(now)
        finally:
            self._running = False
            # A time set while it ran (inf until then: a store's new mark, whose lease may be
            # shorter than those the run read) stays when sooner.
            self.due_at = min(due_at, self.due_at)

    def _forked(self) -> None:
        # A run the parent's thread was making is not the child's: its next caller starts one.
        if self._running:
            self._running, self.due_at = False, -math.inf
