"""Learning from calls off the caller's path: a bounded queue and one worker thread.

A call that ran (a verified call the HTTP gateway passed on, an MCP call forwarded upstream)
is feedback for the request it was routed on (a :class:`Lesson`). Learning it writes to the
learned store, which may wait up to its busy timeout (30 s) on another process's write lock,
or a TCP connect timeout on a database that does not answer, and may embed the request. The
caller must never wait for that, so it hands each lesson to a :class:`LearningQueue`: one
worker thread learns them in order, and the caller's result or event loop never waits.
A worker a server forks has none of its parent's threads: its queue starts afresh there.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from toolgate.arguments import shown
from toolgate.errors import InvalidInputError, ToolgateError
from toolgate.forks import fork_safe_lock, on_fork_in_child
from toolgate.routing.router import Router

__all__ = [
    "LEARN_QUEUE_CHARS",
    "LEARN_QUEUE_LESSONS",
    "LearningFailures",
    "LearningQueue",
    "Lesson",
]

#: Lessons a queue keeps waiting for its worker at most; more are dropped and counted.
LEARN_QUEUE_LESSONS = 1024
#: Characters of requests those lessons may hold in all (a message may be megabytes).
LEARN_QUEUE_CHARS = 16 * 2**20


@dataclass(frozen=True)
class Lesson:
    """A call to ``tool`` (an id) ran for ``query``, the text ``router`` routed: the tool
    was used, or with ``missed`` one the route missed (a ``tool_search`` found it)."""

    router: Router
    query: str
    tool: str
    missed: bool = False

    def learn(self) -> None:
        """Feed the lesson back to its router; the store's errors are raised."""
        if self.missed:
            self.router.feedback(self.query, missed=[self.tool])
        else:
            self.router.feedback(self.query, used=[self.tool])


class LearningFailures:
    """How lessons that fail are logged on ``log``: a warning once per kind of error until
    a lesson is learned again (one per lesson flooded the log while a store was down), then
    at debug level; with a traceback unless it is toolgate's own error (a store's needs
    none). Thread-safe."""

    def __init__(self, log: logging.Logger, message: str = "learning from a call failed: %s"):
        """See the class docstring; ``message`` takes the error as its one argument."""
        self.log, self.message = log, message
        self._kinds: set[type[BaseException]] = set()
        # Taken by the threads of a filter's requests: one in it at a fork must not leave it
        # held in the child for good.
        self._lock = fork_safe_lock()
        # A forked worker's log is its own: what its parent warned of, it warns of again.
        on_fork_in_child(self, LearningFailures.learned)

    def learned(self) -> None:
        """A lesson was learned: the store answers, and its next failure is warned of."""
        with self._lock:
            self._kinds.clear()

    def failed(self, exc: Exception) -> None:
        """Log ``exc``, the failure of a lesson: the call it came from stands."""
        with self._lock:
            told = type(exc) in self._kinds
            self._kinds.add(type(exc))
        bug = not isinstance(exc, ToolgateError)
        self.log.log(logging.DEBUG if told else logging.WARNING, self.message, exc, exc_info=bug)


