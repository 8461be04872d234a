"""Learning from the calls a filter verified: what each call teaches.

A call that passes ``ToolFilter.verify`` counts as used for the user message its request was
routed on (a :class:`~toolgate.routing.learning_queue.Lesson`). The HTTP gateway checks
answers on its event loop, so it hands each lesson to a
:class:`~toolgate.routing.learning_queue.LearningQueue` (the MCP proxy's is the same): one
worker thread learns them in order, and the loop never waits for the store.

Learning is best effort: a router whose memory cannot be read from the store (a database
down, a file locked past its timeout) routes without it, and a :class:`LearningStarter` (from
:mod:`toolgate.routing.learning_starter`, which the MCP proxy uses too) tries the store
again for it later, rather than failing the request.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from toolgate.routing.learned_store import StoreError
from toolgate.routing.learning_queue import (
    LEARN_QUEUE_CHARS,
    LEARN_QUEUE_LESSONS,
    LearningFailures,
    LearningQueue,
    Lesson,
)
from toolgate.routing.learning_starter import LEARN_RETRY_S, LearningStarter
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
    "learn_now",
    "lesson_of",
    "verified_call_failures",
]

_log = logging.getLogger("toolgate.gateway")


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


def learn_now(lesson: Lesson, failures: LearningFailures) -> None:
    """Learn ``lesson`` in the caller's thread. A store that fails is logged as
    ``failures`` says (once per kind of error while it fails), not raised: the verdict
    stands without it."""
    try:
        lesson.learn()
    except StoreError as exc:
        failures.failed(exc)
    else:
        failures.learned()


def verified_call_failures() -> LearningFailures:
    """The log of lessons :func:`learn_now` fails to learn, for one filter's calls."""
    return LearningFailures(_log, "learning from a verified call failed: %s")
