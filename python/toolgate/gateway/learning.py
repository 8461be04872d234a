"""Learning from the calls a filter verified: what each call teaches, and a queue that learns
it off the event loop.

A call that passes ``ToolFilter.verify`` counts as used for the user message its request was
routed on (a :class:`Lesson`). Learning it writes to the learned store, which may wait up to
its busy timeout (30 s) on another process's write lock, and may embed the message. The HTTP
gateway checks answers on its event loop, so it hands each lesson to a :class:`LearningQueue`:
one worker thread learns them in order, and the loop never waits for the store.

Learning is best effort: a router whose memory cannot be read from the store (a database
down, a file locked past its timeout) routes without it, and a :class:`LearningStarter` (from
:mod:`toolgate.routing.learning_starter`, which the MCP proxy uses too) tries the store
again for it later, rather than failing the request.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolgate.routing.learned_store import StoreError
from toolgate.routing.learning_starter import LEARN_RETRY_S, LearningStarter
from toolgate.routing.router import Router
from toolgate.verify import Verdict

if TYPE_CHECKING:  # filtered.py imports indexes.py, which starts learning from here
    from toolgate.gateway.filtered import FilteredRequest

__all__ = [
    "LEARN_QUEUE_CHARS",
    "LEARN_QUEUE_LESSONS",
    "LEARN_RETRY_S",
    "LearningQueue",
    "LearningStarter",
    "Lesson",
    "lesson_of",
]

_log = logging.getLogger("toolgate.gateway")

#: Lessons a gateway keeps waiting for its worker at most; more are dropped and counted.
LEARN_QUEUE_LESSONS = 1024
#: Characters of user messages those lessons may hold in all (a message may be megabytes).
LEARN_QUEUE_CHARS = 16 * 2**20


@dataclass(frozen=True)
class Lesson:
    """A call to ``tool`` (an id) passed: it served ``query``, the text ``router`` routed."""

    router: Router
    query: str
    tool: str

    def learn(self) -> None:
        """Feed the lesson back to its router. A store that fails is logged, not raised:
        the verdict stands without it."""
        try:
            self.router.feedback(self.query, used=[self.tool])
        except StoreError as exc:
            _log.warning("learning from a verified call failed: %s", exc)


def lesson_of(filtered: FilteredRequest, verdict: Verdict) -> Lesson | None:
    """What the call of ``verdict``, checked against ``filtered``, teaches its router: nothing
    unless it passed, the router learns, the route was of a text and the tool is one of its
    catalog."""
    routed, result, tool = filtered._routed, filtered.result, verdict.tool_id
    if not verdict.ok or routed is None or tool is None:
        return None
    router = routed.router
    if router.memory is None or result.form != "text" or tool not in routed.catalog:
        return None
    return Lesson(router, result.query, tool)


class LearningQueue:
    """Lessons learned in order by one worker thread (started with the first lesson).

    At most ``max_lessons`` wait, holding at most ``max_chars`` characters of messages: past
    either, a lesson is dropped, counted in :attr:`dropped` and told to ``on_drop``, so a
    store that stalls costs bounded memory and no request. :meth:`join` waits until every
    lesson submitted so far is learned; :meth:`close` learns those waiting and stops.
    """

    def __init__(
        self,
        *,
        max_lessons: int = LEARN_QUEUE_LESSONS,
        max_chars: int = LEARN_QUEUE_CHARS,
        on_drop: Callable[[], object] | None = None,
    ) -> None:
        """See the class docstring."""
        self.max_lessons = max_lessons
        self.max_chars = max_chars
        self._on_drop = on_drop
        self._waiting: deque[Lesson] = deque()
        self._chars = 0
        self._learning = False  # the worker holds a lesson
        self._closed = False
        self._changed = threading.Condition()
        self._worker: threading.Thread | None = None
        #: Lessons dropped: the queue was full, or closed.
        self.dropped = 0

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
        if not room and self._on_drop is not None:
            self._on_drop()
        return room

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every lesson submitted is learned (or ``timeout`` seconds); whether
        they were."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._waiting and not self._learning, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Take no more lessons, learn those waiting, and stop the worker; waits for it up
        to ``timeout`` seconds (it is a daemon: it holds no process open). Whether it
        stopped."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            worker = self._worker
        if worker is None:
            return True
        worker.join(timeout)
        return not worker.is_alive()

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
            except Exception:  # a bug: the worker must go on learning the next ones
                _log.exception("learning from a verified call failed")
            finally:
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