class LearningQueue:
    """Lessons learned in order by one worker thread (started with the first lesson).

    At most ``max_lessons`` wait, holding at most ``max_chars`` characters of requests: past
    either, a lesson is dropped, counted in :attr:`dropped` and told to ``on_drop``, so a
    store that stalls costs bounded memory and no call. A lesson that fails is logged on
    ``log``, never raised: a warning once per kind of error while the store keeps failing
    (then debug), with a traceback unless it is toolgate's own error. :meth:`join` waits
    until every lesson submitted so far is learned; :meth:`close` learns those waiting and
    stops, dropping (and counting) those a stalled store keeps past its timeout
    (:meth:`finish` learns them and stops, waiting for nothing). In a forked child, the
    lessons waiting are the parent's (its worker learns them): the child's queue starts
    empty, and its first lesson starts a worker of its own.
    """

    def __init__(
        self,
        *,
        max_lessons: int = LEARN_QUEUE_LESSONS,
        max_chars: int = LEARN_QUEUE_CHARS,
        on_drop: Callable[[], object] | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        """See the class docstring."""
        self.max_lessons = max_lessons
        self.max_chars = max_chars
        self._on_drop = on_drop
        self._log = log or logging.getLogger(__name__)
        self._waiting: deque[Lesson] = deque()
        self._chars = 0
        self._learning = False  # the worker holds a lesson
        self._closed = False
        self._changed = threading.Condition()
        self._worker: threading.Thread | None = None
        self._failures = LearningFailures(self._log)
        #: Lessons dropped: the queue was full, or closed.
        self.dropped = 0
        on_fork_in_child(self, LearningQueue._forked)

    def __len__(self) -> int:
        with self._changed:
            return len(self._waiting)

    def submit(self, lesson: Lesson) -> bool:
        """Queue ``lesson`` for the worker; ``False`` when it was dropped. Never waits."""
        with self._changed:
            room = (
                not self._closed
                and len(self._waiting) < self.max_lessons
                and self._chars + len(lesson.query) <= self.max_chars
            )
            if room:
                self._waiting.append(lesson)
                self._chars += len(lesson.query)
                self._start()
                self._changed.notify_all()
            else:
                self.dropped += 1
        if not room:
            self._dropped(1)
        return room

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every lesson submitted is learned (or ``timeout`` seconds); whether
        they were."""
        wait = _wait_s(timeout)
        with self._changed:
            return self._changed.wait_for(lambda: not self._waiting and not self._learning, wait)

    def close(self, timeout: float | None = None) -> bool:
        """Take no more lessons, learn those waiting, and stop the worker, waiting for it up
        to ``timeout`` seconds. Whether it stopped: if not (the store stalls), the lessons
        still waiting are dropped and counted, and the worker (a daemon, which holds no
        process open) stops after the one it holds."""
        wait = _wait_s(timeout)
        self.finish()
        with self._changed:
            worker = self._worker
        if worker is None:
            return True
        worker.join(wait)
        if not worker.is_alive():
            return True
        with self._changed:
            left = len(self._waiting)
            self._waiting.clear()
            self._chars = 0
            self.dropped += left
            self._changed.notify_all()
        self._dropped(left)
        return False

    def finish(self) -> None:
        """Take no more lessons: the worker learns those waiting, then stops. Never waits
        (an owner's finalizer calls it: the owner is gone, what it taught is not)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _forked(self) -> None:
        """In a forked child: nothing waits, no worker runs (the parent's thread, which held
        the lessons, is not here), and the condition is new (that thread may have held it)."""
        self._changed = threading.Condition()
        self._waiting = deque()
        self._chars = 0
        self._learning = False
        self._worker = None
        self._failures = LearningFailures(self._log)

    def _dropped(self, count: int) -> None:
        if self._on_drop is not None:
            for _ in range(count):
                self._on_drop()

    def _start(self) -> None:
        """Start the worker, once (the caller holds ``_changed``)."""
        if self._worker is None:
            self._worker = threading.Thread(
                target=self._work, name="toolgate-learning", daemon=True
            )
            self._worker.start()

    def _work(self) -> None:
        while (lesson := self._next()) is not None:
            try:
                lesson.learn()
                self._failures.learned()
            except Exception as exc:  # the worker must go on learning the next ones
                self._failures.failed(exc)
            finally:
                # Let go of it before waiting for the next: it holds its router, whose files
                # stayed open, once replaced (evicted, refreshed), until the next lesson came.
                del lesson
                with self._changed:
                    self._learning = False
                    self._changed.notify_all()

    def _next(self) -> Lesson | None:
        """The next lesson, waiting for one; ``None`` once closed and none waits."""
        with self._changed:
            self._changed.wait_for(lambda: self._waiting or self._closed)
            if not self._waiting:
                return None
            lesson = self._waiting.popleft()
            self._chars -= len(lesson.query)
            self._learning = True
            return lesson


def _wait_s(timeout: object) -> float | None:
    """``timeout`` (seconds, ``None``: for ever) as Python's threads take it: a wait past
    ``threading.TIMEOUT_MAX`` (infinity, say) is for ever, where they raise OverflowError;
    NaN, a negative wait or no number is an :class:`InvalidInputError`."""
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or (isinstance(timeout, float) and math.isnan(timeout))
        or timeout < 0
    ):
        raise InvalidInputError(f"timeout must be seconds >= 0 or None, got {shown(timeout)}")
    return None if timeout > threading.TIMEOUT_MAX else float(timeout)
